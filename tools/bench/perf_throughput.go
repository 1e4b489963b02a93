package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// (k): the throughput of fresh sandboxes, several at once, in rounds.

func (p *perf2) throughput(ctx context.Context, o options) error {
	rg, err := newRig(ctx, o, "tput")
	if err != nil {
		return err
	}
	defer rg.close()
	conc := fmt.Sprint(o.conc)
	fresh, err := rg.worker("tput-fresh", "--slots", conc, "--pool", "0")
	if err != nil {
		return err
	}
	pooled, err := rg.worker("tput-pooled", "--slots", conc, "--pool", conc)
	if err != nil {
		return err
	}
	ceil, err := rg.ceiling()
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
	for _, w := range []*workerProc{fresh, pooled} {
		if _, err := submitWait(ctx, w, &jobs.Job{Image: "python", Code: o.code}); err != nil {
			return err
		}
	}
	type way struct {
		name string
		run  func(n int) error
	}
	par := func(f func() error) func(int) error {
		return func(n int) error { _, err := parallel(n, o.conc, f); return err }
	}
	ways := []way{
		{"engine ceiling: /bin/true, hardened", par(func() error { _, err := ceil.run(ctx); return err })},
		{fmt.Sprintf("sandfleet --pool 0 --slots %d", o.conc), func(n int) error { return burst(ctx, fresh, n, o.code) }},
		{fmt.Sprintf("sandfleet --pool %d --slots %d", o.conc, o.conc), func(n int) error { return burst(ctx, pooled, n, o.code) }},
		{"docker run --rm", par(func() error { return dr.run(ctx, o.code) })},
		{"the seed's sequence", par(func() error { return seed.run(ctx, o.code) })},
	}
	p.tput = make([]contender, len(ways))
	for i, w := range ways {
		p.tput[i].name = w.name
	}
	const rounds = 2
	for r := range rounds {
		n := o.perf2Jobs / rounds
		for k := range ways {
			i := (k + r*2) % len(ways)  // each round in another order
			time.Sleep(2 * time.Second) // the pooled worker's pool refills; the engine settles
			t := time.Now()
			if err := ways[i].run(n); err != nil {
				return fmt.Errorf("%s: %w", ways[i].name, err)
			}
			p.tput[i].wall += time.Since(t)
			p.tput[i].jobs += n
		}
	}
	return nil
}

// burst submits n jobs at once to w and waits for every result, collected
// on one reply subject as an orchestrator would.
func burst(ctx context.Context, w *workerProc, n int, code string) error {
	reply := fmt.Sprintf("bench.burst.%s.%d", w.id, rand.Int64())
	sub, err := w.nc.SubscribeSync(reply)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	for range n {
		if _, err := w.cli.Submit(ctx, &jobs.Job{Image: "python", Code: code, ReplyTo: reply}); err != nil {
			return w.fail(err)
		}
	}
	for range n {
		msg, err := sub.NextMsg(2 * time.Minute)
		if err != nil {
			return w.fail(fmt.Errorf("waiting for results: %w", err))
		}
		res, err := jobs.DecodeResult(msg.Data)
		if err != nil {
			return err
		}
		if res.Status != jobs.StatusSucceeded {
			return w.fail(fmt.Errorf("job %s: %s %s", res.ID, res.Status, res.Error))
		}
	}
	return nil
}
