package main

import (
	"context"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// (j): agent-like calls, one at a time with think time between them.

func (p *perf2) agentLike(ctx context.Context, o options) error {
	rg, err := newRig(ctx, o, "agent")
	if err != nil {
		return err
	}
	defer rg.close()
	// The worker's defaults: --slots = cores, --pool = slots.
	w, err := rg.worker("agent")
	if err != nil {
		return err
	}
	seed, err := rg.seed()
	if err != nil {
		return err
	}
	dr, err := rg.dockerRun()
	if err != nil {
		return err
	}
	fleet := func() error {
		res, err := submitWait(ctx, w, &jobs.Job{Image: "python", Code: o.code})
		if err != nil {
			return err
		}
		if res.DurationMS != nil {
			p.agentSandbox = append(p.agentSandbox, time.Duration(*res.DurationMS)*time.Millisecond)
		}
		if res.CPUMS != nil {
			p.agentCPU = append(p.agentCPU, time.Duration(*res.CPUMS)*time.Millisecond)
		}
		return nil
	}
	if err := fleet(); err != nil {
		return err
	}
	time.Sleep(3 * time.Second) // the pool fills: an agent's first call comes to a warm worker
	return alternate(o.n, []func() error{
		timed(&p.agentFleet, fleet),
		timed(&p.agentSeed, func() error { return seed.run(ctx, o.code) }),
		timed(&p.agentDocker, func() error { return dr.run(ctx, o.code) }),
	}, o.think)
}
