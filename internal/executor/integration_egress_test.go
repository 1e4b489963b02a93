package executor

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/egress/egresstest"
	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// egressImage builds the proxy's image once per test binary, as make
// images does.
var egressImage = sync.OnceValue(func() error {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	out, err := exec.Command(filepath.Join(root, "deploy", "compose", "images.sh"), "egress").CombinedOutput()
	if err != nil {
		return &buildError{string(out), err}
	}
	return nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// internetServer is what the test's own "internet" serves, on a Docker
// network of the test's: HTTP on 8080 and HTTPS on 8443 (a certificate of
// the test CA for the test names), each echoing the Host and path it was
// asked, and a UDP echo on 5353 (where a DNS server would be), which
// answers any datagram that reaches it.
const internetServer = `
import hashlib, http.server, socketserver, ssl, threading, socket
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("host=%s path=%s" % (self.headers.get("Host"), self.path)).encode()
        if self.path.startswith("/auth"):
            # What the proxy added, hashed: the value itself must not
            # reach the sandbox even from the server.
            key = self.headers.get("X-Api-Key")
            body += (" key_sha256=%s" % (hashlib.sha256(key.encode()).hexdigest() if key else "none")).encode()
        if self.path.startswith("/big"):
            body = b"x" * (1 << 20)
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
plain = S(("0.0.0.0", 8080), H)
secure = S(("0.0.0.0", 8443), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/srv/cert.pem", "/srv/key.pem")
secure.socket = ctx.wrap_socket(secure.socket, server_side=True)
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("0.0.0.0", 5353))
    while True:
        d, a = s.recvfrom(2048)
        s.sendto(b"answer:" + d, a)
threading.Thread(target=udp, daemon=True).start()
threading.Thread(target=secure.serve_forever, daemon=True).start()
print("serving", flush=True)
plain.serve_forever()
`

// internet is the test's network and its server.
type internet struct {
	network  string
	serverIP netip.Addr
	ca       *egresstest.CA
}

func startInternet(t *testing.T, cli *client.Client) *internet {
	t.Helper()
	ctx := context.Background()
	name := "sandfleet-test-internet-" + randHex(4)
	if _, err := cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{Driver: "bridge"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.NetworkRemove(context.Background(), name, client.NetworkRemoveOptions{}) })
	ca := egresstest.NewCA(t)
	_, certPEM, keyPEM := ca.Issue(t, "a.example.test", "b.example.test", "example.test", "other.test")
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	for f, b := range map[string][]byte{"cert.pem": certPEM, "key.pem": keyPEM, "server.py": []byte(internetServer)} {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name + "-server",
		Config: &container.Config{Image: DefaultImage, Entrypoint: []string{"python3", "/srv/server.py"},
			User: "65534:65534", Labels: map[string]string{"sandfleet.test": "egress"}},
		HostConfig: &container.HostConfig{
			NetworkMode: container.NetworkMode(name),
			Mounts:      []mount.Mount{{Type: mount.TypeBind, Source: dir, Target: "/srv", ReadOnly: true}},
			Runtime:     "runc",
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cli.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	in, err := cli.ContainerInspect(ctx, created.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip := in.Container.NetworkSettings.Networks[name].IPAddress
	return &internet{network: name, serverIP: ip, ca: ca}
}

// startGateway starts a worker's egress gateway whose outside is the
// test's internet, with the test names pinned to its server.
func startGateway(t *testing.T, cli *client.Client, inet *internet, opts ...func(*egressnet.Config)) *egressnet.Networks {
	t.Helper()
	if err := egressImage(); err != nil {
		t.Fatalf("building the egress image: %v", err)
	}
	hosts := map[string][]netip.Addr{}
	for _, h := range []string{"a.example.test", "b.example.test", "example.test", "other.test"} {
		hosts[h] = []netip.Addr{inet.serverIP}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := egressnet.Config{
		Client: cli, Name: "sandfleet-test-egress-" + randHex(4), Outside: inet.network, Hosts: hosts,
		Image: os.Getenv("EGRESS_TAG"),
	}
	for _, o := range opts {
		o(&cfg)
	}
	g, err := egressnet.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("gateway Close: %v", err)
		}
	})
	return g
}

// egressProbes is the job: each probe prints one JSON line, ok or not and
// what the program saw. Every failure must come quickly and say why.
const egressProbes = `
import json, os, socket, ssl, time, urllib.request, urllib.error
ca = ssl.create_default_context(cafile="ca.pem")
server = os.environ["SERVER"]
proxy_ip = os.environ["HTTP_PROXY"][7:].split(":")[0]
gw = ".".join(proxy_ip.split(".")[:3] + [str(int(proxy_ip.split(".")[3]) - 1)])  # the network's gateway, next to the proxy
def probe(name, fn):
    t = time.time()
    try:
        detail, ok = fn(), True
    except urllib.error.HTTPError as e:
        detail, ok = "%d %s" % (e.code, e.read().decode()), False
    except Exception as e:
        detail, ok = repr(e), False
    print(json.dumps({"name": name, "ok": ok, "detail": str(detail)[:300], "s": round(time.time() - t, 1)}), flush=True)
def get(url, **kw):
    return urllib.request.urlopen(url, timeout=20, **kw).read()[:200].decode()
def direct(host, port):
    s = socket.create_connection((host, port), timeout=10)
    s.close()
    return "connected"
def no_proxy(url):
    return urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=10).read().decode()
def tls_as(target, sni):
    s = socket.create_connection((os.environ["HTTPS_PROXY"][7:].split(":")[0], 3128), timeout=10)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    head = s.recv(4096)
    if not head.startswith(b"HTTP/1.1 200"):
        return head.decode()
    t = ca.wrap_socket(s, server_hostname=sni)
    t.sendall(b"GET / HTTP/1.1\r\nHost: " + sni.encode() + b"\r\n\r\n")
    return t.recv(200).decode()
def host_header(url, host):
    s = socket.create_connection((os.environ["HTTP_PROXY"][7:].split(":")[0], 3128), timeout=10)
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (url, host)).encode())
    head = s.recv(4096).decode()
    if not head.startswith("HTTP/1.1 200"):
        raise OSError(head.splitlines()[0])
    return head
def udp(host, port, payload=b"hello"):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(payload, (host, port))
    return s.recvfrom(2048)[0]
def dns_txt(server, name):
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\x00\x00\x10\x00\x01"
    r = udp(server, 53, q)
    if len(r) < 12 or r[3] & 0x0f != 0 or r[6:8] == b"\x00\x00":
        raise OSError("no answer (rcode %d)" % (r[3] & 0x0f if len(r) > 3 else -1))
    return "answered"

probe("allowed http", lambda: get("http://a.example.test:8080/x"))
probe("allowed https", lambda: get("https://a.example.test:8443/y", context=ca))
probe("allowed https download", lambda: str(len(urllib.request.urlopen("https://b.example.test:8443/big", timeout=20, context=ca).read())))
probe("host not allowed", lambda: get("http://other.test:8080/"))
probe("host not allowed https", lambda: get("https://other.test:8443/", context=ca))
probe("same host by IP", lambda: get("http://%s:8080/" % server))
probe("wildcard parent", lambda: get("http://example.test:8080/"))
probe("sni mismatch", lambda: tls_as("a.example.test:8443", "other.test"))
probe("host header mismatch", lambda: host_header("http://a.example.test:8080/", "other.test"))
probe("metadata via proxy", lambda: get("http://169.254.169.254/latest/meta-data/"))
probe("metadata direct", lambda: direct("169.254.169.254", 80))
probe("gateway via proxy", lambda: get("http://%s:4222/" % gw))
probe("gateway direct", lambda: direct(gw, 4222))
probe("docker0 direct", lambda: direct("172.17.0.1", 4222))
probe("server direct", lambda: direct(server, 8080))
probe("ipv6 via proxy", lambda: get("http://[::1]:8080/"))
probe("ipv6 direct", lambda: direct("2001:db8::1", 80))
probe("udp", lambda: udp(server, 5353))
probe("dns resolve", lambda: str(socket.getaddrinfo("unlisted.example.test", 80)))
probe("dns txt embedded", lambda: dns_txt("127.0.0.11", "exfil.unlisted.test"))
probe("dns txt server", lambda: dns_txt(server, "exfil.unlisted.test"))
probe("ignoring the proxy", lambda: no_proxy("http://a.example.test:8080/"))
`

// Under runc and runsc, a job allowed *.example.test reaches it over HTTP
// and HTTPS through the proxy, and every other way out fails, quickly and
// saying why; the result accounts what went where.
func TestIntegrationEgressAttacks(t *testing.T) {
	t.Parallel()
	cli := requireDocker(t)
	inet := startInternet(t, cli)
	gw := startGateway(t, cli, inet)
	caps := limits.DefaultCaps()
	caps.Timeout = limits.Duration(3 * time.Minute)
	caps.Network = &limits.Network{Allow: mustRules(t, "*.example.test, example.test, other.test")}
	runtimes := []string{"runc"}
	switch {
	case hasRuntime(t, cli, "runsc-net"):
		runtimes = append(runtimes, "runsc")
	case os.Getenv("SANDFLEET_REQUIRE_RUNSC") == "1":
		t.Fatal("SANDFLEET_REQUIRE_RUNSC=1 but the engine has no runsc-net runtime (deploy/runsc.sh registers it)")
	}
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			e := setup(t, func(c *Config) {
				c.Runtime, c.Caps, c.Egress = rt, caps, gw
				if rt == "runsc" {
					c.NetworkRuntime = "runsc-net"
				}
			})
			j := job(egressProbes, withLimits(limits.Limits{Timeout: limits.Duration(2 * time.Minute),
				Network: &limits.Network{Allow: mustRules(t, "*.example.test")}}))
			j.Files = map[string]string{"ca.pem": string(inet.ca.PEM)}
			j.Env = map[string]string{"SERVER": inet.serverIP.String()}
			res := run(t, e, j)
			want(t, res, jobs.StatusSucceeded)
			seen := map[string]bool{}
			for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
				var p struct {
					Name   string  `json:"name"`
					OK     bool    `json:"ok"`
					Detail string  `json:"detail"`
					S      float64 `json:"s"`
				}
				if err := json.Unmarshal([]byte(line), &p); err != nil {
					t.Fatalf("probe line %q: %v", line, err)
				}
				seen[p.Name] = true
				t.Logf("%-22s ok=%-5v %4.1fs %.160s", p.Name, p.OK, p.S, p.Detail)
				wantOK, reason := egressExpect(p.Name)
				switch {
				case p.OK != wantOK:
					t.Errorf("%s: ok=%v, want %v: %s", p.Name, p.OK, wantOK, p.Detail)
				case !strings.Contains(p.Detail, reason):
					t.Errorf("%s: %q, want it to say %q", p.Name, p.Detail, reason)
				case p.S > 12:
					t.Errorf("%s: took %.1fs: a denial must not hang", p.Name, p.S)
				}
			}
			for name := range egressExpectations {
				if !seen[name] {
					t.Errorf("probe %s did not report (stderr %.500q)", name, res.Stderr)
				}
			}
			checkEgressAccounting(t, res.Egress)
		})
	}
}

// egressExpectations: whether each probe gets through, and what its
// output must hold.
var egressExpectations = map[string]struct {
	ok     bool
	reason string
}{
	"allowed http":           {true, "host=a.example.test:8080 path=/x"},
	"allowed https":          {true, "host=a.example.test:8443 path=/y"},
	"allowed https download": {true, "1048576"},
	"host not allowed":       {false, "403 sandfleet egress: no allow rule names other.test:8080"},
	"host not allowed https": {false, "403 Forbidden by sandfleet egress: CONNECT other.test:8443: no allow rule"},
	"same host by IP":        {false, "in the protected range"},
	"wildcard parent":        {false, "no allow rule names example.test:8080"},
	"sni mismatch":           {false, "ACCESS_DENIED"},
	"host header mismatch":   {false, "403"},
	"metadata via proxy":     {false, "169.254.169.254 is in the protected range 169.254.0.0/16"},
	"metadata direct":        {false, "Error"},
	"gateway via proxy":      {false, "the sandboxes' or the proxy's own addresses, never reachable"},
	"gateway direct":         {false, "Error"},
	"docker0 direct":         {false, "Error"},
	"server direct":          {false, "Error"},
	"ipv6 via proxy":         {false, "::1 is in ::1/128, the sandboxes' or the proxy's own addresses"},
	"ipv6 direct":            {false, "Error"},
	"udp":                    {false, ""},
	"dns resolve":            {false, "gaierror"},
	"dns txt embedded":       {false, ""},
	"dns txt server":         {false, ""},
	"ignoring the proxy":     {false, "URLError"},
}

func egressExpect(name string) (bool, string) {
	e, ok := egressExpectations[name]
	if !ok {
		return false, "an unknown probe " + name
	}
	return e.ok, e.reason
}

// checkEgressAccounting: the allowed destinations carried what the job
// fetched, and the denied ones are listed with why.
func checkEgressAccounting(t *testing.T, use []limits.NetworkUse) {
	t.Helper()
	lines := map[string]limits.NetworkUse{}
	for _, u := range use {
		lines[u.Host] = u
	}
	big := lines["b.example.test:8443"]
	if !big.Allowed || big.Rule != "*.example.test" || big.Connections != 1 || big.BytesIn < 1<<20 || big.BytesOut == 0 {
		t.Errorf("b.example.test:8443 accounted %+v, want 1 connection, 1 MiB and more in", big)
	}
	plain := lines["a.example.test:8080"]
	if !plain.Allowed || plain.Connections < 1 || plain.BytesIn == 0 {
		t.Errorf("a.example.test:8080 accounted %+v", plain)
	}
	for _, h := range []string{"other.test:8080", "other.test:8443", "example.test:8080", "169.254.169.254"} {
		u, ok := lines[h]
		if !ok {
			u, ok = lines[h+":80"]
		}
		if !ok || u.Allowed || u.Connections != 1 || u.Reason == "" {
			t.Errorf("%s accounted %+v (present %v), want one denied connection with a reason; all: %+v", h, u, ok, use)
		}
	}
}

func mustRules(t *testing.T, s string) []limits.Rule {
	t.Helper()
	r, err := limits.ParseRules(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func hasRuntime(t *testing.T, cli *client.Client, name string) bool {
	t.Helper()
	info, err := cli.Info(context.Background(), client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, ok := info.Info.Runtimes[name]
	return ok
}

// Each sandbox with a network has a network of its own, holding it and the
// proxy only: one sandbox cannot reach another's listening port, nor find
// it by name.
func TestIntegrationEgressSandboxesApart(t *testing.T) {
	t.Parallel()
	cli := requireDocker(t)
	inet := startInternet(t, cli)
	gw := startGateway(t, cli, inet)
	ctx := context.Background()
	n := &limits.Network{Open: true}
	var ips, ids, names []string
	for range 2 {
		att, err := gw.Prepare(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Name: att.Network + "-peer",
			Config: &container.Config{Image: DefaultImage, User: "65534:65534", Entrypoint: []string{"python3", "-c",
				"import socket,time\ns=socket.socket(); s.bind(('0.0.0.0', 8000)); s.listen()\ntime.sleep(300)"}},
			HostConfig: &container.HostConfig{NetworkMode: container.NetworkMode(att.Network), Runtime: "runc"},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cli.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
			if err := gw.Drop(context.Background(), att); err != nil {
				t.Errorf("Drop: %v", err)
			}
		})
		if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatal(err)
		}
		ni, err := cli.NetworkInspect(ctx, att.Network, client.NetworkInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(ni.Network.Containers) != 2 || !ni.Network.Internal {
			t.Fatalf("network %s: internal %v, %d containers, want the sandbox and the proxy only", att.Network, ni.Network.Internal, len(ni.Network.Containers))
		}
		in, err := cli.ContainerInspect(ctx, created.ID, client.ContainerInspectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ips = append(ips, in.Container.NetworkSettings.Networks[att.Network].IPAddress.String())
		ids, names = append(ids, created.ID), append(names, att.Network+"-peer")
	}
	// From the first peer: the second by address and by name, and (the
	// control) its own listener.
	probe := `import socket, sys
for host in sys.argv[1:]:
    try:
        socket.create_connection((host, 8000), timeout=5).close(); print(host, "connected")
    except Exception as e:
        print(host, "refused:", repr(e))`
	out, err := exec.Command("docker", "exec", ids[0], "python3", "-c", probe, ips[1], names[1], "127.0.0.1").CombinedOutput()
	if err != nil {
		t.Fatalf("docker exec: %v: %s", err, out)
	}
	got := string(out)
	t.Logf("from the first sandbox's network:\n%s", got)
	if strings.Contains(got, ips[1]+" connected") || strings.Contains(got, names[1]+" connected") {
		t.Errorf("one sandbox reached another:\n%s", got)
	}
	if !strings.Contains(got, "127.0.0.1 connected") {
		t.Errorf("the control probe failed, so the test proves nothing:\n%s", got)
	}
}
