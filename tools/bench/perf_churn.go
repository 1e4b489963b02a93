package main

import (
	"context"
	"time"
)

// (l): the engine's cost per container.

// churn is the engine's cost of one hardened container that runs
// /bin/true: each step's wall time, and the engine's CPU per container.
type churn struct {
	create, start, wait, remove []time.Duration
	total                       []time.Duration
	shimCPU                     time.Duration // per container: its shim and runc, which serve it alone
	daemonCPU                   time.Duration // per container: dockerd and containerd, others' work included
	idleCPU                     time.Duration // the daemons' CPU per second with nothing of ours running
}

func (p *perf2) engineChurn(ctx context.Context, o options) error {
	rg, err := newRig(ctx, o, "churn")
	if err != nil {
		return err
	}
	defer rg.close()
	ceil, err := rg.ceiling()
	if err != nil {
		return err
	}
	if _, err := ceil.run(ctx); err != nil { // warm-up
		return err
	}
	eng := startEngineMeter(ceil.ours)
	defer eng.stop()
	// What the daemons burn meanwhile for others (this machine's other
	// work uses the same engine), to read the daemons' figure against.
	idle0, t0 := eng.daemonCPU(), time.Now()
	time.Sleep(2 * time.Second)
	p.churn.idleCPU = time.Duration(float64(eng.daemonCPU()-idle0) / time.Since(t0).Seconds())
	d0, s0 := eng.daemonCPU(), eng.shimCPU()
	for range o.perf2Churn {
		s, err := ceil.run(ctx)
		if err != nil {
			return err
		}
		c := &p.churn
		c.create, c.start, c.wait, c.remove = append(c.create, s.create), append(c.start, s.start), append(c.wait, s.wait), append(c.remove, s.remove)
		c.total = append(c.total, s.create+s.start+s.wait+s.remove)
	}
	eng.scan()
	p.churn.daemonCPU = (eng.daemonCPU() - d0) / time.Duration(o.perf2Churn)
	p.churn.shimCPU = (eng.shimCPU() - s0) / time.Duration(o.perf2Churn)
	return nil
}
