package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/egress"
	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// peer is a sandbox container on a network of its own that the gateway
// admitted with a policy, as a job's or a session's is, kept running for
// the test to exec in.
type peer struct{ id string }

func startPeer(t *testing.T, cli *client.Client, gw *egressnet.Networks, n *limits.Network) peer {
	t.Helper()
	ctx := context.Background()
	att, err := gw.Prepare(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	var env []string
	for k, v := range att.Env {
		env = append(env, k+"="+v)
	}
	hc := &container.HostConfig{NetworkMode: container.NetworkMode(att.Network), Runtime: "runc"}
	if att.CABundle != "" {
		hc.Mounts = []mount.Mount{{Type: mount.TypeBind, Source: att.CABundle, Target: egressnet.CABundlePath, ReadOnly: true}}
	}
	created, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: att.Network + "-peer",
		Config: &container.Config{Image: DefaultImage, User: "65534:65534", Env: env,
			Entrypoint: []string{"python3", "-c", "import time; time.sleep(600)"}},
		HostConfig: hc,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		gw.Release(context.Background(), created.ID)
		cli.ContainerRemove(context.Background(), created.ID, client.ContainerRemoveOptions{Force: true})
		if err := gw.Drop(context.Background(), att); err != nil {
			t.Errorf("Drop: %v", err)
		}
	})
	if _, err := cli.ContainerStart(ctx, created.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := gw.Admit(ctx, created.ID, att, n); err != nil {
		t.Fatal(err)
	}
	return peer{created.ID}
}

// py runs a Python program in the peer and returns what it printed.
func (p peer) py(t *testing.T, code string, args ...string) string {
	t.Helper()
	out, _ := exec.Command("docker", append([]string{"exec", p.id, "python3", "-c", code}, args...)...).CombinedOutput()
	return string(out)
}

const fetchOnce = `import sys, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())
except Exception as e:
    print("error:", repr(e))`

// A proxy restarted under the worker (by the engine, as after an OOM
// kill, or killed and left stopped) forgets nothing that matters: within
// a bounded time the worker has it running again, with its live sandboxes
// registered and the CA their bundles trust, and a sandbox with a secret
// and one without fetch again.
func TestIntegrationEgressProxyRestart(t *testing.T) {
	t.Parallel()
	cli := requireDocker(t)
	inet := startInternet(t, cli)
	value := "restart-secret-" + randHex(8)
	sum := sha256.Sum256([]byte(value))
	name := "sandfleet-test-egress-restart-" + randHex(4)
	gw := startGateway(t, cli, inet, func(c *egressnet.Config) {
		c.Name = name
		c.Secrets = []egress.Secret{{Name: "api", Hosts: []string{"a.example.test"}, Header: "X-Api-Key", Value: egress.Value(value)}}
		c.UpstreamCA = inet.ca.PEM
		c.HealthEvery = 500 * time.Millisecond
	})
	allow := mustRules(t, "*.example.test")
	withSecret := startPeer(t, cli, gw, &limits.Network{Allow: allow, Secrets: []string{"api"}})
	plain := startPeer(t, cli, gw, &limits.Network{Allow: allow})
	wantKey := "key_sha256=" + hex.EncodeToString(sum[:])
	works := func(stage string) {
		t.Helper()
		var a, b string
		deadline := time.Now().Add(60 * time.Second)
		for ; time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) { // polling the worker's repair: no event says it is done
			a = withSecret.py(t, fetchOnce, "https://a.example.test:8443/auth")
			b = plain.py(t, fetchOnce, "http://a.example.test:8080/x")
			if strings.Contains(a, wantKey) && strings.Contains(b, "host=a.example.test:8080 path=/x") {
				t.Logf("%s: both sandboxes fetch", stage)
				return
			}
		}
		t.Fatalf("%s: within 60s the sandboxes still fail:\nwith a secret: %s\nwithout: %s", stage, a, b)
	}
	works("at first")
	for _, how := range [][]string{
		{"restart", "-t", "0", name}, // the engine starts it again itself, a new process
		{"kill", name},               // stopped, and the engine leaves it so
	} {
		if out, err := exec.Command("docker", how...).CombinedOutput(); err != nil {
			t.Fatalf("docker %s: %v: %s", how[0], err, out)
		}
		works("after docker " + how[0])
	}
}

// proxyMemory is the proxy container's peak memory as its cgroup counts
// it (the engine's stats: max_usage under cgroup v1, usage otherwise).
func proxyMemory(t *testing.T, cli *client.Client, name string) uint64 {
	t.Helper()
	res, err := cli.ContainerStats(context.Background(), name, client.ContainerStatsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var s struct {
		Memory struct {
			Usage    uint64 `json:"usage"`
			MaxUsage uint64 `json:"max_usage"`
		} `json:"memory_stats"`
	}
	if err := json.NewDecoder(res.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return max(s.Memory.Usage, s.Memory.MaxUsage)
}

// floodRefused is a sandbox's attack on the proxy's memory: requests the
// proxy refuses, each naming a host of 30 KB (in the URL and, different,
// in the Host header, so that the refusal's reason quotes both).
const floodRefused = `import socket, sys
proxy = __import__("os").environ["HTTP_PROXY"][7:].split(":")[0]
n = 0
for i in range(int(sys.argv[1])):
    junk = "%d-%s" % (i, "x" * (30 << 10))
    try:
        s = socket.create_connection((proxy, 3128), timeout=10)
        s.sendall(("GET http://%s/ HTTP/1.1\r\nHost: other-%s\r\n\r\n" % (junk, junk)).encode())
        if s.recv(64).startswith(b"HTTP/1.1 403"):
            n += 1
        s.close()
    except OSError:
        pass
print("refused", n)`

// maxFloodedProxy is what the proxy may reach during three sandboxes'
// floods: half its container's 256 MiB. Its accounting is bounded per
// sandbox (64 KiB of text, asserted below), so what it holds beyond that
// is the Go runtime and the buffers of the connections in flight, whose
// peak depends on how many are open at once and on when the collector
// runs (22 MiB on a quiet machine, 75 MiB with both cores busy). Before
// the bound one such flood took it to 184 MiB and three past its limit.
const maxFloodedProxy = 128 << 20

// Three sandboxes flooding the proxy with refused requests of 30 KB
// hosts leave it within a bounded memory, running the same process, and
// serving a bystander.
func TestIntegrationEgressFloodBounded(t *testing.T) {
	t.Parallel()
	cli := requireDocker(t)
	inet := startInternet(t, cli)
	name := "sandfleet-test-egress-flood-" + randHex(4)
	gw := startGateway(t, cli, inet, func(c *egressnet.Config) { c.Name = name })
	n := &limits.Network{Allow: mustRules(t, "*.example.test")}
	before := proxyMemory(t, cli, name)
	var attackers []peer
	for range 3 {
		attackers = append(attackers, startPeer(t, cli, gw, n))
	}
	bystander := startPeer(t, cli, gw, n)
	var wg sync.WaitGroup
	for _, a := range attackers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Logf("attacker: %s", strings.TrimSpace(a.py(t, floodRefused, "1000")))
		}()
	}
	wg.Wait()
	peak := proxyMemory(t, cli, name)
	t.Logf("proxy memory: %d MiB before, %d MiB at its peak after three floods", before>>20, peak>>20)
	if peak > maxFloodedProxy {
		t.Errorf("the proxy reached %d MiB, want at most %d MiB", peak>>20, maxFloodedProxy>>20)
	}
	in, err := cli.ContainerInspect(context.Background(), name, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := in.Container.State; st.OOMKilled || in.Container.RestartCount > 0 || !st.Running {
		t.Errorf("the proxy: running %v, OOM killed %v, restarted %d times", st.Running, st.OOMKilled, in.Container.RestartCount)
	}
	use, err := gw.Usage(context.Background(), attackers[0].id)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(use)
	t.Logf("an attacker's accounting: %d lines, %d bytes", len(use), len(raw))
	if len(raw) > 256<<10 {
		t.Errorf("an attacker's accounting is %d bytes", len(raw))
	}
	if out := bystander.py(t, fetchOnce, "http://a.example.test:8080/x"); !strings.Contains(out, "host=a.example.test:8080 path=/x") {
		t.Errorf("the bystander after the floods: %s", out)
	}
}
