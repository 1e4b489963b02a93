package egressnet

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/sandfleet/sandfleet/internal/egress"
)

// The proxy's container: started with the fleet CA and the sandboxes'
// subnets, its leftovers removed, and the CA bundle sandboxes with
// secrets trust written beside it.

// systemBundles are where a host keeps its CA roots.
var systemBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// The proxy's memory: the container's limit, and the Go runtime's soft
// limit under it (GOMEMLIMIT).
const (
	proxyMemory   = 256 << 20
	proxyMemLimit = 192 << 20
)

// writeBundle writes the CA bundle of sandboxes with secrets: the host's
// roots, so that every other host verifies as before, and the proxy's
// fleet CA.
func (nw *Networks) writeBundle() error {
	ca := nw.ca.PEM
	var bundle []byte
	for _, f := range systemBundles {
		if b, err := os.ReadFile(f); err == nil {
			bundle = append(b, '\n')
			break
		}
	}
	bundle = append(bundle, ca...)
	dir := nw.cfg.Dir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), nw.cfg.Name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("egress: the CA bundle's directory: %w", err)
	}
	os.Chmod(dir, 0o755) // a sandbox's uid reads it through the mount
	path := filepath.Join(dir, "ca-bundle.pem")
	if err := os.WriteFile(path+".new", bundle, 0o644); err != nil {
		return fmt.Errorf("egress: write the CA bundle: %w", err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		return fmt.Errorf("egress: write the CA bundle: %w", err)
	}
	nw.bundle = path
	return nil
}

func (nw *Networks) removeLeftovers(ctx context.Context) {
	_, _ = nw.api.ContainerRemove(ctx, nw.cfg.Name, client.ContainerRemoveOptions{Force: true})
	nets, err := nw.api.NetworkList(ctx, client.NetworkListOptions{Filters: make(client.Filters).Add("label", Label+"="+nw.cfg.Name)})
	if err != nil {
		return
	}
	for _, n := range nets.Items {
		// Fails while a sandbox is attached: the worker's Reap removes it,
		// and the next start this network.
		_, _ = nw.api.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{})
	}
}

func (nw *Networks) startProxy(ctx context.Context) error {
	caPEM, err := nw.ca.MarshalPEM()
	if err != nil {
		return err
	}
	protect := slices.Clone(nw.cfg.Protect)
	protect = append(protect, hostPrefixes()...)
	args := []string{"--sandbox-net", nw.cfg.Subnets.String()}
	if len(protect) > 0 {
		args = append(args, "--protect", joinPrefixes(protect))
	}
	if len(nw.cfg.Hosts) > 0 {
		var hs []string
		for _, name := range slices.Sorted(maps.Keys(nw.cfg.Hosts)) {
			for _, a := range nw.cfg.Hosts[name] {
				hs = append(hs, name+"="+a.String())
			}
		}
		args = append(args, "--hosts", strings.Join(hs, ","))
	}
	pids := int64(512)
	env := []string{"SANDFLEET_EGRESS_TOKEN=" + nw.token, egress.EnvCA + "=" + string(caPEM),
		// The Go runtime collects harder as it nears this, under the
		// container's limit: a burst is slower, not an OOM kill that
		// takes every sandbox's network with it.
		fmt.Sprintf("GOMEMLIMIT=%dMiB", proxyMemLimit>>20)}
	if len(nw.cfg.UpstreamCA) > 0 {
		env = append(env, "SANDFLEET_EGRESS_UPSTREAM_CA="+string(nw.cfg.UpstreamCA))
	}
	created, err := nw.api.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: nw.cfg.Name,
		Config: &container.Config{
			Image:  nw.cfg.Image,
			Cmd:    args,
			Env:    env,
			User:   "65534:65534",
			Labels: map[string]string{Label: nw.cfg.Name},
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    container.NetworkMode(nw.cfg.Outside),
			ReadonlyRootfs: true,
			CapDrop:        []string{"ALL"},
			SecurityOpt:    []string{"no-new-privileges"},
			RestartPolicy:  container.RestartPolicy{Name: "on-failure", MaximumRetryCount: 5},
			Resources: container.Resources{
				Memory: proxyMemory, MemorySwap: proxyMemory, NanoCPUs: 1e9, PidsLimit: &pids,
			},
			LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "10m", "max-file": "2"}},
		},
	})
	if err != nil {
		return fmt.Errorf("egress: create the proxy: %w", err)
	}
	nw.container = created.ID
	if _, err := nw.api.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("egress: start the proxy: %w", err)
	}
	h, err := nw.connect(ctx, 20*time.Second)
	if err != nil {
		return err
	}
	if h.CA != nw.ca.Fingerprint() {
		return fmt.Errorf("egress: the proxy's CA (sha256 %s) is not the one the worker gave it", h.CA)
	}
	nw.instance = h.Instance
	nw.cfg.Logger.Info("egress proxy up", "subnets", nw.cfg.Subnets, "control", nw.control().URL)
	return nil
}

// hostPrefixes are the host's own addresses, protected so that no rule
// wider than one of them reaches the host's services through the proxy.
func hostPrefixes() []netip.Prefix {
	var out []netip.Prefix
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				ip = ip.Unmap()
				out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
			}
		}
	}
	return out
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
