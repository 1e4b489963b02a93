package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
)

// rig is one phase's set-up, so that a phase says what it measures and
// not how to make it: a temporary directory named after the phase, the
// worker flags that put the presets on -image, and the workers, seeds and
// runners it starts. close stops them all, the last started first, and
// removes the directory.
type rig struct {
	ctx   context.Context
	o     options
	dir   string
	image []string // the worker flags for -image; none without it
	undo  []func()
}

// newRig makes a phase's directory and its -image flags.
func newRig(ctx context.Context, o options, phase string) (*rig, error) {
	dir, err := os.MkdirTemp("", "sandfleet-bench-"+phase+"-")
	if err != nil {
		return nil, err
	}
	r := &rig{ctx: ctx, o: o, dir: dir}
	if r.image, err = imageArgs(dir, o.image); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return r, nil
}

func (r *rig) close() {
	for _, f := range slices.Backward(r.undo) {
		f()
	}
	r.undo = nil
	os.RemoveAll(r.dir)
}

// worker starts a worker process named name with flags, its presets on
// -image.
func (r *rig) worker(name string, flags ...string) (*workerProc, error) {
	return r.start(name, slices.Concat(flags, r.image))
}

// workerOn starts a worker as worker does, its presets on image instead.
func (r *rig) workerOn(image, name string, flags ...string) (*workerProc, error) {
	dir := filepath.Join(r.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	args, err := imageArgs(dir, image)
	if err != nil {
		return nil, err
	}
	return r.start(name, slices.Concat(flags, args))
}

func (r *rig) start(name string, args []string) (*workerProc, error) {
	w, err := startWorker(r.ctx, r.o, name, args...)
	if err != nil {
		return nil, err
	}
	r.undo = append(r.undo, w.stop)
	return w, nil
}

// seed is the seed's sequence on -image.
func (r *rig) seed() (*seed, error) {
	s, err := newSeed(r.o.image)
	if err != nil {
		return nil, err
	}
	r.undo = append(r.undo, s.close)
	return s, nil
}

// dockerRun runs jobs as a hardened `docker run --rm` on -image.
func (r *rig) dockerRun() (*dockerRunner, error) {
	d, err := newDockerRunner(r.o.image)
	if err != nil {
		return nil, err
	}
	r.undo = append(r.undo, d.close)
	return d, nil
}

// ceiling is the engine's ceiling on -image.
func (r *rig) ceiling() (*ceiling, error) {
	c, err := newCeiling(r.o.image)
	if err != nil {
		return nil, err
	}
	r.undo = append(r.undo, c.close)
	return c, nil
}
