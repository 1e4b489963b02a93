package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// (p) egress: what the egress proxy adds to a job's HTTPS, against the
// same job on an open bridge network, in the same run. A server on a
// Docker network of the phase's own serves HTTPS (a certificate the phase
// makes); the same container (the sandbox image, the same script) fetches
// from it directly on that network, then through a worker's egress
// gateway (its own /28 and the proxy, spliced by SNI) with a policy
// allowing the server's name. The script times itself, so the container's
// start is not in the figures: a 1 MiB download and 100 small requests,
// each on a new connection (as urllib makes them), the median of rounds.

const egressServer = `
import http.server, socketserver, ssl
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        body = b"x" * (1 << 20) if self.path == "/big" else b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
srv = S(("0.0.0.0", 8443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/srv/cert.pem", "/srv/key.pem")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
`

const egressClient = `
import json, os, ssl, statistics, time, urllib.request
open("/tmp/ca.pem", "w").write(os.environ["BENCH_CA"])
ctx = ssl.create_default_context(cafile="/tmp/ca.pem")
base = "https://bench.test:8443"
def get(path):
    return urllib.request.urlopen(base + path, timeout=30, context=ctx).read()
deadline = time.time() + 60
while True:  # until the proxy knows the sandbox (or the server is up)
    try:
        get("/small"); break
    except Exception:
        if time.time() > deadline: raise
        time.sleep(0.2)
big, small = [], []
for _ in range(int(os.environ["BENCH_ROUNDS"])):
    t = time.perf_counter(); n = len(get("/big")); big.append(time.perf_counter() - t)
    assert n == 1 << 20, n
    t = time.perf_counter()
    for _ in range(100):
        get("/small")
    small.append(time.perf_counter() - t)
print(json.dumps({"big": statistics.median(big), "small": statistics.median(small)}))
`

type egressFigures struct {
	rounds, trials           int
	directBig, directSmall   time.Duration
	proxiedBig, proxiedSmall time.Duration
}

func egressPhase(ctx context.Context, o options) (*egressFigures, error) {
	image := o.image
	if image == "" {
		image = executor.DefaultImage
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	id := randomHex(4)
	netName := "sandfleet-bench-egress-" + id
	if out, err := exec.CommandContext(ctx, "docker", "network", "create", netName).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("docker network create: %v: %s", err, out)
	}
	defer exec.Command("docker", "network", "rm", netName).Run()
	dir, err := os.MkdirTemp("", "sandfleet-bench-egress-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	certPEM, keyPEM, err := selfSigned("bench.test")
	if err != nil {
		return nil, err
	}
	for f, b := range map[string][]byte{"cert.pem": certPEM, "key.pem": keyPEM, "server.py": []byte(egressServer)} {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return nil, err
		}
	}
	server := netName + "-server"
	if out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--rm", "--name", server, "--network", netName,
		"--user", "65534:65534", "-v", dir+":/srv:ro", "--entrypoint", "python3", image, "/srv/server.py").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("the server: %v: %s", err, out)
	}
	defer exec.Command("docker", "rm", "-f", server).Run()
	ipOut, err := exec.CommandContext(ctx, "docker", "inspect", "-f", "{{(index .NetworkSettings.Networks \""+netName+"\").IPAddress}}", server).Output()
	if err != nil {
		return nil, fmt.Errorf("inspect the server: %w", err)
	}
	serverIP, err := netip.ParseAddr(strings.TrimSpace(string(ipOut)))
	if err != nil {
		return nil, fmt.Errorf("the server's address %q: %w", ipOut, err)
	}
	gctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	gw, err := egressnet.Start(gctx, egressnet.Config{Client: cli, Name: "sandfleet-bench-egress-gw-" + id,
		Image: o.egressImage, Outside: netName, Hosts: map[string][]netip.Addr{"bench.test": {serverIP}}})
	if err != nil {
		return nil, err
	}
	defer gw.Close(context.Background())

	f := &egressFigures{rounds: o.egressRounds}
	env := []string{"-e", "BENCH_CA=" + string(certPEM), "-e", fmt.Sprintf("BENCH_ROUNDS=%d", o.egressRounds)}
	// Interleaved, so that the machine's load falls on both alike.
	var db, ds, pb, ps []time.Duration
	for range o.egressTrials {
		big, small, err := egressRun(ctx, append([]string{"--network", netName, "--add-host", "bench.test:" + serverIP.String()}, env...), image, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("direct: %w", err)
		}
		db, ds = append(db, big), append(ds, small)
		n := &limits.Network{Allow: []limits.Rule{{Host: "bench.test", Port: 8443}}}
		att, err := gw.Prepare(ctx, n)
		if err != nil {
			return nil, err
		}
		args := append([]string{"--network", att.Network}, env...)
		for k, v := range att.Env {
			args = append(args, "-e", k+"="+v)
		}
		big, small, err = egressRun(ctx, args, image,
			func(cid string) error { return gw.Admit(ctx, cid, att, n) },
			func(cid string) { gw.Release(context.Background(), cid) })
		gw.Drop(context.Background(), att)
		if err != nil {
			return nil, fmt.Errorf("through the proxy: %w", err)
		}
		pb, ps = append(pb, big), append(ps, small)
	}
	f.directBig, f.directSmall, f.proxiedBig, f.proxiedSmall = pct(db, .5), pct(ds, .5), pct(pb, .5), pct(ps, .5)
	f.trials = o.egressTrials
	return f, nil
}

// egressRun runs the client script in a container of image with args, and
// returns its medians; admit, if set, is told the container's ID once it
// started, and release once it ended.
func egressRun(ctx context.Context, args []string, image string, admit func(string) error, release func(string)) (time.Duration, time.Duration, error) {
	run := append([]string{"run", "-d", "--user", "65534:65534", "--entrypoint", "python3"}, args...)
	run = append(run, image, "-c", egressClient)
	out, err := exec.CommandContext(ctx, "docker", run...).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("docker run: %v: %s", err, out)
	}
	cid := strings.TrimSpace(string(out))
	defer exec.Command("docker", "rm", "-f", cid).Run()
	if release != nil {
		defer release(cid)
	}
	if admit != nil {
		if err := admit(cid); err != nil {
			return 0, 0, err
		}
	}
	if out, err := exec.CommandContext(ctx, "docker", "wait", cid).Output(); err != nil || strings.TrimSpace(string(out)) != "0" {
		logs, _ := exec.Command("docker", "logs", cid).CombinedOutput()
		return 0, 0, fmt.Errorf("the client exited %s (%v): %s", bytes.TrimSpace(out), err, logs)
	}
	logs, err := exec.CommandContext(ctx, "docker", "logs", cid).Output()
	if err != nil {
		return 0, 0, err
	}
	var r struct{ Big, Small float64 }
	if err := json.Unmarshal(bytes.TrimSpace(logs), &r); err != nil {
		return 0, 0, fmt.Errorf("the client's figures %q: %w", logs, err)
	}
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return sec(r.Big), sec(r.Small), nil
}

func (f *egressFigures) print(w io.Writer) {
	if f == nil {
		return
	}
	ratio := func(a, b time.Duration) string {
		if b <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f×", float64(a)/float64(b))
	}
	verdict := func(a, b time.Duration) string {
		if b > 0 && float64(a)/float64(b) <= 1.2 {
			return "ok"
		}
		return "over"
	}
	fmt.Fprintf(w, "\n(p) egress proxy vs an open bridge network: HTTPS from the sandbox image, medians of %d trials × %d rounds, each request on a new connection\n", f.trials, f.rounds)
	fmt.Fprintf(w, "  %-28s %12s %12s %8s  target ≤ 1.2×\n", "", "bridge", "proxy", "ratio")
	fmt.Fprintf(w, "  %-28s %12s %12s %8s  %s\n", "1 MiB download", f.directBig.Round(time.Microsecond), f.proxiedBig.Round(time.Microsecond), ratio(f.proxiedBig, f.directBig), verdict(f.proxiedBig, f.directBig))
	fmt.Fprintf(w, "  %-28s %12s %12s %8s  %s\n", "100 small requests", f.directSmall.Round(time.Microsecond), f.proxiedSmall.Round(time.Microsecond), ratio(f.proxiedSmall, f.directSmall), verdict(f.proxiedSmall, f.directSmall))
}

// selfSigned makes a certificate for name that is its own trust anchor.
func selfSigned(name string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
