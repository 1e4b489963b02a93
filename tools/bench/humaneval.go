package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/sandfleet/sandfleet/examples/problems"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// (n) ------------------------------------------------------------------------

// heFigures is HumanEval's canonical solutions run both ways, each way the
// whole set, in halves ABBA: docker run on the first half, sandfleet on
// the first half, sandfleet on the second, docker run on the second.
type heFigures struct {
	problems     int
	docker       time.Duration // wall of hardened docker run, o.conc at once
	fleet        time.Duration // wall of submit batch through one worker
	slots, conc  int
	dataset      string
	dockerFailed int // canonical solutions that did not exit 0 (none should)
}

func (p *perf2) humanEval(ctx context.Context, o options) error {
	path := o.humaneval
	if path == "off" || path == "" {
		p.heSkip = "-humaneval off"
		return nil
	}
	if _, err := os.Stat(path); err != nil {
		p.heSkip = fmt.Sprintf("no dataset at %s (HumanEval.jsonl.gz from https://github.com/openai/human-eval; -humaneval PATH)", path)
		step("(n) HumanEval skipped: %s", p.heSkip)
		return nil
	}
	if _, err := os.Stat(o.submitBin); err != nil {
		p.heSkip = fmt.Sprintf("-submit %s: %v (make build)", o.submitBin, err)
		step("(n) HumanEval skipped: %s", p.heSkip)
		return nil
	}
	ps, err := problems.Open(path)
	if err != nil {
		return err
	}
	step("(n) HumanEval: %d canonical solutions, submit batch vs docker run %d at once, halves ABBA", len(ps), o.conc)
	rg, err := newRig(ctx, o, "humaneval")
	if err != nil {
		return err
	}
	defer rg.close()
	conc := fmt.Sprint(o.conc)
	w, err := rg.worker("humaneval", "--slots", conc, "--pool", conc)
	if err != nil {
		return err
	}
	dr, err := rg.dockerRun()
	if err != nil {
		return err
	}
	h := &heFigures{problems: len(ps), slots: o.conc, conc: o.conc, dataset: path}
	half := len(ps) / 2
	halves := [][]problems.Problem{ps[:half], ps[half:]}
	runID := hexID(4)
	viaDocker := func(part []problems.Problem) error {
		var next, failed atomic.Int64
		t := time.Now()
		_, err := parallel(len(part), o.conc, func() error {
			pr := part[next.Add(1)-1]
			if err := dr.run(ctx, pr.Code(pr.CanonicalSolution)); err != nil {
				if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
					failed.Add(1) // the solution's tests failed: counted, not fatal
					return nil
				}
				return err
			}
			return nil
		})
		h.docker += time.Since(t)
		h.dockerFailed += int(failed.Load())
		return err
	}
	viaFleet := func(part []problems.Problem, name string) error {
		batch := filepath.Join(rg.dir, name+".jsonl")
		if err := writeBatch(batch, part, "bench-"+runID+"-"+name+"-"); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, o.submitBin, "batch", batch, "-o", filepath.Join(rg.dir, name+".results.jsonl"), "--json")
		cmd.Env = append(os.Environ(), "NATS_URL="+w.nc.ConnectedUrl())
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		t := time.Now()
		err := cmd.Run()
		h.fleet += time.Since(t)
		if err != nil {
			return fmt.Errorf("submit batch: %w: %s %s", err, tail(out.Bytes()), tail(stderr.Bytes()))
		}
		return nil
	}
	// A warm-up job, then time for the pool to fill.
	if _, err := submitWait(ctx, w, &jobs.Job{Image: "python", Code: "pass"}); err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	if err := viaDocker(halves[0]); err != nil {
		return err
	}
	if err := viaFleet(halves[0], "a"); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	if err := viaFleet(halves[1], "b"); err != nil {
		return err
	}
	if err := viaDocker(halves[1]); err != nil {
		return err
	}
	p.he = h
	return nil
}

// writeBatch writes the canonical solutions as a batch, IDs prefix+name,
// as examples/humaneval does.
func writeBatch(path string, ps []problems.Problem, prefix string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	enc.SetEscapeHTML(false)
	for _, pr := range ps {
		j := jobs.Job{ID: prefix + pr.Name(), Image: "python", Code: pr.Code(pr.CanonicalSolution)}
		if err := enc.Encode(&j); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}

func (h *heFigures) print(w io.Writer, skip string) {
	if h == nil {
		if skip != "" {
			fmt.Fprintf(w, "(n)  HumanEval: not run: %s\n", skip)
		}
		return
	}
	fmt.Fprintf(w, "(n)  HumanEval (%s), %d canonical solutions, halves ABBA: docker run %d at once %s (%.2f jobs/s, %d failed), submit batch --slots %d --pool %d %s (%.2f jobs/s)\n",
		filepath.Base(h.dataset), h.problems, h.conc, ms(h.docker), float64(h.problems)/h.docker.Seconds(), h.dockerFailed,
		h.slots, h.slots, ms(h.fleet), float64(h.problems)/h.fleet.Seconds())
}

// tail is the end of what a subprocess wrote, to quote in an error.
func tail(b []byte) string {
	return string(b[max(0, len(b)-1500):])
}
