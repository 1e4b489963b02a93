// Command bench measures sandfleet against plain `docker run --rm` on this
// machine, in one run (issue 7), and prints the figures beside the targets:
//
//	(a)  docker run --rm of the hardened print(1) job: sequential p50/p95,
//	     and throughput with 2×cores runs in parallel;
//	(b)  the same job through sandfleet (a bin/worker --embedded subprocess
//	     with its warm pool, and the pkg/jobs client): sequential
//	     submit→result p50/p95, and throughput with every job in flight;
//	(b') the same with --pool 0, to show what the pool buys;
//	(c)  queue overhead alone: jobs/s through an in-process JetStream and
//	     the real pkg/worker on a no-op executor;
//	(d)  the worker subprocess's RSS idle and under load;
//	(e)  (b) and (b') again with --runtime runsc, when the engine has
//	     gVisor registered (make runsc): what the second kernel costs;
//	(f)  what a workspace's restore and save add to a warm job, for 0 B,
//	     1 MiB and 20 MiB (workspace.go).
//
// Usage (make bench): go run ./tools/bench [-n 20] [-jobs 40] ...
// -cpuprofile writes a CPU profile of phase (c), which runs in this process.
//
// Then (f), the cost of streaming (issue 13): a warm job with no output,
// p50 with the worker's events on and off, in pairs, and (f') the same on
// the worker's own path without Docker; -events-only runs them alone; and
// (g), the HTTP gateway against the Go client (issue 14).
//
// Phases (i) to (n), Performance II (perf.go): the seed's Engine API
// sequence, agent-like calls, fresh-sandbox throughput against the
// engine's ceiling, the engine's cost per container, the levers and
// HumanEval, with one target table; -perf2-only runs them alone.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/natsembed"
	"github.com/sandfleet/sandfleet/pkg/executor"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/worker"
)

type options struct {
	n           int
	jobs        int
	parallel    int
	slots       int
	pool        int
	queueJobs   int
	queueSlots  int
	workerBin   string
	cpuProfile  string
	skipDocker  bool
	code        string
	runsc       string // auto, on or off
	runtime     string // the worker's --runtime for (b); "" for its default
	httpJobs    int
	httpClients int
	quietCode   string
	eventsN     int
	eventsOnly  bool

	// (h), workspace.go
	image          string
	workspaces     bool
	workspacesOnly bool

	perf2Options // (i)-(n), perf.go
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	o := options{}
	cores := runtime.NumCPU()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 20, "sequential runs per latency figure")
	fs.IntVar(&o.jobs, "jobs", 40, "jobs per throughput figure")
	fs.IntVar(&o.parallel, "parallel", 2*cores, "docker run processes at once for (a)'s throughput")
	fs.IntVar(&o.slots, "slots", 0, "the worker's --slots for (b) (default -parallel: the same concurrency as (a))")
	fs.IntVar(&o.pool, "pool", -1, "the worker's --pool for (b) (default --slots)")
	fs.IntVar(&o.queueJobs, "queue-jobs", 20000, "jobs for (c)")
	fs.IntVar(&o.queueSlots, "queue-slots", 256, "worker slots for (c)")
	fs.StringVar(&o.workerBin, "worker", "bin/worker", "the worker binary for (b) and (d)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of (c) to `FILE`")
	fs.BoolVar(&o.skipDocker, "skip-docker", false, "run (c) only")
	fs.StringVar(&o.code, "code", "print(1)", "the Python job")
	fs.IntVar(&o.httpJobs, "http-jobs", 2000, "no-op jobs each way for (g)")
	fs.IntVar(&o.httpClients, "http-clients", 64, "concurrent callers for (g)")
	fs.StringVar(&o.runsc, "runsc", "auto", "measure (e) under gVisor: auto (when the engine has runsc), on or off")
	fs.StringVar(&o.quietCode, "quiet-code", "pass", "the Python job of (f), which writes nothing")
	fs.IntVar(&o.eventsN, "events-n", 30, "jobs per worker for (f)")
	fs.BoolVar(&o.eventsOnly, "events-only", false, "run (f) only")
	fs.StringVar(&o.image, "image", "", "the sandbox `IMAGE` of (a), (b), (h) and (i)-(n) (default the worker's, "+executor.DefaultImage+")")
	fs.BoolVar(&o.workspaces, "workspaces", true, "run (h), the workspace phase")
	fs.BoolVar(&o.workspacesOnly, "workspaces-only", false, "run (h) alone")
	definePerf2Flags(fs, &o.perf2Options)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.slots <= 0 {
		o.slots = o.parallel
	}
	if o.pool < 0 {
		o.pool = o.slots
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	ctx := context.Background()
	if o.workspacesOnly {
		return workspacesAlone(ctx, o)
	}
	if o.perf2Only {
		p2 := runPerf2(ctx, o)
		p2.print(os.Stdout)
		return p2.err()
	}
	load0 := loadAvg()
	start := time.Now()
	r := &report{cores: cores, o: o}
	if o.eventsOnly {
		step("(f) streaming on vs off: %d warm jobs each, in pairs", o.eventsN)
		s, err := streamingCost(ctx, o)
		if err != nil {
			return fmt.Errorf("(f): %w", err)
		}
		fmt.Printf("\nsandfleet bench: %d cores, load average %s at start, %s at end, %s in all\n",
			cores, load0, loadAvg(), time.Since(start).Round(time.Second))
		s.print(os.Stdout, o.quietCode)
		return nil
	}

	var events *streaming
	var p2 *perf2
	if !o.skipDocker {
		if _, err := os.Stat(o.workerBin); err != nil {
			return fmt.Errorf("-worker %s: %w (make build)", o.workerBin, err)
		}
		step("(a) docker run --rm: %d sequential, %d in %d parallel", o.n, o.jobs, o.parallel)
		if err := dockerRun(ctx, o, r); err != nil {
			return fmt.Errorf("(a): %w", err)
		}
		step("(b) sandfleet with --pool %d --slots %d", o.pool, o.slots)
		if err := viaWorker(ctx, o, o.pool, &r.pooled, true, r); err != nil {
			return fmt.Errorf("(b): %w", err)
		}
		step("(b') sandfleet with --pool 0 --slots %d", o.slots)
		if err := viaWorker(ctx, o, 0, &r.fresh, false, r); err != nil {
			return fmt.Errorf("(b'): %w", err)
		}
		if o.runsc == "on" || (o.runsc == "auto" && hasRuntime(ctx, "runsc")) {
			gv := o
			gv.runtime = "runsc"
			step("(e) sandfleet under runsc, --pool %d and --pool 0", o.pool)
			if err := viaWorker(ctx, gv, o.pool, &r.runscPooled, false, r); err != nil {
				return fmt.Errorf("(e): %w", err)
			}
			if err := viaWorker(ctx, gv, 0, &r.runscFresh, false, r); err != nil {
				return fmt.Errorf("(e): %w", err)
			}
		}
		step("(f) streaming on vs off: %d warm jobs each, in pairs", o.eventsN)
		var err error
		if events, err = streamingCost(ctx, o); err != nil {
			return fmt.Errorf("(f): %w", err)
		}
		if o.workspaces {
			step("(h) workspaces of 0 B, 1 MiB and 20 MiB: %d steps each, interleaved with plain jobs", o.n)
			var err error
			if r.ws, err = workspaceCost(ctx, o); err != nil {
				return fmt.Errorf("(h): %w", err)
			}
		}
		if o.perf2 {
			p2 = runPerf2(ctx, o)
		}
	}
	step("(c) queue overhead: %d jobs, no-op executor, %d slots", o.queueJobs, o.queueSlots)
	if err := queueOverhead(ctx, o, r); err != nil {
		return fmt.Errorf("(c): %w", err)
	}
	step("(g) HTTP gateway: %d no-op jobs each way, %d concurrent callers", o.httpJobs, o.httpClients)
	if err := gatewayOverhead(ctx, o, r); err != nil {
		return fmt.Errorf("(g): %w", err)
	}
	r.load = [2]string{load0, loadAvg()}
	r.took = time.Since(start)
	r.print(os.Stdout)
	events.print(os.Stdout, o.quietCode)
	if p2 != nil {
		p2.reportR = r
		p2.print(os.Stdout)
		return p2.err()
	}
	return nil
}

func step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// figures of one way of running the job.
type figures struct {
	seq  []time.Duration
	tput float64 // jobs/s
}

type report struct {
	cores             int
	o                 options
	docker, pooled    figures
	fresh             figures
	runscPooled       figures // (e)
	runscFresh        figures
	queue             float64
	queueCPU          time.Duration // per job: server, worker and client together
	rssIdle, rssLoad  int64         // KiB
	hwm               int64
	viaGo, viaGoReply gatewayFigures // (g)
	viaHTTP           gatewayFigures
	ws                *wsFigures // (h)
	load              [2]string
	took              time.Duration
}

// (a) ----------------------------------------------------------------------

func dockerRun(ctx context.Context, o options, r *report) error {
	e, err := executor.New(executor.Config{WorkerID: "bench-docker-run", Presets: presetsFor(o.image)})
	if err != nil {
		return err
	}
	defer e.Close()
	if err := e.Check(ctx); err != nil {
		return err
	}
	args, err := e.DockerRunArgs("python")
	if err != nil {
		return err
	}
	args = append([]string{"run"}, args...)
	once := func() error {
		seal := envelope.NewSeal()
		h := &envelope.Header{Argv: []string{"python3", "main.py"}, Dir: "/workspace", Key: seal.Key,
			Files: []envelope.File{{Name: "main.py", Data: []byte(o.code)}}}
		env, err := envelope.Marshal(h)
		if err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, "docker", args...)
		cmd.Stdin = bytes.NewReader(env)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("docker run: %w: %s", err, stderr.String())
		}
		if len(out) == 0 {
			return errors.New("docker run: no output")
		}
		return nil
	}
	if err := once(); err != nil { // warm-up
		return err
	}
	for range o.n {
		t := time.Now()
		if err := once(); err != nil {
			return err
		}
		r.docker.seq = append(r.docker.seq, time.Since(t))
	}
	r.docker.tput, err = parallel(o.jobs, o.parallel, once)
	return err
}

// parallel runs do total times, conc at once, and returns runs per second.
func parallel(total, conc int, do func() error) (float64, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, conc)
	t := time.Now()
	for i := range conc {
		wg.Go(func() {
			for next.Add(1) <= int64(total) {
				if err := do(); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return float64(total) / time.Since(t).Seconds(), errors.Join(errs...)
}

// (b), (d) -------------------------------------------------------------------

func viaWorker(ctx context.Context, o options, pool int, f *figures, measureRSS bool, r *report) error {
	args := []string{"--slots", strconv.Itoa(o.slots), "--pool", strconv.Itoa(pool)}
	if o.runtime != "" {
		args = append(args, "--runtime", o.runtime)
	}
	if o.image != "" {
		dir, err := os.MkdirTemp("", "sandfleet-bench-image-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		img, err := imageArgs(dir, o.image)
		if err != nil {
			return err
		}
		args = append(args, img...)
	}
	w, err := startWorker(ctx, o, strconv.Itoa(pool), args...)
	if err != nil {
		return err
	}
	defer w.stop()
	id, cmd, nc, cli, fail := w.id, w.cmd, w.nc, w.cli, w.fail
	job := func() *jobs.Job { return &jobs.Job{Image: "python", Code: o.code} }
	one := func() error {
		jctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		res, err := cli.SubmitAndWait(jctx, job())
		if err != nil {
			return err
		}
		if res.Status != jobs.StatusSucceeded {
			return fmt.Errorf("job %s: %s %s %s", res.ID, res.Status, res.Error, res.Stderr)
		}
		return nil
	}
	// Warm-up, then give the pool time to fill: idle is idle.
	if err := one(); err != nil {
		return fail(err)
	}
	time.Sleep(3 * time.Second)
	if measureRSS {
		r.rssIdle, _ = procStatus(cmd.Process.Pid, "VmRSS")
	}
	for range o.n {
		t := time.Now()
		if err := one(); err != nil {
			return fail(err)
		}
		f.seq = append(f.seq, time.Since(t))
	}
	time.Sleep(2 * time.Second) // let the pool refill before the burst

	// Throughput: every job in flight at once; results come back on one
	// reply subject, as an orchestrator would collect them.
	reply := "bench.replies." + id
	sub, err := nc.SubscribeSync(reply)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	var peak atomic.Int64
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	if measureRSS {
		sampler.Go(func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stopSampling:
					return
				case <-tick.C:
					if v, err := procStatus(cmd.Process.Pid, "VmRSS"); err == nil && v > peak.Load() {
						peak.Store(v)
					}
				}
			}
		})
	}
	t := time.Now()
	for range o.jobs {
		j := job()
		j.ReplyTo = reply
		if _, err := cli.Submit(ctx, j); err != nil {
			return fail(err)
		}
	}
	for range o.jobs {
		msg, err := sub.NextMsg(2 * time.Minute)
		if err != nil {
			return fail(fmt.Errorf("waiting for results: %w", err))
		}
		res, err := jobs.DecodeResult(msg.Data)
		if err != nil {
			return err
		}
		if res.Status != jobs.StatusSucceeded {
			return fail(fmt.Errorf("job %s: %s %s", res.ID, res.Status, res.Error))
		}
	}
	f.tput = float64(o.jobs) / time.Since(t).Seconds()
	close(stopSampling)
	sampler.Wait()
	if measureRSS {
		r.rssLoad = peak.Load()
		r.hwm, _ = procStatus(cmd.Process.Pid, "VmHWM")
	}
	return nil
}

// workerProc is a bin/worker --embedded subprocess, and a client of its
// server.
type workerProc struct {
	id   string
	cmd  *exec.Cmd
	nc   *nats.Conn
	cli  *jobs.Client
	logf string
	stop func() // signals it, waits for it and removes its files
}

// startWorker starts o.workerBin --embedded with args, named after name,
// and connects to it.
func startWorker(ctx context.Context, o options, name string, args ...string) (_ *workerProc, err error) {
	dir, err := os.MkdirTemp("", "sandfleet-bench-")
	if err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	w := &workerProc{id: "bench-" + strconv.Itoa(os.Getpid()) + "-" + name, logf: filepath.Join(dir, "worker.log")}
	logf, err := os.Create(w.logf)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	w.cmd = exec.Command(o.workerBin, append([]string{"--embedded", "--listen", addr, "--data-dir", filepath.Join(dir, "data"),
		"--id", w.id, "--log-level", "warn"}, args...)...)
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	if err := w.cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- w.cmd.Wait() }()
	w.stop = func() {
		if w.nc != nil {
			w.nc.Close()
		}
		_ = w.cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = w.cmd.Process.Kill()
			<-exited
		}
		logf.Close()
		os.RemoveAll(dir)
	}
	if w.nc, w.cli, err = connect(ctx, "nats://"+addr, exited); err != nil {
		err = w.fail(err)
		w.stop()
		return nil, err
	}
	return w, nil
}

// fail adds the tail of the worker's log to err.
func (w *workerProc) fail(err error) error {
	log, _ := os.ReadFile(w.logf)
	if len(log) > 2000 {
		log = log[len(log)-2000:]
	}
	return fmt.Errorf("%w\nworker log (tail):\n%s", err, log)
}

// connect waits for the worker's embedded server and its topology.
func connect(ctx context.Context, url string, exited <-chan error) (*nats.Conn, *jobs.Client, error) {
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return nil, nil, fmt.Errorf("the worker exited: %v", err)
		default:
		}
		nc, err := nats.Connect(url, nats.Timeout(time.Second))
		if err == nil {
			js, _ := jetstream.New(nc)
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			cli, err := jobs.NewClient(cctx, js, jobs.Topology{})
			cancel()
			if err == nil {
				return nc, cli, nil
			}
			nc.Close()
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return nil, nil, fmt.Errorf("the worker's NATS at %s never answered: %v", url, last)
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// procStatus reads a "Vm..." line of /proc/<pid>/status, in KiB.
func procStatus(pid int, key string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, key+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", key, pid)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// (c) ------------------------------------------------------------------------

// noop succeeds at once: what is left is the queue.
type noop struct{}

func (noop) Run(_ context.Context, j *jobs.Job, _ jobs.RunOptions) (*jobs.Result, error) {
	code := 0
	now := time.Now().UTC()
	return &jobs.Result{ID: j.ID, Status: jobs.StatusSucceeded, Exit: &code, Labels: j.Labels, StartedAt: &now, FinishedAt: &now}, nil
}

func queueOverhead(ctx context.Context, o options, r *report) error {
	dir, err := os.MkdirTemp("", "sandfleet-bench-queue-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := natsembed.Start(natsembed.Options{Listen: "127.0.0.1:-1", StoreDir: dir})
	if err != nil {
		return err
	}
	defer func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}()
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	w, err := worker.New(js, noop{}, worker.Config{ID: "bench-queue", Slots: o.queueSlots, Logger: quiet})
	if err != nil {
		return err
	}
	stop, stopNow := context.WithCancel(ctx)
	force, forceNow := context.WithCancel(ctx)
	defer forceNow()
	done := make(chan error, 1)
	go func() { done <- w.Run(stop, force) }()
	defer func() {
		stopNow()
		<-done
	}()
	// The client has a connection of its own, as it would in a fleet.
	cnc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		return err
	}
	defer cnc.Close()
	cjs, err := jetstream.New(cnc)
	if err != nil {
		return err
	}
	var cli *jobs.Client
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if cli, err = jobs.NewClient(ctx, cjs, jobs.Topology{}); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		pf, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	const reply = "bench.queue.replies"
	var got atomic.Int64
	all := make(chan struct{})
	sub, err := cnc.Subscribe(reply, func(*nats.Msg) {
		if got.Add(1) == int64(o.queueJobs) {
			close(all)
		}
	})
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	t, cpu0 := time.Now(), cpuTime()
	// Submitters publish asynchronously-enough: several goroutines, each
	// waiting for its publish acks, as many orchestrators would.
	_, err = parallel(o.queueJobs, 32, func() error {
		_, err := cli.Submit(ctx, &jobs.Job{Image: "python", Code: "print(1)", ReplyTo: reply})
		return err
	})
	if err != nil {
		return err
	}
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		return fmt.Errorf("only %d of %d results", got.Load(), o.queueJobs)
	}
	r.queue = float64(o.queueJobs) / time.Since(t).Seconds()
	r.queueCPU = (cpuTime() - cpu0) / time.Duration(o.queueJobs)
	return nil
}

// cpuTime is this process's user+system CPU time: unlike wall-clock
// figures, per-job CPU barely moves when other work loads the machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// report ---------------------------------------------------------------------

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p*float64(len(s)-1) + 0.5)
	return s[i]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\nsandfleet bench: %d cores, load average %s at start, %s at end, %s in all\n",
		r.cores, r.load[0], r.load[1], r.took.Round(time.Second))
	fmt.Fprintf(w, "job: python %q; latency over %d sequential runs; throughput over %d jobs\n\n", r.o.code, r.o.n, r.o.jobs)
	tw := func(cols ...string) { fmt.Fprintf(w, "%-44s %12s %12s %14s\n", cols[0], cols[1], cols[2], cols[3]) }
	tw("", "p50", "p95", "throughput")
	row := func(name string, f figures) {
		if len(f.seq) == 0 {
			return
		}
		tw(name, ms(pct(f.seq, .5)), ms(pct(f.seq, .95)), fmt.Sprintf("%.2f jobs/s", f.tput))
	}
	row(fmt.Sprintf("(a)  docker run --rm (%d parallel)", r.o.parallel), r.docker)
	row(fmt.Sprintf("(b)  sandfleet, --pool %d --slots %d", r.o.pool, r.o.slots), r.pooled)
	row(fmt.Sprintf("(b') sandfleet, --pool 0 --slots %d", r.o.slots), r.fresh)
	row(fmt.Sprintf("(e)  runsc, --pool %d --slots %d", r.o.pool, r.o.slots), r.runscPooled)
	row(fmt.Sprintf("(e') runsc, --pool 0 --slots %d", r.o.slots), r.runscFresh)
	tw(fmt.Sprintf("(c)  queue only, no-op executor, %d slots", r.o.queueSlots), "", "", fmt.Sprintf("%.0f jobs/s", r.queue))
	fmt.Fprintf(w, "     (c) costs %.0f µs of CPU per job, NATS server, worker and client together: at most %.0f jobs/s per core\n",
		float64(r.queueCPU)/float64(time.Microsecond), float64(time.Second)/float64(max(r.queueCPU, 1)))
	r.printGateway(w)
	if r.rssIdle > 0 {
		fmt.Fprintf(w, "(d)  worker RSS: %.1f MiB idle, %.1f MiB peak under load (VmHWM %.1f MiB)\n",
			float64(r.rssIdle)/1024, float64(r.rssLoad)/1024, float64(r.hwm)/1024)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-40s %-22s %-22s %s\n", "target", "measured", "goal (aim)", "")
	verdict := func(name, measured, goal string, met, aim bool) {
		v := "MISSED"
		if met {
			v = "met"
		}
		if aim {
			v += ", aim met"
		}
		fmt.Fprintf(w, "%-40s %-22s %-22s %s\n", name, measured, goal, v)
	}
	if len(r.docker.seq) > 0 {
		lat := float64(pct(r.pooled.seq, .5)) / float64(pct(r.docker.seq, .5))
		verdict("(b)/(a) p50 latency", fmt.Sprintf("%.2f×", lat), "≤ 0.50× (0.25×)", lat <= 0.5, lat <= 0.25)
		tp := r.pooled.tput / r.docker.tput
		verdict("(b)/(a) throughput", fmt.Sprintf("%.2f×", tp), "≥ 1.00× (1.20×)", tp >= 1, tp >= 1.2)
		fl := float64(pct(r.fresh.seq, .5)) / float64(pct(r.docker.seq, .5))
		ft := r.fresh.tput / r.docker.tput
		fmt.Fprintf(w, "%-40s %-22s %-22s %s\n", "(b')/(a), no pool: p50, throughput", fmt.Sprintf("%.2f×, %.2f×", fl, ft), "(for comparison)", "")
	}
	if len(r.runscPooled.seq) > 0 && len(r.pooled.seq) > 0 {
		wl := float64(pct(r.runscPooled.seq, .5)) / float64(pct(r.pooled.seq, .5))
		cl := float64(pct(r.runscFresh.seq, .5)) / float64(pct(r.fresh.seq, .5))
		fmt.Fprintf(w, "%-40s %-22s %-22s %s\n", "(e)/(b) runsc cost: warm p50, cold p50", fmt.Sprintf("%.2f×, %.2f×", wl, cl), "(for comparison)", "")
	}
	const goal = 3000.0 // on 2 cores
	verdict("(c) queue throughput", fmt.Sprintf("%.0f jobs/s", r.queue), fmt.Sprintf("≥ %.0f jobs/s", goal), r.queue >= goal, false)
	if r.rssIdle > 0 {
		mib := float64(r.rssIdle) / 1024
		verdict("(d) worker RSS idle", fmt.Sprintf("%.1f MiB", mib), "≤ 50 MiB", mib <= 50, false)
	}
	r.ws.print(w)
}

// hasRuntime reports whether the Docker engine has the named runtime.
func hasRuntime(ctx context.Context, name string) bool {
	out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{json .Runtimes}}").Output()
	return err == nil && bytes.Contains(out, []byte(`"`+name+`"`))
}
