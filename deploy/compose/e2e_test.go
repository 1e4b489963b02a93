package compose

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

const (
	e2eJobs      = 300
	workerImage  = "sandfleet/worker:latest"
	sandboxImage = "sandfleet/sandbox:latest"
	dockerSocket = "/var/run/docker.sock"
	sandboxFiles = "/tmp/sandfleet" // the worker's TMPDIR, shared with the host
	// e2eStall fails the run when no result comes for this long: longer
	// than a lease (30s) plus a NATS leader election, far shorter than a
	// hung fleet.
	e2eStall = 2 * time.Minute
)

// natsImage is the tag images.sh gives the nats-server that go.mod pins.
func natsImage(t *testing.T) string {
	t.Helper()
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(mod)) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "github.com/nats-io/nats-server/v2" {
			return "sandfleet/nats:" + strings.TrimPrefix(f[1], "v")
		}
	}
	t.Fatal("go.mod does not require github.com/nats-io/nats-server/v2")
	return ""
}

// requireFleet skips the test when Docker or the fleet's images are absent,
// and fails it instead when SANDFLEET_REQUIRE_DOCKER=1 (CI).
func requireFleet(t *testing.T) *testcontainers.DockerClient {
	t.Helper()
	// No registry here: Ryuk cannot be pulled. Cleanup is explicit instead.
	t.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	var cli *testcontainers.DockerClient
	testutil.NeedDocker(t, func(ctx context.Context) error {
		var err error
		if cli, err = testcontainers.NewDockerClientWithOpts(ctx); err != nil {
			return fmt.Errorf("no Docker client: %w", err)
		}
		t.Cleanup(func() { cli.Close() })
		if _, err := cli.Ping(ctx, client.PingOptions{}); err != nil {
			return fmt.Errorf("docker is not reachable: %w", err)
		}
		if _, err := os.Stat(dockerSocket); err != nil {
			return fmt.Errorf("workers need the Docker socket at %s: %w", dockerSocket, err)
		}
		for _, img := range []string{natsImage(t), workerImage, sandboxImage} {
			if _, err := cli.ImageInspect(ctx, img); err != nil {
				return fmt.Errorf("image %s is missing (make images sandbox-image): %w", img, err)
			}
		}
		return nil
	})
	return cli
}

// e2eFleet is a 3-node cluster and its workers on a private network.
type e2eFleet struct {
	nodes   map[string]testcontainers.Container
	workers map[string]testcontainers.Container
	urls    []string // host-mapped client URLs of the nodes
}

func startFleet(ctx context.Context, t *testing.T, cli *testcontainers.DockerClient, workerIDs []string, slots int) *e2eFleet {
	t.Helper()
	conf, err := filepath.Abs("nats.conf")
	if err != nil {
		t.Fatal(err)
	}
	net, err := network.New(ctx)
	if err != nil {
		t.Fatalf("network: %v", err)
	}
	// Cleanups run last-in first-out: containers go before their network.
	t.Cleanup(func() {
		if err := net.Remove(context.Background()); err != nil {
			t.Errorf("remove network: %v", err)
		}
	})
	// A killed worker leaves its sandboxes behind (a restarted worker would
	// reap them); remove them by their worker label.
	t.Cleanup(func() { removeSandboxes(t, cli, workerIDs) })

	f := &e2eFleet{nodes: map[string]testcontainers.Container{}, workers: map[string]testcontainers.Container{}}
	var routes []string
	for _, n := range []string{"n1", "n2", "n3"} {
		routes = append(routes, fmt.Sprintf("nats-route://route:%s@%s:6222", testRoutePassword, n))
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
			ContainerRequest: testcontainers.ContainerRequest{
				Image: natsImage(t),
				Cmd:   []string{"-c", "/etc/nats/nats.conf", "--routes", strings.Join(routes, ",")},
				Env: map[string]string{
					"NATS_SERVER_NAME":             n,
					"NATS_ROUTE_PASSWORD":          testRoutePassword,
					"SANDFLEET_SUBMITTER_PASSWORD": testSubmitterPassword,
					"SANDFLEET_WORKER_PASSWORD":    testWorkerPassword,
				},
				ExposedPorts:   []string{"4222/tcp"},
				Networks:       []string{net.Name},
				NetworkAliases: map[string][]string{net.Name: {n}},
				HostConfigModifier: func(hc *container.HostConfig) {
					hc.Binds = append(hc.Binds, conf+":/etc/nats/nats.conf:ro")
				},
				WaitingFor: wait.ForLog("Server is ready").WithStartupTimeout(30 * time.Second),
			},
			Started: true,
		})
		testcontainers.CleanupContainer(t, c)
		if err != nil {
			t.Fatalf("start %s: %v", n, err)
		}
		f.nodes[n] = c
		host, err := c.Host(ctx)
		if err != nil {
			t.Fatalf("%s host: %v", n, err)
		}
		port, err := c.MappedPort(ctx, "4222/tcp")
		if err != nil {
			t.Fatalf("%s port: %v", n, err)
		}
		// testcontainers guesses the host (its gateway guess is wrong when
		// the daemon is local but /.dockerenv exists); also try loopback.
		// nats.go connects to whichever answers.
		f.urls = append(f.urls, fmt.Sprintf("nats://%s:%d", host, port.Num()))
		if host != "127.0.0.1" && host != "localhost" {
			f.urls = append(f.urls, fmt.Sprintf("nats://127.0.0.1:%d", port.Num()))
		}
	}

	// Workers exit when JetStream is not up yet, so wait for the cluster
	// to elect a meta leader before starting them.
	nc, err := nats.Connect(strings.Join(f.urls, ","), nats.UserInfo("worker", testWorkerPassword),
		nats.IgnoreDiscoveredServers(), nats.Timeout(time.Second))
	if err != nil {
		t.Fatalf("connect as worker: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.Poll(ctx, 60*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
		_, err := js.AccountInfo(ctx)
		return err
	}); err != nil {
		t.Fatalf("JetStream cluster not ready: %v", err)
	}

	var natsURLs []string
	for _, n := range []string{"n1", "n2", "n3"} {
		natsURLs = append(natsURLs, fmt.Sprintf("nats://worker:%s@%s:4222", testWorkerPassword, n))
	}
	for _, id := range workerIDs {
		c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
			ContainerRequest: testcontainers.ContainerRequest{
				Image:    workerImage,
				Cmd:      []string{"--id", id, "--replicas", "3", "--slots", strconv.Itoa(slots)},
				Env:      map[string]string{"NATS_URL": strings.Join(natsURLs, ","), "TMPDIR": sandboxFiles},
				Networks: []string{net.Name},
				Tmpfs:    map[string]string{"/tmp": "rw"},
				HostConfigModifier: func(hc *container.HostConfig) {
					// The worker is trusted with the host's Docker; its
					// sandboxes never get the socket. What it writes for
					// them to mount (their user tables) the daemon reads
					// at the same path on the host, as in docker-compose.yml.
					hc.Binds = append(hc.Binds, dockerSocket+":"+dockerSocket, sandboxFiles+":"+sandboxFiles)
					// As in docker-compose.yml; a stop by the test is not
					// restarted.
					hc.RestartPolicy = container.RestartPolicy{Name: container.RestartPolicyUnlessStopped}
				},
			},
			Started: true,
		})
		testcontainers.CleanupContainer(t, c)
		if err != nil {
			t.Fatalf("start worker %s: %v", id, err)
		}
		f.workers[id] = c
	}
	return f
}

// removeSandboxes force-removes sandbox containers the given workers left.
func removeSandboxes(t *testing.T, cli *testcontainers.DockerClient, workerIDs []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, id := range workerIDs {
		list, err := cli.ContainerList(ctx, client.ContainerListOptions{
			All:     true,
			Filters: make(client.Filters).Add("label", executor.LabelWorker+"="+id),
		})
		if err != nil {
			t.Errorf("list sandboxes of %s: %v", id, err)
			continue
		}
		for _, c := range list.Items {
			if _, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true}); err != nil {
				t.Errorf("remove sandbox %s: %v", c.ID, err)
			}
		}
	}
}

// dumpLogs prints a container's last lines when the test failed.
func dumpLogs(t *testing.T, name string, c testcontainers.Container) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		rc, err := c.Logs(context.Background())
		if err != nil {
			return
		}
		defer rc.Close()
		var b strings.Builder
		buf := make([]byte, 32<<10)
		for {
			n, err := rc.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		t.Logf("--- %s logs (last %d lines) ---\n%s", name, len(lines), strings.Join(lines, "\n"))
	})
}

// resultLog records every write into RESULTS the submitter sees.
type resultLog struct {
	mu      sync.Mutex
	writes  map[string]int
	results map[string]*jobs.Result
	changed chan struct{}
}

func (l *resultLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.results)
}

// waitFor waits for n results. It gives up when no new result has come for
// stall (a fleet that stopped working), not after a fixed total: on a busy
// 2-core machine the same run takes two or three times longer.
func (l *resultLog) waitFor(ctx context.Context, n int, stall time.Duration) error {
	timer := time.NewTimer(stall)
	defer timer.Stop()
	for last := l.count(); last < n; {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d results: %w", l.count(), n, ctx.Err())
		case <-timer.C:
			return fmt.Errorf("%d of %d results: none for %s", l.count(), n, stall)
		case <-l.changed:
			if c := l.count(); c > last {
				last = c
				timer.Reset(stall)
			}
		}
	}
	return nil
}

// TestFleetEndToEnd runs the fleet from the locally built images: a 3-node
// JetStream cluster (replicas 3) and two worker containers on a private
// network. It submits 300 jobs with the submitter's credentials and, while
// they run, kills one worker and the node leading the JOBS stream. Every job
// must end with exactly one result, written once, with the right output.
func TestFleetEndToEnd(t *testing.T) {
	cli := requireFleet(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	started := time.Now()

	suffix := strconv.FormatInt(time.Now().UnixNano()%1_000_000, 36)
	workerIDs := []string{"e2e-" + suffix + "-w1", "e2e-" + suffix + "-w2"}
	f := startFleet(ctx, t, cli, workerIDs, 3)
	for n, c := range f.nodes {
		dumpLogs(t, n, c)
	}
	for id, c := range f.workers {
		dumpLogs(t, id, c)
	}
	t.Logf("fleet up in %s: nodes %v", time.Since(started).Round(time.Millisecond), f.urls)

	// The submitter connects from the host through the mapped ports only;
	// the servers' cluster-internal addresses are not reachable from here
	// in general.
	nc, err := nats.Connect(strings.Join(f.urls, ","),
		nats.UserInfo("submitter", testSubmitterPassword),
		nats.IgnoreDiscoveredServers(), nats.MaxReconnects(-1),
		nats.ReconnectWait(200*time.Millisecond), nats.Name("e2e-submitter"))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	// The workers create the topology; wait for it (a submitter may not),
	// then open the client on it.
	if err := testutil.Poll(ctx, 90*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
		if _, err := js.Stream(ctx, fleet.StreamName); err != nil {
			return err
		}
		for _, b := range []string{fleet.ResultsBucket, fleet.WorkersBucket, fleet.CancelsBucket} {
			if _, err := js.KeyValue(ctx, b); err != nil {
				return fmt.Errorf("bucket %s: %w", b, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("the workers did not create the topology: %v", err)
	}
	// A new cluster may leave an API request unanswered while it elects
	// a stream's leader; NewClient asks again, within this bound.
	octx, ocancel := context.WithTimeout(ctx, 2*time.Minute)
	sub, err := jobs.NewClient(octx, js, jobs.Config{})
	ocancel()
	if err != nil {
		t.Fatalf("open client: %v", err)
	}
	for _, name := range []string{fleet.StreamName, "KV_" + fleet.ResultsBucket} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Fatalf("stream %s has %d replicas, want 3", name, r)
		}
	}
	// Both workers heartbeat before any job goes in, so both take work.
	workersKV, err := js.KeyValue(ctx, fleet.WorkersBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.Poll(ctx, 60*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
		for _, id := range workerIDs {
			if _, err := workersKV.Get(ctx, id); err != nil {
				return fmt.Errorf("heartbeat of %s: %w", id, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("workers ready after %s", time.Since(started).Round(time.Millisecond))

	log := &resultLog{writes: map[string]int{}, results: map[string]*jobs.Result{}, changed: make(chan struct{}, 1)}
	watch, err := natstest.Stores(t, js).Results.WatchAll(ctx)
	if err != nil {
		t.Fatalf("watch results: %v", err)
	}
	defer watch.Stop()
	go func() {
		for e := range watch.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			r, err := jobs.DecodeResult(e.Value())
			log.mu.Lock()
			log.writes[e.Key()]++
			if err == nil {
				log.results[e.Key()] = r
			}
			log.mu.Unlock()
			select {
			case log.changed <- struct{}{}:
			default:
			}
		}
	}()

	id := func(i int) string { return fmt.Sprintf("e2e-%s-%03d", suffix, i) }
	submit := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			job := &jobs.Job{ID: id(i), Image: "shell", Code: fmt.Sprintf("echo $((%d * 7))", i)}
			// A retry is safe: the job ID is the Nats-Msg-Id, so the stream
			// drops a second copy.
			if err := testutil.Poll(ctx, 60*time.Second, 250*time.Millisecond, func(ctx context.Context) error {
				_, err := sub.Submit(ctx, job)
				return err
			}); err != nil {
				t.Fatalf("submit %s: %v", job.ID, err)
			}
		}
	}

	runStart := time.Now()
	submit(0, e2eJobs/2)
	t.Logf("submitted %d jobs in %s", e2eJobs/2, time.Since(runStart).Round(time.Millisecond))

	// Faults, once the fleet is busy: kill a worker (no drain: its leases
	// must expire and its jobs be redelivered) and the node leading JOBS.
	if err := log.waitFor(ctx, e2eJobs/6, e2eStall); err != nil {
		t.Fatal(err)
	}
	zero := time.Duration(0)
	victim := workerIDs[1]
	if err := f.workers[victim].Stop(ctx, &zero); err != nil {
		t.Fatalf("kill worker %s: %v", victim, err)
	}
	info, err := js.Stream(ctx, fleet.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	leader := info.CachedInfo().Cluster.Leader
	node, ok := f.nodes[leader]
	if !ok {
		t.Fatalf("JOBS leader %q is not one of the nodes", leader)
	}
	if err := node.Stop(ctx, &zero); err != nil {
		t.Fatalf("kill node %s: %v", leader, err)
	}
	t.Logf("after %d results (%s): killed worker %s and node %s (JOBS leader)",
		log.count(), time.Since(runStart).Round(time.Millisecond), victim, leader)

	submit(e2eJobs/2, e2eJobs)
	t.Logf("submitted all %d jobs after %s", e2eJobs, time.Since(runStart).Round(time.Millisecond))
	if err := log.waitFor(ctx, e2eJobs, e2eStall); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(runStart)

	// Every job has exactly one result, written once, with its own output.
	log.mu.Lock()
	defer log.mu.Unlock()
	perWorker := map[string]int{}
	redelivered := 0
	for i := range e2eJobs {
		r, ok := log.results[id(i)]
		if !ok {
			t.Errorf("%s: no result", id(i))
			continue
		}
		if n := log.writes[id(i)]; n != 1 {
			t.Errorf("%s: result written %d times", id(i), n)
		}
		if want := fmt.Sprintf("%d\n", i*7); r.Status != jobs.StatusSucceeded || r.Stdout != want {
			t.Errorf("%s: status %s stdout %q error %q, want succeeded %q", id(i), r.Status, r.Stdout, r.Error, want)
		}
		perWorker[r.Worker]++
		if r.Attempt > 1 {
			redelivered++
		}
	}
	if len(log.results) != e2eJobs {
		t.Errorf("%d results, want %d", len(log.results), e2eJobs)
	}
	for w := range perWorker {
		if w != workerIDs[0] && w != workerIDs[1] {
			t.Errorf("result from unknown worker %q", w)
		}
	}
	// RESULTS saw exactly one write per job over the whole run.
	kvInfo, err := js.Stream(ctx, "KV_"+fleet.ResultsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if st := kvInfo.CachedInfo().State; st.Msgs != e2eJobs || st.LastSeq != e2eJobs {
		t.Errorf("RESULTS holds %d values after %d writes, want %d and %d", st.Msgs, st.LastSeq, e2eJobs, e2eJobs)
	}
	t.Logf("%d jobs in %s (%.1f jobs/s) despite the faults; results per worker %v; %d redelivered",
		e2eJobs, elapsed.Round(time.Millisecond), float64(e2eJobs)/elapsed.Seconds(), perWorker, redelivered)
}
