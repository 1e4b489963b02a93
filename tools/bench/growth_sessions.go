package main

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// sessionBench is (u)'s worker for sessions and the sessions it holds.
type sessionBench struct {
	h       *httpWorker
	metrics string // its --metrics address
	js      jetstream.JetStream
	ids     []string
}

// sessionsPart reads the worker's memory against idle sessions, then the
// exec round trip against busy ones, on one worker whose --sessions holds
// the most of either, and what the sessions and their calls left on the
// broker.
func (f *growthFigures) sessionsPart(ctx context.Context, o options, memory, exec bool) error {
	var idle, busy []int
	var err error
	if memory {
		if idle, err = levels(f.o.idle); err != nil {
			return fmt.Errorf("-growth-sessions: %w", err)
		}
	}
	if exec {
		if busy, err = levels(f.o.busy); err != nil {
			return fmt.Errorf("-growth-busy: %w", err)
		}
	}
	rg, err := newRig(ctx, o, "growth-sessions")
	if err != nil {
		return err
	}
	defer rg.close()
	s := &sessionBench{}
	if s.metrics, err = freeAddr(); err != nil {
		return err
	}
	// The caps per token and tenant off: one caller holds them all.
	caps := "--pprof --sessions " + strconv.Itoa(max(largest(idle), largest(busy))+4) + " --session-max-per-token -1 --session-max-per-tenant -1"
	f.sessArgs = "--embedded --http ADDR --metrics ADDR " + caps
	if s.h, err = startHTTPWorker(ctx, rg, o.workerBin, "growth-sessions", "--metrics "+s.metrics+" "+caps); err != nil {
		return err
	}
	js, done, err := brokerOf(s.h)
	if err != nil {
		return err
	}
	defer done()
	s.js = js
	defer s.shrink(0)
	time.Sleep(f.o.settle)
	if err := f.idleMemory(ctx, s, idle); err != nil {
		return err
	}
	return f.busyExec(ctx, s, busy)
}

// idleMemory grows the worker's idle sessions level by level and reads
// its memory at each.
func (f *growthFigures) idleMemory(ctx context.Context, s *sessionBench, idle []int) error {
	before, err := streams(ctx, s.js)
	if err != nil {
		return err
	}
	for _, n := range idle {
		step("(u) memory: %d idle sessions", n)
		if err := s.grow(ctx, n); err != nil {
			return fmt.Errorf("%d sessions: %w", n, err)
		}
		time.Sleep(f.o.settle)
		m, err := memoryOf(s.h, s.metrics, n)
		if err != nil {
			return err
		}
		f.idle = append(f.idle, m)
	}
	if len(s.ids) == 0 {
		return nil
	}
	after, err := streams(ctx, s.js)
	if err != nil {
		return err
	}
	f.store = append(f.store, delta("a live session (idle)", len(s.ids), before, after))
	return nil
}

// busyExec keeps as many sessions as the most busy level and, level by
// level, runs -growth-execs execs in each of that many at once.
func (f *growthFigures) busyExec(ctx context.Context, s *sessionBench, busy []int) error {
	if len(busy) == 0 {
		return nil
	}
	if err := s.grow(ctx, largest(busy)); err != nil {
		return err
	}
	s.shrink(largest(busy)) // the idle ones beyond go
	time.Sleep(f.o.settle)
	before, err := streams(ctx, s.js)
	if err != nil {
		return err
	}
	calls := 0
	for _, k := range busy {
		if k < 1 {
			continue
		}
		step("(u) exec: %d sessions busy at once, %d execs each", k, f.o.execsPer)
		time.Sleep(f.o.settle)
		l := fanOut(ctx, k, k*f.o.execsPer, k, s.h.w.cmd.Process.Pid, func(ctx context.Context, c int) error {
			return execTrue(ctx, s.h, s.ids[c])
		})
		f.exec = append(f.exec, l)
		calls += len(l.ok) + l.fails
	}
	time.Sleep(f.o.settle)
	after, err := streams(ctx, s.js)
	if err != nil {
		return err
	}
	f.store = append(f.store, delta("a session call (exec true)", calls, before, after))
	return nil
}

// grow creates sessions, 4 at once, until the worker holds to.
func (s *sessionBench) grow(ctx context.Context, to int) error {
	for len(s.ids) < to {
		n := min(4, to-len(s.ids))
		got, errs := make([]string, n), make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { got[i], errs[i] = createSession(ctx, s.h) })
		}
		wg.Wait()
		var first error
		for i := range n { // those made are kept, for shrink to delete
			if errs[i] != nil {
				first = cmpOr(first, errs[i])
			} else {
				s.ids = append(s.ids, got[i])
			}
		}
		if first != nil {
			return first
		}
	}
	return nil
}

// shrink deletes sessions, the last created first, until to are left.
func (s *sessionBench) shrink(to int) {
	for len(s.ids) > to {
		deleteSession(s.h, s.ids[len(s.ids)-1])
		s.ids = s.ids[:len(s.ids)-1]
	}
}

func createSession(ctx context.Context, h *httpWorker) (string, error) {
	var info struct{ ID string }
	if _, _, err := h.call(ctx, "POST", "/v1/sessions", map[string]any{"image": "python"}, &info); err != nil {
		return "", err
	}
	return info.ID, nil
}

func deleteSession(h *httpWorker, id string) {
	_, _, _ = h.call(context.Background(), "DELETE", "/v1/sessions/"+id, nil, nil)
}

// execTrue runs true in session id and wants its exit code 0.
func execTrue(ctx context.Context, h *httpWorker, id string) error {
	var r struct {
		ExitCode *int `json:"exit_code"`
	}
	if _, _, err := h.call(ctx, "POST", "/v1/sessions/"+id+"/exec", map[string]any{"cmd": []string{"true"}}, &r); err != nil {
		return err
	}
	if r.ExitCode == nil || *r.ExitCode != 0 {
		return fmt.Errorf("exec in %s: exit %v", id, r.ExitCode)
	}
	return nil
}
