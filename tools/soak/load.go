package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// kind is one sort of job in the mix: its code, limits, the status it
// must end with and, for some, a check of its output.
type kind struct {
	name      string
	weight    int // 0: not drawn, sent by another kind or loop
	code      string
	lim       limits.Limits
	want      jobs.Status
	cancel    bool   // canceled a second after its submission
	workspace bool   // run in a workspace of its own
	then      string // the kind sent next, in the same workspace, once it ended
	egress    bool   // needs the soak's egress server
	check     func(*jobs.Result) error
}

func kindNamed(name string) *kind {
	for i := range kinds {
		if kinds[i].name == name {
			return &kinds[i]
		}
	}
	panic("no kind " + name)
}

var kinds = []kind{
	{name: "quick", weight: 50, code: "print(1)", want: jobs.StatusSucceeded, check: stdoutIs("1\n")},
	{name: "slow", weight: 14, code: "import time; time.sleep(1); print('ok')", want: jobs.StatusSucceeded, check: stdoutIs("ok\n")},
	{name: "memory", weight: 12, code: "b = bytearray(50 << 20); print(len(b))", want: jobs.StatusSucceeded, check: stdoutIs("52428800\n")},
	{name: "failing", weight: 8, code: "raise SystemExit(3)", want: jobs.StatusFailed},
	{name: "timeout", weight: 5, code: "import time; time.sleep(30)", lim: limits.Limits{Timeout: limits.Duration(time.Second)}, want: jobs.StatusTimeout},
	{name: "canceled", weight: 5, code: "import time; time.sleep(30)", want: jobs.StatusCanceled, cancel: true},
	{name: "large", weight: 4, code: "import sys; sys.stdout.write('x' * (512 << 10))", want: jobs.StatusSucceeded,
		check: func(r *jobs.Result) error { return lenIs(r, 512<<10) }},
	{name: "output_limit", weight: 2, code: "import sys; sys.stdout.write('x' * (200 << 10))", lim: limits.Limits{Output: 64 << 10}, want: jobs.StatusOutputLimit},
	// A workspace step writes a file; the next step, in the same
	// workspace, must read it back.
	{name: "ws_write", weight: 5, code: "open('note.txt', 'w').write('soak-ws')", want: jobs.StatusSucceeded, workspace: true, then: "ws_read"},
	{name: "ws_read", code: "print(open('note.txt').read())", want: jobs.StatusSucceeded, workspace: true, check: stdoutIs("soak-ws\n")},
	{name: "egress", weight: 4, code: "import urllib.request\nprint(urllib.request.urlopen('http://" + egressHost + ":" + egressPort + "/', timeout=20).read().decode())",
		lim: limits.Limits{Network: &limits.Network{Allow: egressRules}}, want: jobs.StatusSucceeded, egress: true, check: stdoutIs(egressBody + "\n")},
	// sent by the batch loop, five a batch over the HTTP API
	{name: "batch", code: "print(6 * 7)", want: jobs.StatusSucceeded, check: stdoutIs("42\n")},
}

var egressRules = func() []limits.Rule {
	r, err := limits.ParseRules(egressHost + ":" + egressPort)
	if err != nil {
		panic(err)
	}
	return r
}()

func stdoutIs(s string) func(*jobs.Result) error {
	return func(r *jobs.Result) error {
		if r.Stdout != s {
			return fmt.Errorf("stdout %.40q, want %q", r.Stdout, s)
		}
		return nil
	}
}

func lenIs(r *jobs.Result, n int) error {
	if len(r.Stdout) != n {
		return fmt.Errorf("stdout of %d bytes, want %d", len(r.Stdout), n)
	}
	return nil
}

// submitted is a job the soak sent and what became of it.
type submitted struct {
	id   string
	kind *kind
	sent time.Time
}

// load drives the worker and keeps the books: the jobs sent, the
// latencies of the current interval, the sessions' failures.
type load struct {
	w        *workerProc
	o        options
	inFlight chan struct{}
	waiting  sync.WaitGroup

	mu       sync.Mutex
	sent     []submitted
	skipped  int
	errs     []string
	jobLat   []time.Duration // quick jobs' submit→result, this interval
	execLat  []time.Duration // sessions' code cells, this interval
	sessions int
	byKind   map[string]int
}

func newLoad(w *workerProc, o options) *load {
	return &load{w: w, o: o, inFlight: make(chan struct{}, o.maxInFlight), byKind: map[string]int{}}
}

func (l *load) fail(format string, a ...any) {
	l.mu.Lock()
	l.errs = append(l.errs, fmt.Sprintf(format, a...))
	l.mu.Unlock()
}

// drive submits jobs at the fixed rate and runs sessions, until ctx ends.
func (l *load) drive(ctx context.Context) {
	var loops sync.WaitGroup
	loops.Go(func() { l.sessionLoop(ctx) })
	loops.Go(func() { l.batchLoop(ctx) })
	total := 0
	for _, k := range kinds {
		total += l.weight(&k)
	}
	gap := time.Duration(float64(time.Second) / l.o.rate)
	tick := time.NewTicker(gap)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			loops.Wait()
			return
		case <-tick.C:
		}
		r := rand.IntN(total)
		k := &kinds[0]
		for i := range kinds {
			if r < l.weight(&kinds[i]) {
				k = &kinds[i]
				break
			}
			r -= l.weight(&kinds[i])
		}
		select {
		case l.inFlight <- struct{}{}:
		default:
			l.mu.Lock()
			l.skipped++
			l.mu.Unlock()
			continue
		}
		l.waiting.Go(func() {
			defer func() { <-l.inFlight }()
			l.one(k, fmt.Sprintf("soak-%s-%d-%s", k.name, n, strconv.FormatInt(time.Now().UnixNano()%1e6, 36)))
		})
	}
}

// weight is k's share of the arrivals: none for egress without the
// soak's egress server.
func (l *load) weight(k *kind) int {
	if k.egress && !l.o.egress {
		return 0
	}
	return k.weight
}

// one submits a job of kind k (and the kinds it leads to) and waits for
// its result; the books are checked at the end, from the store, not from
// what was seen here.
func (l *load) one(k *kind, id string) {
	ws := ""
	if k.workspace {
		ws = "ws-" + id
	}
	for n := 0; k != nil; n++ {
		if !l.step(k, id+"-"+strconv.Itoa(n), ws) || k.then == "" {
			return
		}
		k = kindNamed(k.then)
	}
}

// step submits one job and waits for it; false when it did not end.
func (l *load) step(k *kind, id, ws string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	j := &jobs.Job{ID: id, Image: "python", Code: k.code, Limits: k.lim, Workspace: ws}
	s := submitted{id: id, kind: k, sent: time.Now()}
	if _, err := l.w.cli.Submit(ctx, j); err != nil {
		l.fail("submit %s: %v", id, err)
		return false
	}
	l.mu.Lock()
	l.sent = append(l.sent, s)
	l.byKind[k.name]++
	l.mu.Unlock()
	if k.cancel {
		time.Sleep(time.Second)
		if _, err := l.w.cli.Cancel(ctx, id); err != nil {
			l.fail("cancel %s: %v", id, err)
		}
	}
	if _, err := l.w.cli.Wait(ctx, id); err != nil {
		l.fail("wait %s: %v", id, err)
		return false
	}
	if k.name == "quick" {
		l.mu.Lock()
		l.jobLat = append(l.jobLat, time.Since(s.sent))
		l.mu.Unlock()
	}
	return true
}

// sentOne books a job sent by another path than step (a batch's).
func (l *load) sentOne(id string, k *kind, at time.Time) {
	l.mu.Lock()
	l.sent = append(l.sent, submitted{id: id, kind: k, sent: at})
	l.byKind[k.name]++
	l.mu.Unlock()
}

// prime runs one job of each kind, one at a time, each once the warm
// pool is full again (a pool drained grows, and would make the idle
// values a grown pool's), one batch and one session, so that what a
// worker makes once, at its first use, exists before the idle values
// are taken: the egress proxy and its goroutines, the workspaces' bucket
// and object store, each with the store's goroutines of a stream.
func (l *load) prime(ctx context.Context) {
	full, _ := l.w.settle(ctx, nil)
	for i := range kinds {
		if l.weight(&kinds[i]) == 0 {
			continue
		}
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
			if l.w.containers()["running"] >= full.containers["running"] {
				break
			}
		}
		l.one(&kinds[i], fmt.Sprintf("soak-prime-%s-%d", kinds[i].name, time.Now().UnixNano()%1e6))
	}
	if err := l.batch(ctx, -1); err != nil {
		l.fail("batch at the start: %v", err)
	}
	if err := l.session(ctx); err != nil {
		l.fail("session at the start: %v", err)
	}
	l.interval() // their latencies are not the first interval's
}

// count is the jobs sent.
func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.sent)
}

// wait waits for the jobs in flight.
func (l *load) wait() { l.waiting.Wait() }

// interval returns the p50 and p99 of the quick jobs' and the cells'
// latencies since the last call, and starts the next interval.
func (l *load) interval() (job, cell [2]time.Duration, jobsDone int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	job, cell = pcts(l.jobLat), pcts(l.execLat)
	l.jobLat, l.execLat = nil, nil
	return job, cell, len(l.sent)
}

func pcts(d []time.Duration) [2]time.Duration {
	if len(d) == 0 {
		return [2]time.Duration{}
	}
	slices.Sort(d)
	at := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	return [2]time.Duration{at(0.5), at(0.99)}
}

// check reads every job sent back from the store: one result per ID,
// with the status its kind must have.
func (l *load) check(ctx context.Context) []string {
	l.mu.Lock()
	sent := slices.Clone(l.sent)
	problems := slices.Clone(l.errs)
	l.mu.Unlock()
	seen := map[string]bool{}
	for _, s := range sent {
		if seen[s.id] {
			problems = append(problems, "job sent twice: "+s.id)
		}
		seen[s.id] = true
		res, err := l.w.cli.Get(ctx, s.id)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s (%s): no result: %v", s.id, s.kind.name, err))
			continue
		}
		if res.Status != s.kind.want {
			problems = append(problems, fmt.Sprintf("%s (%s): %s, want %s (error %q)", s.id, s.kind.name, res.Status, s.kind.want, res.Error))
			continue
		}
		if s.kind.check != nil {
			if err := s.kind.check(res); err != nil {
				problems = append(problems, fmt.Sprintf("%s (%s): %v", s.id, s.kind.name, err))
			}
		}
	}
	return problems
}

func (l *load) printCounts(w io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	names := make([]string, 0, len(l.byKind))
	for k := range l.byKind {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "jobs sent %d (", len(l.sent))
	for i, k := range names {
		if i > 0 {
			fmt.Fprint(w, ", ")
		}
		fmt.Fprintf(w, "%s %d", k, l.byKind[k])
	}
	fmt.Fprintf(w, "), arrivals skipped at %d in flight: %d; sessions completed %d\n", l.o.maxInFlight, l.skipped, l.sessions)
}
