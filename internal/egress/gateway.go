package egress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/pkg/limits"
)

// DefaultImage is the proxy's image, built locally (make images): a FROM
// scratch image of cmd/egress.
const DefaultImage = "sandfleet/egress:latest"

// Ports of the proxy in its container.
const (
	ProxyPort   = 3128 // the sandboxes' proxy, on the internal network
	ControlPort = 3129 // the worker's control API, on the outside network
)

// LabelGateway marks the network and the container of a worker's gateway
// (its value is GatewayConfig.Name).
const LabelGateway = "sandfleet.egress"

// GatewayConfig configures a worker's egress gateway. Zero values are the
// documented defaults.
type GatewayConfig struct {
	// Client talks to the Docker engine. Required.
	Client *client.Client
	// Name names the internal network and the proxy's container; one per
	// worker ("sandfleet-egress-<worker id>"). Required.
	Name string
	// Image is the proxy's image. "": DefaultImage.
	Image string
	// Outside is the network the proxy reaches the world by, which the
	// worker must reach the proxy's control API on. "": "bridge".
	Outside string
	// Hosts pins names to addresses for the proxy (tests, air-gapped
	// fleets, a mirror): they are never looked up, and may be protected
	// addresses.
	Hosts map[string][]netip.Addr
	// Protect adds ranges to Protected. The gateway adds the host's own
	// addresses itself.
	Protect []netip.Prefix
	// Subnets is where each sandbox's own network gets its /28 from: one
	// network per sandbox, so that sandboxes never reach each other. It
	// must not overlap a network the host routes to. Zero: 10.231.0.0/16
	// (4096 sandboxes at once).
	Subnets netip.Prefix
	// Secrets are the operator's credentials the proxy adds to the
	// requests of the sandboxes whose policy names them.
	Secrets []Secret
	// UpstreamCA is PEM the proxy trusts, besides the system's roots,
	// when it verifies an intercepted host (a test's, a mirror's).
	UpstreamCA []byte
	// Dir is where the CA bundle that sandboxes with secrets mount is
	// written: a directory of the Docker engine's host. "": a directory
	// named after Name in os.TempDir().
	Dir string
	// HealthEvery is how often the worker asks whether its proxy is up and
	// the same process: a proxy restarted (by the engine after an OOM
	// kill, or by the worker when it is found stopped) gets every live
	// sandbox registered again. Zero: 2s.
	HealthEvery time.Duration
	Logger      *slog.Logger
}

// CABundlePath is where a sandbox with secrets finds the CA bundle it
// trusts: the system's roots and the fleet CA, mounted read-only.
const CABundlePath = "/etc/sandfleet/ca-bundle.pem"

// systemBundles are where a host keeps its CA roots.
var systemBundles = []string{"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/cert.pem"}

// DefaultSubnets is GatewayConfig.Subnets' default.
var DefaultSubnets = netip.MustParsePrefix("10.231.0.0/16")

// sandboxBits is the size of each sandbox's network: the bridge's
// (unassigned) gateway address, the proxy's and the sandbox's.
const sandboxBits = 28

// The proxy's memory: the container's limit, and the Go runtime's soft
// limit under it (GOMEMLIMIT).
const (
	proxyMemory   = 256 << 20
	proxyMemLimit = 192 << 20
)

// Gateway is a worker's egress: the proxy container that is the one way
// out of its sandboxes with a network, and a network of its own for each
// of them, which holds the sandbox and the proxy only.
type Gateway struct {
	cfg       GatewayConfig
	api       *client.Client
	container string // the proxy's container ID
	token     string // the control API's
	ctl       atomic.Pointer[Control]
	ca        *CA    // the fleet CA, the worker's, handed to the proxy
	bundle    string // the CA bundle's path on the host

	// regMu orders the registrations (Admit, Update, Release) with their
	// replay on a restarted proxy, so that a replay never brings back a
	// policy a session has since replaced; regs are the live ones.
	regMu    sync.Mutex
	regs     map[string]registration
	instance string // the proxy process the registrations are with
	stop     context.CancelFunc
	watching sync.WaitGroup

	mu    sync.Mutex
	used  map[int]bool // blocks of Subnets held by a sandbox's network
	next  int
	count int // blocks in Subnets
}

// Attachment is how a sandbox with a network is configured: the Docker
// network of its own it is attached to (with the proxy), and what its
// environment must hold for programs to use the proxy. A program that
// ignores the environment gets no connection at all: nothing else is
// reachable.
type Attachment struct {
	Network string
	Env     map[string]string
	// CABundle, for a sandbox with secrets, is the host's file to mount
	// read-only at CABundlePath.
	CABundle string
	block    int
}

// StartGateway starts the proxy on Outside, replacing what a previous run
// of the same Name left (its container and its sandboxes' networks).
// Sandboxes' networks are made by Prepare.
func StartGateway(ctx context.Context, cfg GatewayConfig) (*Gateway, error) {
	if cfg.Client == nil || cfg.Name == "" {
		return nil, errors.New("egress: GatewayConfig needs Client and Name")
	}
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.Outside == "" {
		cfg.Outside = "bridge"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if !cfg.Subnets.IsValid() {
		cfg.Subnets = DefaultSubnets
	}
	if !cfg.Subnets.Addr().Is4() || cfg.Subnets.Bits() > sandboxBits {
		return nil, fmt.Errorf("egress: Subnets %s: want an IPv4 prefix of /%d or wider", cfg.Subnets, sandboxBits)
	}
	cfg.Subnets = cfg.Subnets.Masked()
	if cfg.HealthEvery <= 0 {
		cfg.HealthEvery = 2 * time.Second
	}
	g := &Gateway{cfg: cfg, api: cfg.Client, used: map[int]bool{}, count: 1 << (sandboxBits - cfg.Subnets.Bits()),
		regs: map[string]registration{}, token: randHex(32)}
	var err error
	if g.ca, err = NewCA(); err != nil {
		return nil, fmt.Errorf("egress: the fleet CA: %w", err)
	}
	if _, err := g.api.ImageInspect(ctx, cfg.Image); err != nil {
		return nil, fmt.Errorf("egress: the proxy's image %s (build it with make images): %w", cfg.Image, err)
	}
	g.removeLeftovers(ctx)
	if err := g.startProxy(ctx); err != nil {
		g.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := g.writeBundle(); err != nil {
		g.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	g.startWatch()
	return g, nil
}

// writeBundle writes the CA bundle of sandboxes with secrets: the host's
// roots, so that every other host verifies as before, and the proxy's
// fleet CA.
func (g *Gateway) writeBundle() error {
	ca := g.ca.PEM
	var bundle []byte
	for _, f := range systemBundles {
		if b, err := os.ReadFile(f); err == nil {
			bundle = append(b, '\n')
			break
		}
	}
	bundle = append(bundle, ca...)
	dir := g.cfg.Dir
	if dir == "" {
		dir = filepath.Join(os.TempDir(), g.cfg.Name)
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
	g.bundle = path
	return nil
}

func (g *Gateway) removeLeftovers(ctx context.Context) {
	_, _ = g.api.ContainerRemove(ctx, g.cfg.Name, client.ContainerRemoveOptions{Force: true})
	nets, err := g.api.NetworkList(ctx, client.NetworkListOptions{Filters: make(client.Filters).Add("label", LabelGateway+"="+g.cfg.Name)})
	if err != nil {
		return
	}
	for _, n := range nets.Items {
		// Fails while a sandbox is attached: the worker's Reap removes it,
		// and the next start this network.
		_, _ = g.api.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{})
	}
}

func (g *Gateway) startProxy(ctx context.Context) error {
	caPEM, err := g.ca.MarshalPEM()
	if err != nil {
		return err
	}
	protect := slices.Clone(g.cfg.Protect)
	protect = append(protect, hostPrefixes()...)
	args := []string{"--sandbox-net", g.cfg.Subnets.String()}
	if len(protect) > 0 {
		args = append(args, "--protect", joinPrefixes(protect))
	}
	if len(g.cfg.Hosts) > 0 {
		var hs []string
		for _, name := range slices.Sorted(maps.Keys(g.cfg.Hosts)) {
			for _, a := range g.cfg.Hosts[name] {
				hs = append(hs, name+"="+a.String())
			}
		}
		args = append(args, "--hosts", strings.Join(hs, ","))
	}
	pids := int64(512)
	env := []string{"SANDFLEET_EGRESS_TOKEN=" + g.token, EnvCA + "=" + string(caPEM),
		// The Go runtime collects harder as it nears this, under the
		// container's limit: a burst is slower, not an OOM kill that
		// takes every sandbox's network with it.
		fmt.Sprintf("GOMEMLIMIT=%dMiB", proxyMemLimit>>20)}
	if len(g.cfg.UpstreamCA) > 0 {
		env = append(env, "SANDFLEET_EGRESS_UPSTREAM_CA="+string(g.cfg.UpstreamCA))
	}
	created, err := g.api.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: g.cfg.Name,
		Config: &container.Config{
			Image:  g.cfg.Image,
			Cmd:    args,
			Env:    env,
			User:   "65534:65534",
			Labels: map[string]string{LabelGateway: g.cfg.Name},
		},
		HostConfig: &container.HostConfig{
			NetworkMode:    container.NetworkMode(g.cfg.Outside),
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
	g.container = created.ID
	if _, err := g.api.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("egress: start the proxy: %w", err)
	}
	h, err := g.connect(ctx, 20*time.Second)
	if err != nil {
		return err
	}
	if h.CA != g.ca.Fingerprint() {
		return fmt.Errorf("egress: the proxy's CA (sha256 %s) is not the one the worker gave it", h.CA)
	}
	g.instance = h.Instance
	g.cfg.Logger.Info("egress proxy up", "subnets", g.cfg.Subnets, "control", g.control().URL)
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

// Prepare is the hook for a sandbox's container spec (a job's, a
// session's): it makes the sandbox's own network (internal: no route out;
// no address of the host on it, since a plain internal network leaves the
// bridge's gateway address on the host, where every service listening on
// all addresses would answer), attaches the proxy to it, and returns the
// network and environment of a sandbox with policy n. Drop undoes it once
// the sandbox's container is removed.
func (g *Gateway) Prepare(ctx context.Context, n *limits.Network) (Attachment, error) {
	if n.None() {
		return Attachment{}, errors.New("egress: no network to prepare")
	}
	var lastErr error
	for range 8 {
		block, err := g.claim()
		if err != nil {
			return Attachment{}, err
		}
		att, err := g.prepare(ctx, block)
		if err == nil {
			if len(n.Secrets) > 0 {
				att.CABundle = g.bundle
				maps.Copy(att.Env, CAEnv(CABundlePath))
			}
			return att, nil
		}
		lastErr = err
		g.release(block, !cerrdefs.IsConflict(err) && !strings.Contains(err.Error(), "overlap"))
		if ctx.Err() != nil {
			break
		}
	}
	return Attachment{}, lastErr
}

func (g *Gateway) prepare(ctx context.Context, block int) (Attachment, error) {
	subnet := g.block(block)
	name := fmt.Sprintf("%s-%d", g.cfg.Name, block)
	no := false
	proxyIP := subnet.Addr().Next().Next()
	_, err := g.api.NetworkCreate(ctx, name, client.NetworkCreateOptions{
		Driver:     "bridge",
		Internal:   true,
		EnableIPv6: &no,
		IPAM:       &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet, Gateway: subnet.Addr().Next()}}},
		Options:    map[string]string{"com.docker.network.bridge.inhibit_ipv4": "true"},
		Labels:     map[string]string{LabelGateway: g.cfg.Name},
	})
	if err != nil {
		return Attachment{}, fmt.Errorf("egress: create the sandbox's network %s: %w", subnet, err)
	}
	_, err = g.api.NetworkConnect(ctx, name, client.NetworkConnectOptions{Container: g.container,
		EndpointConfig: &network.EndpointSettings{IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: proxyIP}}})
	if err != nil {
		_, _ = g.api.NetworkRemove(context.WithoutCancel(ctx), name, client.NetworkRemoveOptions{})
		return Attachment{}, fmt.Errorf("egress: attach the proxy to %s: %w", name, err)
	}
	proxy := fmt.Sprintf("http://%s", net.JoinHostPort(proxyIP.String(), fmt.Sprint(ProxyPort)))
	return Attachment{Network: name, Env: ProxyEnv(proxy), block: block}, nil
}

// CAEnv is the environment that points programs at the CA bundle: the
// variables OpenSSL and Go (SSL_CERT_FILE), requests, curl and Node read.
func CAEnv(path string) map[string]string {
	return map[string]string{
		"SSL_CERT_FILE": path, "REQUESTS_CA_BUNDLE": path, "CURL_CA_BUNDLE": path,
		"NODE_EXTRA_CA_CERTS": path, "PIP_CERT": path, "GIT_SSL_CAINFO": path,
	}
}

// Drop removes a sandbox's network once its container is gone.
func (g *Gateway) Drop(ctx context.Context, att Attachment) error {
	ctx = context.WithoutCancel(ctx)
	_, _ = g.api.NetworkDisconnect(ctx, att.Network, client.NetworkDisconnectOptions{Container: g.container, Force: true})
	_, err := g.api.NetworkRemove(ctx, att.Network, client.NetworkRemoveOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		// Kept claimed: the network is still there.
		return fmt.Errorf("egress: remove %s: %w", att.Network, err)
	}
	g.release(att.block, true)
	return nil
}

// claim takes a free block of Subnets, round robin, so that a network
// just removed is the last to be made again.
func (g *Gateway) claim() (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for range g.count {
		b := g.next
		g.next = (g.next + 1) % g.count
		if !g.used[b] {
			g.used[b] = true
			return b, nil
		}
	}
	return 0, fmt.Errorf("egress: all %d sandbox networks of %s are in use", g.count, g.cfg.Subnets)
}

// release frees a block; free false keeps it out of use (another network
// of the engine holds it).
func (g *Gateway) release(block int, free bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if free {
		delete(g.used, block)
	}
}

func (g *Gateway) block(i int) netip.Prefix {
	a := g.cfg.Subnets.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(i) << (32 - sandboxBits)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), sandboxBits)
}

// ProxyEnv is the environment that points programs at the proxy: the
// upper- and lower-case names (curl reads only http_proxy in lower case;
// Go, pip, requests, urllib, git and npm read either), and NO_PROXY for
// the sandbox's own loopback.
func ProxyEnv(proxy string) map[string]string {
	return map[string]string{
		"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy,
		"ALL_PROXY": proxy, "all_proxy": proxy,
		"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
		// Node 24 uses the proxy variables only when told to.
		"NODE_USE_ENV_PROXY": "1",
	}
}

// Close removes the proxy, and the sandboxes' networks no sandbox holds
// (the next start removes the rest, after Reap).
func (g *Gateway) Close(ctx context.Context) error {
	if g.stop != nil {
		g.stop()
		g.watching.Wait()
	}
	var err error
	if g.container != "" {
		if _, e := g.api.ContainerRemove(ctx, g.container, client.ContainerRemoveOptions{Force: true}); e != nil && !cerrdefs.IsNotFound(e) {
			err = e
		}
	}
	g.removeLeftovers(ctx)
	if g.bundle != "" {
		os.Remove(g.bundle)
	}
	return err
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
