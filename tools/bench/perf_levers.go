package main

import (
	"context"
	"errors"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// (m), (m'): what the candidate levers could remove from a warm job.

// levers are what the candidate levers could at most remove from a warm
// job, measured inside the sandbox (the result's duration_ms: hand-off to
// verdict) on one warm worker, alternating.
type levers struct {
	python []time.Duration // python3 main.py with "pass"
	shell  []time.Duration // sh main.sh with "true": the launcher and attach alone
	wallPy []time.Duration // submit → result of the python job

	// (m'): the same warm print(1) on -image and on -lever-base
	base                       string
	withWall, withoutWall      []time.Duration
	withSandbox, withoutSandbx []time.Duration
}

func (p *perf2) leverCosts(ctx context.Context, o options) error {
	rg, err := newRig(ctx, o, "levers")
	if err != nil {
		return err
	}
	defer rg.close()
	w, err := rg.worker("levers", "--slots", "1", "--pool", "2")
	if err != nil {
		return err
	}
	inSandbox := func(d *[]time.Duration, wall *[]time.Duration, j *jobs.Job) func() error {
		return func() error {
			t := time.Now()
			res, err := submitWait(ctx, w, j)
			if err != nil {
				return err
			}
			if wall != nil {
				*wall = append(*wall, time.Since(t))
			}
			if res.DurationMS == nil {
				return errors.New("no duration_ms")
			}
			*d = append(*d, time.Duration(*res.DurationMS)*time.Millisecond)
			return nil
		}
	}
	if _, err := submitWait(ctx, w, &jobs.Job{Image: "python", Code: "pass"}); err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	if err := alternate(o.n, []func() error{
		inSandbox(&p.levers.python, &p.levers.wallPy, &jobs.Job{Image: "python", Code: "pass"}),
		inSandbox(&p.levers.shell, nil, &jobs.Job{Image: "shell", Code: "true"}),
	}, o.think); err != nil {
		return err
	}
	if o.leverBase == "" {
		return nil
	}
	// (m'): the lever on and off, one warm worker each, alternating.
	b, err := rg.workerOn(o.leverBase, "lever-base", "--slots", "1", "--pool", "2")
	if err != nil {
		return err
	}
	if _, err := submitWait(ctx, b, &jobs.Job{Image: "python", Code: "pass"}); err != nil {
		return err
	}
	time.Sleep(3 * time.Second)
	p.levers.base = o.leverBase
	l := &p.levers
	on, off := w, b
	one := func(w *workerProc, wall, sb *[]time.Duration) func() error {
		return func() error {
			t := time.Now()
			res, err := submitWait(ctx, w, &jobs.Job{Image: "python", Code: o.code})
			if err != nil {
				return err
			}
			*wall = append(*wall, time.Since(t))
			if res.DurationMS != nil {
				*sb = append(*sb, time.Duration(*res.DurationMS)*time.Millisecond)
			}
			return nil
		}
	}
	return alternate(o.n, []func() error{
		one(on, &l.withWall, &l.withSandbox),
		one(off, &l.withoutWall, &l.withoutSandbx),
	}, o.think)
}
