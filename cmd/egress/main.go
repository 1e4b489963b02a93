// Command egress is the fleet's egress proxy, run by a worker in a
// container of its own (FROM scratch, see deploy/compose/egress.Dockerfile)
// attached to the sandboxes' internal network and to the outside. The
// worker starts it, registers each sandbox's address and policy through
// the control API, and takes back its accounting; see internal/egress.
//
//	egress --sandbox-net CIDR [--listen ADDR] [--control ADDR]
//	       [--hosts NAME=IP,...] [--protect CIDR,...]
//
// The control API's token is read from SANDFLEET_EGRESS_TOKEN, and PEM
// the proxy trusts besides the system's roots, when it verifies a host it
// intercepts, from SANDFLEET_EGRESS_UPSTREAM_CA. The fleet CA it signs
// intercepted hosts' certificates with, certificate and key, PEM, is read
// from SANDFLEET_EGRESS_CA (the worker makes it, so that a restarted
// proxy signs with the CA its sandboxes trust); without it, one is made
// at the start. A Go memory limit under the container's (GOMEMLIMIT,
// which the worker sets) keeps the proxy out of the OOM killer's way.
package main

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sandfleet/sandfleet/internal/egress"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "egress:", err)
		os.Exit(2)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("egress", flag.ContinueOnError)
	listen := fs.String("listen", fmt.Sprintf(":%d", egress.ProxyPort), "`ADDR` the sandboxes' proxy listens on")
	control := fs.String("control", fmt.Sprintf(":%d", egress.ControlPort), "`ADDR` of the worker's control API")
	sandboxNet := fs.String("sandbox-net", "", "`CIDR` of the sandboxes' network: the only sources the proxy serves, never the control API's (required)")
	hosts := fs.String("hosts", "", "`LIST` of NAME=IP pinned, never looked up (may be private addresses)")
	protect := fs.String("protect", "", "`LIST` of CIDRs protected besides the private, loopback and link-local ranges")
	if err := fs.Parse(args); err != nil {
		return err
	}
	token := os.Getenv("SANDFLEET_EGRESS_TOKEN")
	if token == "" {
		return errors.New("SANDFLEET_EGRESS_TOKEN is not set")
	}
	sn, err := netip.ParsePrefix(*sandboxNet)
	if err != nil {
		return fmt.Errorf("--sandbox-net: %w", err)
	}
	pinned, err := egress.ParseHosts(*hosts)
	if err != nil {
		return fmt.Errorf("--hosts: %w", err)
	}
	res := &egress.Resolver{Hosts: pinned, Lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}}
	prot := append([]netip.Prefix{}, egress.Protected...)
	for s := range strings.SplitSeq(*protect, ",") {
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("--protect: %w", err)
		}
		prot = append(prot, p)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ca, err := fleetCA(os.Getenv(egress.EnvCA))
	if err != nil {
		return fmt.Errorf("the fleet CA: %w", err)
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if extra := os.Getenv("SANDFLEET_EGRESS_UPSTREAM_CA"); extra != "" && !roots.AppendCertsFromPEM([]byte(extra)) {
		return errors.New("SANDFLEET_EGRESS_UPSTREAM_CA holds no PEM certificate")
	}
	p := &egress.Proxy{Resolver: res, Protect: prot, Forbid: egress.ForbiddenFor(sn, ownAddrs()), Log: log, CA: ca, Roots: roots}
	pl, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	cl, err := net.Listen("tcp", *control)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: egress.ControlHandler(p, token, sn), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- p.Serve(pl) }()
	go func() { errc <- srv.Serve(cl) }()
	log.Info("egress proxy listening", "proxy", pl.Addr().String(), "control", cl.Addr().String(), "sandbox_net", sn.String(), "pinned_hosts", len(res.Hosts))
	select {
	case <-ctx.Done():
		pl.Close()
		srv.Close()
		return nil
	case err := <-errc:
		return err
	}
}

// ownAddrs are the addresses of the proxy's interfaces at its start: its
// outside network's (those on the sandboxes' networks, attached later,
// are within --sandbox-net).
func ownAddrs() []netip.Addr {
	var out []netip.Addr
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}

// fleetCA is the CA the worker handed in (the same at every restart of
// the container, so that its sandboxes' bundles keep trusting it), or
// one made now for a proxy run alone.
func fleetCA(pemBytes string) (*egress.CA, error) {
	if pemBytes == "" {
		return egress.NewCA()
	}
	return egress.ParseCA([]byte(pemBytes))
}
