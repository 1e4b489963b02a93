package egressnet

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/egress"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// DefaultImage is the proxy's image, built locally (make images): a FROM
// scratch image of cmd/egress.
const DefaultImage = "sandfleet/egress:latest"

// Label marks the networks and the container of a worker's egress (its
// value is Config.Name).
const Label = "sandfleet.egress"

// Config configures a worker's egress. Zero values are the documented
// defaults.
type Config struct {
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
	// Protect adds ranges to egress.Protected. Start adds the host's own
	// addresses itself.
	Protect []netip.Prefix
	// Subnets is where each sandbox's own network gets its /28 from: one
	// network per sandbox, so that sandboxes never reach each other. It
	// must not overlap a network the host routes to. Zero: 10.231.0.0/16
	// (4096 sandboxes at once).
	Subnets netip.Prefix
	// Secrets are the operator's credentials the proxy adds to the
	// requests of the sandboxes whose policy names them.
	Secrets []egress.Secret
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

// DefaultSubnets is Config.Subnets' default.
var DefaultSubnets = netip.MustParsePrefix("10.231.0.0/16")

// sandboxBits is the size of each sandbox's network: the bridge's
// (unassigned) gateway address, the proxy's and the sandbox's.
const sandboxBits = 28

// Networks is a worker's egress: the proxy container that is the one way
// out of its sandboxes with a network, and a network of its own for each
// of them, which holds the sandbox and the proxy only.
type Networks struct {
	cfg       Config
	api       *client.Client
	container string // the proxy's container ID
	token     string // the control API's
	ctl       atomic.Pointer[egress.Control]
	ca        *egress.CA // the fleet CA, the worker's, handed to the proxy
	bundle    string     // the CA bundle's path on the host

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

// Start starts the proxy on Outside, replacing what a previous run
// of the same Name left (its container and its sandboxes' networks).
// Sandboxes' networks are made by Prepare.
func Start(ctx context.Context, cfg Config) (*Networks, error) {
	if cfg.Client == nil || cfg.Name == "" {
		return nil, errors.New("egress: Config needs Client and Name")
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
	nw := &Networks{cfg: cfg, api: cfg.Client, used: map[int]bool{}, count: 1 << (sandboxBits - cfg.Subnets.Bits()),
		regs: map[string]registration{}, token: rand.Text()}
	var err error
	if nw.ca, err = egress.NewCA(); err != nil {
		return nil, fmt.Errorf("egress: the fleet CA: %w", err)
	}
	if _, err := nw.api.ImageInspect(ctx, cfg.Image); err != nil {
		return nil, fmt.Errorf("egress: the proxy's image %s (build it with make images): %w", cfg.Image, err)
	}
	nw.removeLeftovers(ctx)
	if err := nw.startProxy(ctx); err != nil {
		nw.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	if err := nw.writeBundle(); err != nil {
		nw.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	nw.startWatch()
	return nw, nil
}

// Prepare is the hook for a sandbox's container spec (a job's, a
// session's): it makes the sandbox's own network (internal: no route out;
// no address of the host on it, since a plain internal network leaves the
// bridge's gateway address on the host, where every service listening on
// all addresses would answer), attaches the proxy to it, and returns the
// network and environment of a sandbox with policy n. Drop undoes it once
// the sandbox's container is removed.
func (nw *Networks) Prepare(ctx context.Context, n *limits.Network) (Attachment, error) {
	if n.None() {
		return Attachment{}, errors.New("egress: no network to prepare")
	}
	var lastErr error
	for range 8 {
		block, err := nw.claim()
		if err != nil {
			return Attachment{}, err
		}
		att, err := nw.prepare(ctx, block)
		if err == nil {
			if len(n.Secrets) > 0 {
				att.CABundle = nw.bundle
				maps.Copy(att.Env, CAEnv(CABundlePath))
			}
			return att, nil
		}
		lastErr = err
		nw.release(block, !cerrdefs.IsConflict(err) && !strings.Contains(err.Error(), "overlap"))
		if ctx.Err() != nil {
			break
		}
	}
	return Attachment{}, lastErr
}

func (nw *Networks) prepare(ctx context.Context, block int) (Attachment, error) {
	subnet := nw.block(block)
	name := fmt.Sprintf("%s-%d", nw.cfg.Name, block)
	no := false
	proxyIP := subnet.Addr().Next().Next()
	_, err := nw.api.NetworkCreate(ctx, name, client.NetworkCreateOptions{
		Driver:     "bridge",
		Internal:   true,
		EnableIPv6: &no,
		IPAM:       &network.IPAM{Config: []network.IPAMConfig{{Subnet: subnet, Gateway: subnet.Addr().Next()}}},
		Options:    map[string]string{"com.docker.network.bridge.inhibit_ipv4": "true"},
		Labels:     map[string]string{Label: nw.cfg.Name},
	})
	if err != nil {
		return Attachment{}, fmt.Errorf("egress: create the sandbox's network %s: %w", subnet, err)
	}
	_, err = nw.api.NetworkConnect(ctx, name, client.NetworkConnectOptions{Container: nw.container,
		EndpointConfig: &network.EndpointSettings{IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: proxyIP}}})
	if err != nil {
		_, _ = nw.api.NetworkRemove(context.WithoutCancel(ctx), name, client.NetworkRemoveOptions{})
		return Attachment{}, fmt.Errorf("egress: attach the proxy to %s: %w", name, err)
	}
	proxy := fmt.Sprintf("http://%s", net.JoinHostPort(proxyIP.String(), fmt.Sprint(egress.ProxyPort)))
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
func (nw *Networks) Drop(ctx context.Context, att Attachment) error {
	ctx = context.WithoutCancel(ctx)
	_, _ = nw.api.NetworkDisconnect(ctx, att.Network, client.NetworkDisconnectOptions{Container: nw.container, Force: true})
	_, err := nw.api.NetworkRemove(ctx, att.Network, client.NetworkRemoveOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		// Kept claimed: the network is still there.
		return fmt.Errorf("egress: remove %s: %w", att.Network, err)
	}
	nw.release(att.block, true)
	return nil
}

// claim takes a free block of Subnets, round robin, so that a network
// just removed is the last to be made again.
func (nw *Networks) claim() (int, error) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	for range nw.count {
		b := nw.next
		nw.next = (nw.next + 1) % nw.count
		if !nw.used[b] {
			nw.used[b] = true
			return b, nil
		}
	}
	return 0, fmt.Errorf("egress: all %d sandbox networks of %s are in use", nw.count, nw.cfg.Subnets)
}

// release frees a block; free false keeps it out of use (another network
// of the engine holds it).
func (nw *Networks) release(block int, free bool) {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if free {
		delete(nw.used, block)
	}
}

func (nw *Networks) block(i int) netip.Prefix {
	a := nw.cfg.Subnets.Addr().As4()
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
func (nw *Networks) Close(ctx context.Context) error {
	if nw.stop != nil {
		nw.stop()
		nw.watching.Wait()
	}
	var err error
	if nw.container != "" {
		if _, e := nw.api.ContainerRemove(ctx, nw.container, client.ContainerRemoveOptions{Force: true}); e != nil && !cerrdefs.IsNotFound(e) {
			err = e
		}
	}
	nw.removeLeftovers(ctx)
	if nw.bundle != "" {
		os.Remove(nw.bundle)
	}
	return err
}
