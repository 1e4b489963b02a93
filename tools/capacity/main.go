// Command capacity measures what the capacity model of docs/operations.md needs:
// the CPU a 3-node NATS JetStream cluster spends per job, with real
// worker processes, and what a stored result takes in RESULTS.
//
// It builds nats-server (the version go.mod pins) and cmd/worker, starts
// three nats-server processes from deploy/compose/nats.conf (the fleet's
// own configuration, users and permissions included; only ports and store
// directories are changed, on the command line) clustered on loopback,
// then -workers worker processes (--replicas 3) and submits -jobs jobs as
// the submitter. CPU is read from /proc for each process between the first
// submit and the last result.
//
//	-executor fake    the workers run the test hook's in-memory executor
//	                  (a worker built with -tags sandfleet_testhooks): the
//	                  queue path alone, what the broker costs per job
//	-executor docker  real sandboxes (the released build): a whole job
//
// Usage: go run ./tools/capacity [-jobs 3000] [-workers 2] [-slots 16] [-executor fake|docker]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/procfs"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

const (
	submitterPW = "sCapacity0"
	workerPW    = "wCapacity0"
	routePW     = "rCapacity0"
)

func main() {
	n := flag.Int("jobs", 3000, "jobs to run")
	workers := flag.Int("workers", 2, "worker processes")
	slots := flag.Int("slots", 16, "slots per worker")
	executor := flag.String("executor", "fake", "fake (the queue path alone) or docker (real sandboxes)")
	code := flag.String("code", "", "each job's code (default: print for fake, print(1) for docker)")
	idle := flag.Duration("idle", 30*time.Second, "first measure the broker with the workers idle for this long")
	flag.Parse()
	if err := run(*n, *workers, *slots, *executor, *code, *idle); err != nil {
		fmt.Fprintln(os.Stderr, "capacity:", err)
		os.Exit(1)
	}
}

// proc is a child process whose CPU time is read from /proc.
type proc struct {
	name string
	cmd  *exec.Cmd
}

// cpu returns the process's user+system CPU time so far.
func (p *proc) cpu() time.Duration { return procfs.CPU(p.cmd.Process.Pid) }

func start(name, dir string, env []string, bin string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &proc{name: name, cmd: cmd}, nil
}

func build(dir, out string, args ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", filepath.Join(dir, out)}, args...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", out, err, b)
	}
	return nil
}

func run(n, nWorkers, slots int, executor, code string, idle time.Duration) error {
	dir, err := os.MkdirTemp("", "sandfleet-capacity-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if code, err = buildAll(dir, executor, code); err != nil {
		return err
	}
	conf, err := os.ReadFile("deploy/compose/nats.conf")
	if err != nil {
		return err
	}
	if !strings.Contains(string(conf), "store_dir: /data") {
		return fmt.Errorf("deploy/compose/nats.conf no longer says store_dir: /data")
	}
	f := &fleetProcs{dir: dir}
	defer f.stop()
	if err := f.startCluster(string(conf)); err != nil {
		return err
	}
	nc, js, err := connectRetry(f.url("submitter", submitterPW))
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := f.startWorkers(nWorkers, slots, executor); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	client, err := waitClient(ctx, js)
	if err != nil {
		return err
	}
	watch, err := client.WatchResults(ctx)
	if err != nil {
		return err
	}
	defer watch.Stop()

	fig := figures{n: n, workers: nWorkers, slots: slots, executor: executor, code: code, idle: idle, nodes: f.nodes}
	idle0 := cpuOf(f.nodes)
	time.Sleep(idle)
	fig.idleCPU = cpuOf(f.nodes) - idle0

	nodes0, workers0 := cpuOf(f.nodes), cpuOf(f.workers)
	if fig.wall, fig.stored, err = runJobs(ctx, client, watch, n, code); err != nil {
		return err
	}
	fig.nodesCPU, fig.workersCPU = cpuOf(f.nodes)-nodes0, cpuOf(f.workers)-workers0
	kv, err := js.Stream(ctx, "KV_"+fleet.ResultsBucket)
	if err != nil {
		return err
	}
	if fig.results, err = kv.Info(ctx); err != nil {
		return err
	}
	fig.print()
	return nil
}

// buildAll builds nats-server and the worker (with the fake executor's
// test hook for -executor fake) into dir, and returns the jobs' code.
func buildAll(dir, executor, code string) (string, error) {
	workerArgs := []string{"./cmd/worker"}
	if executor == "fake" {
		workerArgs = []string{"-tags", "sandfleet_testhooks", "./cmd/worker"}
		if code == "" {
			code = "print 1"
		}
	} else if code == "" {
		code = "print(1)"
	}
	if err := build(dir, "nats-server", "github.com/nats-io/nats-server/v2"); err != nil {
		return "", err
	}
	return code, build(dir, "worker", workerArgs...)
}

// fleetProcs are the processes of a run: the cluster's nodes and the
// workers, stopped together.
type fleetProcs struct {
	dir        string
	nodes      []*proc
	workers    []*proc
	clientURLs []string
}

func (f *fleetProcs) stop() {
	all := append(slices.Clone(f.nodes), f.workers...)
	for _, p := range all {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range all {
		_ = p.cmd.Wait()
	}
}

// url is the cluster's client URL for user.
func (f *fleetProcs) url(user, pw string) string {
	var u []string
	for _, a := range f.clientURLs {
		u = append(u, fmt.Sprintf("nats://%s:%s@%s", user, pw, a))
	}
	return strings.Join(u, ",")
}

// startCluster starts three nats-server nodes from conf, clustered on
// loopback.
func (f *fleetProcs) startCluster(conf string) error {
	var routes []string
	for i := range 3 {
		routes = append(routes, fmt.Sprintf("nats-route://route:%s@127.0.0.1:%d", routePW, 16222+i))
		f.clientURLs = append(f.clientURLs, fmt.Sprintf("127.0.0.1:%d", 14222+i))
	}
	for i := range 3 {
		name := fmt.Sprintf("n%d", i+1)
		// The store directory is the one thing the command line cannot
		// override: a copy of nats.conf names this node's.
		nodeConf := filepath.Join(f.dir, name+".conf")
		if err := os.WriteFile(nodeConf, []byte(strings.Replace(conf, "store_dir: /data", "store_dir: "+filepath.Join(f.dir, name), 1)), 0o600); err != nil {
			return err
		}
		p, err := start(name, f.dir, []string{"NATS_SERVER_NAME=" + name, "NATS_ROUTE_PASSWORD=" + routePW,
			"SANDFLEET_SUBMITTER_PASSWORD=" + submitterPW, "SANDFLEET_WORKER_PASSWORD=" + workerPW},
			filepath.Join(f.dir, "nats-server"), "-c", nodeConf, "-a", "127.0.0.1", "-p", strconv.Itoa(14222+i),
			"-m", strconv.Itoa(18222+i), "--cluster", fmt.Sprintf("nats://127.0.0.1:%d", 16222+i),
			"--routes", strings.Join(routes, ","))
		if err != nil {
			return err
		}
		f.nodes = append(f.nodes, p)
	}
	return nil
}

// startWorkers starts n worker processes of slots each on the cluster.
func (f *fleetProcs) startWorkers(n, slots int, executor string) error {
	for i := range n {
		env := []string{"SANDFLEET_FAKE_EXECUTOR=1"}
		if executor != "fake" {
			env = nil
		}
		p, err := start(fmt.Sprintf("worker%d", i+1), f.dir, env, filepath.Join(f.dir, "worker"),
			"--nats", f.url("worker", workerPW), "--id", fmt.Sprintf("cap-%d", i+1), "--replicas", "3",
			"--slots", strconv.Itoa(slots), "--log-level", "warn")
		if err != nil {
			return err
		}
		f.workers = append(f.workers, p)
	}
	return nil
}

// waitClient returns a submitter's client once the workers have made the
// topology (a submitter may not: a refused request is not answered,
// hence the short deadline of each try).
func waitClient(ctx context.Context, js jetstream.JetStream) (*jobs.Client, error) {
	for {
		actx, acancel := context.WithTimeout(ctx, 3*time.Second)
		if _, err := js.Stream(actx, fleet.StreamName); err == nil {
			client, err := jobs.NewClient(actx, js, jobs.Config{})
			if err == nil {
				acancel()
				return client, nil
			}
		}
		acancel()
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("topology not up: %w", ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// cpuOf is the CPU the processes spent so far.
func cpuOf(ps []*proc) time.Duration {
	var t time.Duration
	for _, p := range ps {
		t += p.cpu()
	}
	return t
}

// runJobs submits n jobs from 16 goroutines and waits for every result:
// the wall time from the first submit, and the bytes of results stored.
func runJobs(ctx context.Context, client *jobs.Client, watch *jobs.ResultsWatch, n int, code string) (time.Duration, int64, error) {
	began := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	sctx, submitFailed := context.WithCancelCause(ctx)
	defer submitFailed(nil)
	for g := range 16 {
		wg.Go(func() {
			for i := g; i < n; i += 16 {
				if _, err := client.Submit(sctx, &jobs.Job{ID: fmt.Sprintf("cap-%d-%06d", began.Unix(), i), Image: "python", Code: code}); err != nil {
					submitFailed(err)
					return
				}
			}
		})
	}
	got := 0
	var stored int64
	for got < n {
		res, err := watch.Next(sctx)
		switch {
		case ctx.Err() != nil:
			return 0, 0, fmt.Errorf("%d results of %d", got, n)
		case sctx.Err() != nil:
			return 0, 0, context.Cause(sctx)
		case err != nil:
			return 0, 0, err
		}
		got++
		stored += int64(len(res.Data))
	}
	return time.Since(began), stored, nil
}

// figures are what a run measured.
type figures struct {
	n, workers, slots    int
	executor, code       string
	idle                 time.Duration
	nodes                []*proc
	idleCPU              time.Duration
	wall                 time.Duration
	stored               int64
	nodesCPU, workersCPU time.Duration
	results              *jetstream.StreamInfo
}

func (f *figures) print() {
	n := f.n
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("capacity: %d jobs (%s executor, %q), %d workers × %d slots, 3-node cluster (replicas 3), %d cores, load %s\n",
		n, f.executor, f.code, f.workers, f.slots, numCPU(), strings.Join(strings.Fields(string(load))[:3], " "))
	fmt.Printf("  idle            the 3 nodes spent %s of CPU in %s with the workers idle: %.1f ms/s per worker\n",
		f.idleCPU.Round(time.Millisecond), f.idle, float64(f.idleCPU.Milliseconds())/f.idle.Seconds()/float64(f.workers))
	fmt.Printf("  wall            %s, %.0f jobs/s\n", f.wall.Round(time.Millisecond), float64(n)/f.wall.Seconds())
	fmt.Printf("  broker CPU      %s in all, %.0f µs per job (3 nodes together), %.2f cores busy\n",
		f.nodesCPU.Round(time.Millisecond), float64(f.nodesCPU.Microseconds())/float64(n), f.nodesCPU.Seconds()/f.wall.Seconds())
	for _, p := range f.nodes {
		fmt.Printf("    %s %s\n", p.name, (p.cpu()).Round(time.Millisecond))
	}
	fmt.Printf("  workers CPU     %s in all, %.0f µs per job\n", f.workersCPU.Round(time.Millisecond), float64(f.workersCPU.Microseconds())/float64(n))
	st := f.results.State
	fmt.Printf("  RESULTS         %d results, %d bytes in the stream (one replica): %.0f bytes per result stored, %.0f of it the result's JSON\n",
		st.Msgs, st.Bytes, float64(st.Bytes)/float64(max(st.Msgs, 1)), float64(f.stored)/float64(n))
}

func numCPU() int {
	data, _ := os.ReadFile("/proc/cpuinfo")
	return strings.Count(string(data), "processor\t:")
}

func connectRetry(url string) (*nats.Conn, jetstream.JetStream, error) {
	var last error
	for range 100 {
		nc, js, err := natsconn.JetStream(natsconn.Config{URL: url, Name: "sandfleet-capacity", Extra: []nats.Option{nats.Timeout(2 * time.Second)}})
		if err == nil {
			return nc, js, nil
		}
		last = err
		time.Sleep(200 * time.Millisecond)
	}
	return nil, nil, last
}
