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
	"slices"
	"strings"
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
	// addresses and the outside network's subnet itself.
	Protect []netip.Prefix
	Logger  *slog.Logger
}

// Gateway is a worker's egress: the internal network its sandboxes with a
// network are put on, and the proxy container that is their one way out.
type Gateway struct {
	cfg       GatewayConfig
	api       *client.Client
	network   string // the internal network's name
	container string // the proxy's container ID
	proxyIP   netip.Addr
	subnet    netip.Prefix
	ctl       *Control
}

// Attachment is how a sandbox with a network is configured: the Docker
// network it is attached to and what its environment must hold for
// programs to use the proxy. A program that ignores the environment gets
// no connection at all: nothing else is reachable.
type Attachment struct {
	Network string
	Env     map[string]string
}

// StartGateway creates the internal network (no route out; the host has
// no address on it, so the host's own services are out of reach too) and
// starts the proxy attached to it and to Outside, replacing what a
// previous run of the same Name left.
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
	g := &Gateway{cfg: cfg, api: cfg.Client, network: cfg.Name}
	if _, err := g.api.ImageInspect(ctx, cfg.Image); err != nil {
		return nil, fmt.Errorf("egress: the proxy's image %s (build it with make images): %w", cfg.Image, err)
	}
	g.removeLeftovers(ctx)
	no := false
	netw, err := g.api.NetworkCreate(ctx, g.network, client.NetworkCreateOptions{
		Driver:     "bridge",
		Internal:   true,
		EnableIPv6: &no,
		Options: map[string]string{
			// No address of the host on the bridge: a plain internal
			// network leaves the gateway address on the host, where every
			// service listening on all addresses answers the sandboxes.
			"com.docker.network.bridge.inhibit_ipv4": "true",
		},
		Labels: map[string]string{LabelGateway: cfg.Name},
	})
	if err != nil {
		return nil, fmt.Errorf("egress: create the sandboxes' network: %w", err)
	}
	ni, err := g.api.NetworkInspect(ctx, netw.ID, client.NetworkInspectOptions{})
	if err != nil || len(ni.Network.IPAM.Config) == 0 {
		g.Close(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("egress: inspect the sandboxes' network: %v", err)
	}
	g.subnet = ni.Network.IPAM.Config[0].Subnet
	if err := g.startProxy(ctx); err != nil {
		g.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return g, nil
}

func (g *Gateway) removeLeftovers(ctx context.Context) {
	_, _ = g.api.ContainerRemove(ctx, g.cfg.Name, client.ContainerRemoveOptions{Force: true})
	_, _ = g.api.NetworkRemove(ctx, g.cfg.Name, client.NetworkRemoveOptions{})
}

func (g *Gateway) startProxy(ctx context.Context) error {
	token := randHex(32)
	protect := slices.Clone(g.cfg.Protect)
	protect = append(protect, hostPrefixes()...)
	args := []string{"--sandbox-net", g.subnet.String()}
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
	created, err := g.api.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: g.cfg.Name,
		Config: &container.Config{
			Image:  g.cfg.Image,
			Cmd:    args,
			Env:    []string{"SANDFLEET_EGRESS_TOKEN=" + token},
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
				Memory: 256 << 20, MemorySwap: 256 << 20, NanoCPUs: 1e9, PidsLimit: &pids,
			},
			LogConfig: container.LogConfig{Type: "json-file", Config: map[string]string{"max-size": "10m", "max-file": "2"}},
		},
	})
	if err != nil {
		return fmt.Errorf("egress: create the proxy: %w", err)
	}
	g.container = created.ID
	if _, err := g.api.NetworkConnect(ctx, g.network, client.NetworkConnectOptions{Container: created.ID}); err != nil {
		return fmt.Errorf("egress: attach the proxy to the sandboxes' network: %w", err)
	}
	if _, err := g.api.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		return fmt.Errorf("egress: start the proxy: %w", err)
	}
	in, err := g.api.ContainerInspect(ctx, created.ID, client.ContainerInspectOptions{})
	if err != nil || in.Container.NetworkSettings == nil {
		return fmt.Errorf("egress: inspect the proxy: %v", err)
	}
	nets := in.Container.NetworkSettings.Networks
	inside, outside := nets[g.network], nets[g.cfg.Outside]
	if inside == nil || outside == nil || !inside.IPAddress.IsValid() || !outside.IPAddress.IsValid() {
		return fmt.Errorf("egress: the proxy has no address on %s or %s", g.network, g.cfg.Outside)
	}
	g.proxyIP = inside.IPAddress
	g.ctl = &Control{URL: fmt.Sprintf("http://%s", net.JoinHostPort(outside.IPAddress.String(), fmt.Sprint(ControlPort))), Token: token}
	deadline := time.Now().Add(20 * time.Second)
	for {
		hctx, cancel := context.WithTimeout(ctx, time.Second)
		err := g.ctl.Healthy(hctx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("egress: the proxy does not answer on %s: %w", g.ctl.URL, err)
		}
		time.Sleep(100 * time.Millisecond) // polling the proxy's start; no event says it listens
	}
	g.cfg.Logger.Info("egress proxy up", "network", g.network, "subnet", g.subnet, "proxy", g.proxyIP, "control", g.ctl.URL)
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

// Attachment is the hook for a sandbox's container spec: the network and
// environment of a sandbox with policy n (which must not be none).
func (g *Gateway) Attachment(n *limits.Network) Attachment {
	proxy := fmt.Sprintf("http://%s", net.JoinHostPort(g.proxyIP.String(), fmt.Sprint(ProxyPort)))
	return Attachment{Network: g.network, Env: ProxyEnv(proxy)}
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

// Admit registers the sandbox container id, started on the gateway's
// network, with its policy: its job must not start before.
func (g *Gateway) Admit(ctx context.Context, id string, n *limits.Network) error {
	in, err := g.api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return fmt.Errorf("egress: inspect the sandbox: %w", err)
	}
	var ep *network.EndpointSettings
	if in.Container.NetworkSettings != nil {
		ep = in.Container.NetworkSettings.Networks[g.network]
	}
	if ep == nil || !ep.IPAddress.IsValid() {
		return fmt.Errorf("egress: the sandbox has no address on %s", g.network)
	}
	return g.ctl.Register(ctx, id, ep.IPAddress, n)
}

// Release forgets the sandbox id and returns its egress.
func (g *Gateway) Release(ctx context.Context, id string) ([]limits.NetworkUse, error) {
	return g.ctl.Release(ctx, id)
}

// Close removes the proxy and the network. Sandboxes still attached keep
// the network (the worker's Reap removes them; the next start removes it).
func (g *Gateway) Close(ctx context.Context) error {
	var errs []error
	if g.container != "" {
		if _, err := g.api.ContainerRemove(ctx, g.container, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if _, err := g.api.NetworkRemove(ctx, g.network, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
