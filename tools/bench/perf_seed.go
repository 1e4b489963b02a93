package main

import "context"

// (i): the seed's sequence through the Engine API against `docker run --rm`.

func (p *perf2) seedVsDockerRun(ctx context.Context, o options) error {
	rg, err := newRig(ctx, o, "seed")
	if err != nil {
		return err
	}
	defer rg.close()
	seed, err := rg.seed()
	if err != nil {
		return err
	}
	dr, err := rg.dockerRun()
	if err != nil {
		return err
	}
	// Warm-up of both: the image's layers in the page cache.
	if err := seed.run(ctx, o.code); err != nil {
		return err
	}
	if err := dr.run(ctx, o.code); err != nil {
		return err
	}
	return alternate(o.n, []func() error{
		timed(&p.seqSeed, func() error { return seed.run(ctx, o.code) }),
		timed(&p.seqDocker, func() error { return dr.run(ctx, o.code) }),
	}, 0)
}
