package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// resultUpdate is a result stored after Follow looked, or why the watch
// for it ended.
type resultUpdate struct {
	res *Result
	err error
}

// watchResult returns the job's stored result (nil when there is none
// yet) and a channel that delivers the one stored later: a job's result
// is written once. stop ends the watch and waits for it.
func (f *follower) watchResult(ctx context.Context) (initial *Result, later <-chan resultUpdate, stop func(), err error) {
	return f.c.acc.watchResult(ctx, f)
}

// watchResult for a tenant: a key watch (keyWatch) and a direct get.
func (a *tenantAccess) watchResult(ctx context.Context, f *follower) (initial *Result, later <-chan resultUpdate, stop func(), err error) {
	ch := make(chan resultUpdate, 1)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	stop = func() { cancel(); <-done }
	// The watch first, so that a result stored from now on reaches it.
	rw, err := a.c.Watch(ctx, f.id)
	if err != nil {
		cancel()
		return nil, nil, nil, fmt.Errorf("follow %s: %w", f.id, err)
	}
	initial, err = a.get(ctx, f.id)
	if errors.Is(err, ErrNotFound) {
		initial, err = nil, nil
	}
	if err != nil || initial != nil {
		rw.Stop()
		cancel()
		return initial, nil, func() {}, err
	}
	go func() {
		defer close(done)
		defer rw.Stop()
		r, err := rw.Next(ctx)
		ch <- resultUpdate{r, err}
	}()
	return nil, ch, stop, nil
}

// watchResult for the fleet's client: a watch of the key in RESULTS.
func (a *fleetAccess) watchResult(ctx context.Context, f *follower) (initial *Result, later <-chan resultUpdate, stop func(), err error) {
	ch := make(chan resultUpdate, 1)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	stop = func() { cancel(); <-done }
	w, err := a.st.Results.Watch(ctx, f.id)
	if err != nil {
		cancel()
		return nil, nil, nil, fmt.Errorf("follow %s: %w", f.id, err)
	}
	if initial, err = initialResult(ctx, w); err != nil {
		_ = w.Stop()
		cancel()
		return nil, nil, nil, fmt.Errorf("follow %s: %w", f.id, err)
	}
	go func() {
		defer close(done)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				switch {
				case !ok:
					ch <- resultUpdate{err: ErrWatchClosed}
					return
				case e == nil || e.Operation() != jetstream.KeyValuePut:
					continue
				}
				r, err := DecodeStoredResult(e.Key(), e.Value())
				ch <- resultUpdate{r, err}
				return
			}
		}
	}()
	return initial, ch, stop, nil
}

// initialResult reads a result watch's initial value: the stored result,
// or nil when there is none.
func initialResult(ctx context.Context, w jetstream.KeyWatcher) (*Result, error) {
	var res *Result
	err := initialValues(ctx, w, ErrWatchClosed, func(e jetstream.KeyValueEntry) (err error) {
		res, err = DecodeStoredResult(e.Key(), e.Value())
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// initialValues calls each for every value a watch delivers before the
// end of its initial values (deleted keys are skipped), and stops at the
// first error each returns.
// A watch that closes before that end returns closed.
func initialValues(ctx context.Context, w jetstream.KeyWatcher, closed error, each func(jetstream.KeyValueEntry) error) error {
	for {
		e, err := nextEntry(ctx, w)
		switch {
		case errors.Is(err, ErrWatchClosed) && ctx.Err() == nil:
			return closed
		case err != nil:
			return err
		case e == nil:
			return nil // end of the initial values
		}
		if err := each(e); err != nil {
			return err
		}
	}
}
