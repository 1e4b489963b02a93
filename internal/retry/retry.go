// Package retry builds the back-off between attempts, one way for the
// whole project: the worker's probes and NATS retries, the executor's warm
// pool and start gate, the reaper, `submit run --wait-room` and batches.
package retry

import (
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Policy is an exponential back-off that never gives up by itself: the
// caller's context, or its own count of failures, ends the attempts. The
// zero value of each optional field is its documented default.
type Policy struct {
	// Initial is the first delay, before jitter. Required.
	Initial time.Duration
	// Max caps the delay, before jitter. Required.
	Max time.Duration
	// Multiplier is how much each delay grows over the one before.
	// Default 1.5.
	Multiplier float64
	// Jitter spreads each delay d over [d×(1−Jitter), d×(1+Jitter)], so
	// that the many callers one outage failed together do not all retry
	// together. Default 0.5.
	Jitter float64
}

// New returns a fresh back-off of the policy: its first NextBackOff is
// Initial, give or take the jitter, and it never returns backoff.Stop.
func (p Policy) New() *backoff.ExponentialBackOff {
	opts := []backoff.ExponentialBackOffOpts{
		backoff.WithInitialInterval(p.Initial),
		backoff.WithMaxInterval(p.Max),
		backoff.WithMaxElapsedTime(0),
	}
	if p.Multiplier > 0 {
		opts = append(opts, backoff.WithMultiplier(p.Multiplier))
	}
	if p.Jitter > 0 {
		opts = append(opts, backoff.WithRandomizationFactor(p.Jitter))
	}
	return backoff.NewExponentialBackOff(opts...)
}

// Func returns New in the form of the configurations' Backoff fields: one
// fresh back-off per call.
func (p Policy) Func() func() backoff.BackOff {
	return func() backoff.BackOff { return p.New() }
}
