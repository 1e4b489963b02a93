package executor

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// victimServer is a job serving its tenant's data on its own network,
// until the test ends it.
const victimServer = `
import http.server, threading, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"VICTIM-PRIVATE-DATA"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", 8000), H).serve_forever()
`

// attackerProbes fetches the victim's server through the proxy, by a
// plain HTTP request and through a CONNECT tunnel.
const attackerProbes = `
import json, os, socket, urllib.request, urllib.error
victim = os.environ["VICTIM"]
proxy = os.environ["HTTP_PROXY"][7:].split(":")[0]
def probe(name, fn):
    try:
        detail = fn()
    except urllib.error.HTTPError as e:
        detail = "%d %s" % (e.code, e.read().decode())
    except Exception as e:
        detail = repr(e)
    print(json.dumps({"name": name, "detail": str(detail)[:300]}), flush=True)
def tunnel():
    s = socket.create_connection((proxy, 3128), timeout=10)
    s.sendall(("CONNECT %s:8000 HTTP/1.1\r\nHost: %s:8000\r\n\r\n" % (victim, victim)).encode())
    head = s.recv(4096)
    if not head.startswith(b"HTTP/1.1 200"):
        return head.decode()
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    out = b""
    while True:
        b = s.recv(4096)
        if not b:
            return out.decode()
        out += b
probe("http", lambda: urllib.request.urlopen("http://%s:8000/" % victim, timeout=10).read().decode())
probe("connect", tunnel)
`

// With a rule as wide as a private range that holds the sandboxes' own
// networks (an operator's mirror range, 10.0.0.0/8), one tenant's job
// still reaches no other tenant's job through the proxy: the sandboxes'
// addresses are refused before any rule.
func TestIntegrationEgressSandboxesUnreachableThroughProxy(t *testing.T) {
	t.Parallel()
	cli := requireDocker(t)
	inet := startInternet(t, cli)
	gw := startGateway(t, cli, inet)
	wide := &limits.Network{Allow: mustRules(t, "10.0.0.0/8")}
	caps := limits.DefaultCaps()
	caps.Network = wide
	e := setup(t, func(c *Config) { c.Runtime, c.Caps, c.Egress, c.Pool = "runc", caps, gw, 0 })

	victim := job(victimServer, withLimits(limits.Limits{Timeout: limits.Duration(3 * time.Minute), Network: wide}))
	vctx, stopVictim := context.WithCancel(context.Background())
	victimDone := make(chan struct{})
	go func() {
		defer close(victimDone)
		e.Run(vctx, victim, jobrun.Options{})
	}()
	t.Cleanup(func() { stopVictim(); <-victimDone })
	ip := victimAddress(t, cli, e, victim.ID)
	t.Logf("the victim serves on %s", ip)

	attacker := job(attackerProbes, withLimits(limits.Limits{Timeout: limits.Duration(time.Minute), Network: wide}))
	attacker.Env = map[string]string{"VICTIM": ip}
	res := run(t, e, attacker)
	want(t, res, jobs.StatusSucceeded)
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		var p struct{ Name, Detail string }
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatalf("probe line %q: %v (stderr %.500q)", line, err, res.Stderr)
		}
		seen++
		t.Logf("%-8s %s", p.Name, p.Detail)
		if strings.Contains(p.Detail, "VICTIM-PRIVATE-DATA") {
			t.Errorf("%s: one tenant's job read another's server through the proxy: %q", p.Name, p.Detail)
		} else if !strings.Contains(p.Detail, "403") || !strings.Contains(p.Detail, "never reachable") {
			t.Errorf("%s: %q, want the proxy's 403 saying the sandboxes' addresses are never reachable", p.Name, p.Detail)
		}
	}
	if seen != 2 {
		t.Errorf("%d probes reported, want 2 (stderr %.500q)", seen, res.Stderr)
	}
}

// victimAddress waits for the job's sandbox to serve on port 8000 (a
// request from inside it answers: the control that makes the attack's
// failure mean something) and returns its address on its own network.
func victimAddress(t *testing.T, cli *client.Client, e *Executor, jobID string) string {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) { // polling the job's start: no event says it serves
		list, err := cli.ContainerList(context.Background(), client.ContainerListOptions{
			Filters: make(client.Filters).Add("label", LabelJob+"="+jobID).Add("label", LabelWorker+"="+e.cfg.WorkerID)})
		if err != nil || len(list.Items) == 0 {
			continue
		}
		id := list.Items[0].ID
		out, err := exec.Command("docker", "exec", id, "python3", "-c",
			"import urllib.request; print(urllib.request.build_opener(urllib.request.ProxyHandler({})).open('http://127.0.0.1:8000/', timeout=2).read().decode())").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "VICTIM-PRIVATE-DATA") {
			continue
		}
		in, err := cli.ContainerInspect(context.Background(), id, client.ContainerInspectOptions{})
		if err != nil || in.Container.NetworkSettings == nil {
			continue
		}
		for _, ep := range in.Container.NetworkSettings.Networks {
			if ep.IPAddress.IsValid() {
				return ep.IPAddress.String()
			}
		}
	}
	t.Fatal("the victim's job did not serve within 90s")
	return ""
}
