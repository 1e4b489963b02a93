package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/procfs"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// (a) docker run --rm, the baseline; (b), (b'), (d) and (e) the same job
// through a worker process.

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

func viaWorker(ctx context.Context, o options, pool int, f *figures, measureRSS bool, r *report) error {
	rg, err := newRig(ctx, o, "image")
	if err != nil {
		return err
	}
	defer rg.close()
	args := []string{"--slots", strconv.Itoa(o.slots), "--pool", strconv.Itoa(pool)}
	if o.runtime != "" {
		args = append(args, "--runtime", o.runtime)
	}
	w, err := rg.worker(strconv.Itoa(pool), args...)
	if err != nil {
		return err
	}
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
		r.rssIdle, _ = procfs.Status(cmd.Process.Pid, "VmRSS")
		r.rssAnon, _ = procfs.Status(cmd.Process.Pid, "RssAnon")
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
					if v, err := procfs.Status(cmd.Process.Pid, "VmRSS"); err == nil && v > peak.Load() {
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
		r.hwm, _ = procfs.Status(cmd.Process.Pid, "VmHWM")
	}
	return nil
}

// hasRuntime reports whether the Docker engine has the named runtime.
func hasRuntime(ctx context.Context, name string) bool {
	out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{json .Runtimes}}").Output()
	return err == nil && bytes.Contains(out, []byte(`"`+name+`"`))
}
