package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/egress"
	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// secretProbes is the job of TestIntegrationEgressSecret: it fetches the
// host its secret is for (trusting only what its environment says) and
// one without, then looks for the secret everywhere it can, by a prefix
// and the whole value's hash (it never holds the value, so finding it
// means it leaked in). The canary, given to it in its environment and a
// file, is looked for the same way: the search finds what is there.
const secretProbes = `
import hashlib, json, os, ssl, urllib.request
def report(name, **kw):
    kw["name"] = name
    print(json.dumps(kw), flush=True)
def get(url, ctx=None):
    try:
        return urllib.request.urlopen(url, timeout=20, context=ctx).read().decode()
    except Exception as e:
        return "error: " + repr(e)
report("env", **{k: os.environ.get(k, "") for k in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE")})
report("intercepted", body=get("https://a.example.test:8443/auth"))
report("spliced", body=get("https://b.example.test:8443/auth", ssl.create_default_context(cafile="ca.pem")))
bundle = os.environ.get("SSL_CERT_FILE", "/nonexistent")
try:
    open(bundle, "a").write("x")
    writable = True
except OSError:
    writable = False
data = open(bundle).read() if os.path.exists(bundle) else ""
report("bundle", writable=writable, private_key="PRIVATE KEY" in data, certs=data.count("BEGIN CERTIFICATE"))

def finder(prefix, digest, n):
    prefix = prefix.encode()
    def find(buf):
        i = buf.find(prefix)
        while i >= 0:
            if hashlib.sha256(buf[i:i + n]).hexdigest() == digest:
                return True
            i = buf.find(prefix, i + 1)
        return False
    return find
needles = {k: finder(os.environ[k + "_PREFIX"], os.environ[k + "_SHA256"], int(os.environ[k + "_LEN"])) for k in ("SECRET", "CANARY")}
found = {k: [] for k in needles}
def look(where, buf):
    for k, f in needles.items():
        if f(buf):
            found[k].append(where)
look("env", "\n".join("%s=%s" % kv for kv in os.environ.items()).encode())
# Every process's environment, command line and status, where readable
# (a process not dumpable keeps them from its own uid too).
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for f in ("environ", "cmdline", "status"):
            try:
                look("/proc/%s/%s" % (pid, f), open("/proc/%s/%s" % (pid, f), "rb").read())
            except OSError:
                pass
# Every file on every mount but the image's own (built before the secret
# existed) and the kernel's, and /etc.
roots = {"/etc"}
for line in open("/proc/self/mountinfo"):
    mp = line.split()[4]
    if mp != "/" and not mp.startswith(("/proc", "/sys", "/dev/pts", "/dev/mqueue")):
        roots.add(mp)
files = 0
for root in sorted(roots):
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            try:
                if os.path.isfile(p) and os.path.getsize(p) < 64 << 20:
                    look(p, open(p, "rb").read()); files += 1
            except OSError:
                pass
# Its own memory.
regions = 0
with open("/proc/self/mem", "rb") as mem:
    for line in open("/proc/self/maps"):
        addr, perms = line.split()[:2]
        # Private mappings: where a value read or built would be. Shared
        # ones and the kernel's pages are not the process's own.
        if "r" not in perms or "s" in perms or line.rstrip().endswith(("[vvar]", "[vsyscall]", "[vvar_vclock]", "[vdso]")):
            continue
        lo, hi = (int(x, 16) for x in addr.split("-"))
        # In pieces that overlap by a value's length: a region may be
        # large, mostly untouched, and the sandbox's memory is bounded.
        at, tail = lo, b""
        try:
            while at < hi:
                mem.seek(at)
                piece = tail + mem.read(min(1 << 20, hi - at))
                look("memory " + line.split()[-1], piece)
                tail, at = piece[-64:], at + (1 << 20)
            regions += 1
        except (OSError, OverflowError, ValueError):
            pass
report("search", found=found, files=files, regions=regions, roots=sorted(roots))
`

// A job whose policy names a secret gets its header added by the proxy
// on HTTPS to the secret's host (the server sees it, hashed back), through
// the fleet CA its environment trusts; a host without a secret is
// spliced (its own certificate, no header); and the job finds the value
// nowhere it can look: environment, files, /proc, its memory.
func TestIntegrationEgressSecret(t *testing.T) {
	t.Parallel()
	cli := requireDocker(t)
	inet := startInternet(t, cli)
	value := "sf-secret-" + randHex(16)
	canary := "sf-canary-" + randHex(16)
	gw := startGateway(t, cli, inet, func(c *egressnet.Config) {
		c.Secrets = []egress.Secret{{Name: "api", Hosts: []string{"a.example.test"}, Header: "X-Api-Key", Value: egress.Value(value)}}
		c.UpstreamCA = inet.ca.PEM
	})
	caps := limits.DefaultCaps()
	caps.Timeout = limits.Duration(3 * time.Minute)
	caps.Network = &limits.Network{Allow: mustRules(t, "*.example.test"), SecretHosts: map[string][]string{"api": {"a.example.test"}}}
	runtimes := []string{"runc"}
	switch {
	case hasRuntime(t, cli, "runsc-net"):
		runtimes = append(runtimes, "runsc")
	case os.Getenv("SANDFLEET_REQUIRE_RUNSC") == "1":
		t.Fatal("SANDFLEET_REQUIRE_RUNSC=1 but the engine has no runsc-net runtime (deploy/runsc.sh registers it)")
	}
	digest := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			e := setup(t, func(c *Config) {
				c.Runtime, c.Caps, c.Egress = rt, caps, gw
				if rt == "runsc" {
					c.NetworkRuntime = "runsc-net"
				}
			})
			// Naming a secret the worker lacks, or one for a host the
			// policy does not allow, is rejected.
			for _, n := range []*limits.Network{
				{Allow: mustRules(t, "*.example.test"), Secrets: []string{"api", "gh"}},
				{Allow: mustRules(t, "b.example.test"), Secrets: []string{"api"}},
			} {
				res := run(t, e, job("print(1)", withLimits(limits.Limits{Network: n})))
				if res.Status != jobs.StatusRejected || !strings.Contains(res.Error, "network.secrets") {
					t.Errorf("policy %s: %s %q, want rejected naming network.secrets", n, res.Status, res.Error)
				}
			}
			j := job(secretProbes, withLimits(limits.Limits{Timeout: limits.Duration(2 * time.Minute), Memory: 1 * limits.GiB,
				Network: &limits.Network{Allow: mustRules(t, "*.example.test"), Secrets: []string{"api"}}}))
			j.Files = map[string]string{"ca.pem": string(inet.ca.PEM), "canary.txt": canary}
			j.Env = map[string]string{
				"SECRET_PREFIX": value[:12], "SECRET_SHA256": digest(value), "SECRET_LEN": "42",
				"CANARY": canary, "CANARY_PREFIX": canary[:12], "CANARY_SHA256": digest(canary), "CANARY_LEN": "42",
			}
			res := run(t, e, j)
			want(t, res, jobs.StatusSucceeded)
			lines := map[string]map[string]any{}
			for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
				var p map[string]any
				if err := json.Unmarshal([]byte(line), &p); err != nil {
					t.Fatalf("probe line %q: %v", line, err)
				}
				lines[p["name"].(string)] = p
				t.Logf("%.400s", line)
			}
			for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE"} {
				if lines["env"][k] != egressnet.CABundlePath {
					t.Errorf("%s=%v, want %s", k, lines["env"][k], egressnet.CABundlePath)
				}
			}
			if b, _ := lines["intercepted"]["body"].(string); !strings.Contains(b, "key_sha256="+digest(value)) {
				t.Errorf("the secret's host got %q, want its header (hashed %s)", b, digest(value))
			}
			if b, _ := lines["spliced"]["body"].(string); !strings.Contains(b, "key_sha256=none") {
				t.Errorf("the host without a secret got %q, want no header", b)
			}
			if b := lines["bundle"]; b["writable"] != false || b["private_key"] != false || b["certs"].(float64) < 1 {
				t.Errorf("the CA bundle: %v, want read-only certificates without a key", b)
			}
			s := lines["search"]
			found, _ := s["found"].(map[string]any)
			if leaks, _ := found["SECRET"].([]any); len(leaks) > 0 {
				t.Errorf("the secret's value is in the sandbox: %v", leaks)
			}
			// The control: the search finds the canary where it was put.
			canaryAt := strings.Join(toStrings(found["CANARY"]), "\n")
			for _, where := range []string{"env", "canary.txt", "memory"} {
				if !strings.Contains(canaryAt, where) {
					t.Errorf("the search did not find the canary in %s (found it in %q): it proves nothing there", where, canaryAt)
				}
			}
			if whole, _ := json.Marshal(res); strings.Contains(string(whole), value) {
				t.Error("the secret's value is in the result")
			}
		})
	}
}

func toStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, len(l))
	for i, x := range l {
		out[i], _ = x.(string)
	}
	return out
}

// A session installs with its network, then locks it: the fetch that
// worked before fails with the proxy's 403, a policy beyond the worker's
// caps is rejected (it cannot re-open wider than them), and the session's
// egress lists both. A session started without a network gets none later.
func TestIntegrationEgressSessionLocks(t *testing.T) {
	t.Parallel()
	cli := requireDocker(t)
	inet := startInternet(t, cli)
	gw := startGateway(t, cli, inet)
	caps := limits.DefaultCaps()
	caps.Network = &limits.Network{Allow: mustRules(t, "a.example.test")}
	e := setup(t, func(c *Config) { c.Caps, c.Egress = caps, gw })
	s := startSession(t, e, SessionSpec{Limits: limits.Limits{Network: &limits.Network{Allow: mustRules(t, "a.example.test")}}})
	fetch := ask{Op: sessionapi.OpExec, Cmd: []string{"python3", "-c", `
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen("http://a.example.test:8080/install", timeout=20).read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())`}}
	if r := okReply(t, do(t, s, fetch)); !strings.Contains(string(r.Stdout), "path=/install") {
		t.Fatalf("before the lock: %q %q", r.Stdout, r.Stderr)
	}
	if _, err := s.SetNetwork(t.Context(), &limits.Network{Allow: mustRules(t, "b.example.test")}); !errors.Is(err, ErrRejected) ||
		!strings.Contains(err.Error(), "--egress-allow") {
		t.Errorf("re-opening beyond the caps: %v, want rejected", err)
	}
	lim, err := s.SetNetwork(t.Context(), nil)
	if err != nil || lim.Network != nil {
		t.Fatalf("lock: %v %v", lim.Network, err)
	}
	if r := okReply(t, do(t, s, fetch)); !strings.Contains(string(r.Stdout), "403 sandfleet egress: no allow rule names a.example.test:8080") {
		t.Errorf("after the lock: %q %q, want the proxy's 403", r.Stdout, r.Stderr)
	}
	use, err := s.Egress(t.Context())
	if err != nil || len(use) != 2 {
		t.Fatalf("egress %+v %v, want the allowed fetch and the denied one", use, err)
	}
	for _, u := range use {
		if u.Host != "a.example.test:8080" || u.Connections != 1 || u.Allowed == (u.Reason != "") {
			t.Errorf("egress line %+v", u)
		}
	}
	plain := startSession(t, e, SessionSpec{})
	if _, err := plain.SetNetwork(t.Context(), &limits.Network{Allow: mustRules(t, "a.example.test")}); !errors.Is(err, ErrRejected) {
		t.Errorf("a session without a network given one: %v, want rejected", err)
	}
}
