package executor

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/sandfleet/sandfleet/internal/retry"
)

// ErrSandboxStart wraps ErrInfrastructure: the engine answers its ping but
// sandboxes do not start (create, attach or start fail, or do not answer).
// That is a fault of the configuration (a runtime registered wrongly) or of
// the host, not of a job, and retrying at once only makes containers: see
// StartError.
var ErrSandboxStart = fmt.Errorf("%w: cannot start sandboxes", ErrInfrastructure)

// StartError is the error of a launch while sandboxes do not start: the
// engine's error from the last attempt, and when the executor tries again.
// errors.Is finds ErrSandboxStart, ErrInfrastructure and the engine's error
// in it.
type StartError struct {
	Runtime string    // Config.Runtime
	Err     error     // what the engine said to the last attempt
	Retry   time.Time // the next attempt is not made before
}

func (e *StartError) Error() string {
	return fmt.Sprintf("runtime %s: cannot start sandboxes: %v", e.Runtime, e.Err)
}

func (e *StartError) Unwrap() []error { return []error{ErrSandboxStart, e.Err} }

// RetryAfter is how long until the executor makes its next attempt: asking
// (Check, Run) before then gets this error again without one. internal/worker's
// prober waits this long before it pings again.
func (e *StartError) RetryAfter() time.Duration { return max(0, time.Until(e.Retry)) }

// How the executor backs off while sandboxes do not start: the first retry
// after startBackoffFirst, doubling up to startBackoffMax (a fixed runtime
// is noticed within one step), and never more than startCap failed
// creations in any startWindow, however many callers there are. Together:
// at most 5 sandbox creations in the first minute of a fault (0, 2, 6, 14,
// 30 s), 2 a minute after that.
const (
	startBackoffFirst = 2 * time.Second
	startBackoffMax   = 30 * time.Second
	startCap          = 6
	startWindow       = time.Minute
)

// startState is what the executor knows of sandbox starts.
type startState int

const (
	startsUnknown startState = iota // none attempted yet
	startsWork                      // the last attempt started a sandbox
	startsFail                      // the last one failed, the engine answering
)

// startTurn is what a launch may do now.
type startTurn int

const (
	turnGo     startTurn = iota // sandboxes start: launch
	turnTrial                   // launch as the trial: the one attempt in flight
	turnBusy                    // a trial is in flight: wait for it (its end channel), or give up
	turnDenied                  // sandboxes fail and no attempt is due: the error says until when
)

// startGate is the one place that decides whether a sandbox may be
// launched. While sandboxes start, every launch goes ahead. Before the
// first attempt, and while they fail, a launch is a trial: one at a time,
// and while they fail only when the back-off and the cap allow. A start
// failure counts only while the engine answers its ping (see
// Executor.startSandbox); an engine that is down is the worker's prober's
// business, and a successful ping proves nothing about starts.
type startGate struct {
	runtime string
	log     *slog.Logger
	cap     int
	window  time.Duration

	mu       sync.Mutex
	state    startState
	trial    chan struct{} // non-nil while a trial is in flight; closed at its end
	bo       *backoff.ExponentialBackOff
	next     time.Time     // no trial before
	failures []time.Time   // failed launches within the window, oldest first
	lastErr  error         // the engine's error to the last failed attempt
	working  chan struct{} // closed while state is startsWork
}

// startTuning is the gate's timing, which tests shrink.
type startTuning struct {
	first, max time.Duration
	cap        int
	window     time.Duration
}

var defaultStartTuning = startTuning{first: startBackoffFirst, max: startBackoffMax, cap: startCap, window: startWindow}

func newStartGate(runtime string, log *slog.Logger, t startTuning) *startGate {
	bo := retry.Policy{Initial: t.first, Max: t.max, Multiplier: 2, Jitter: 0.1}.New()
	return &startGate{runtime: runtime, log: log, cap: t.cap, window: t.window, bo: bo, working: make(chan struct{})}
}

// turn says what a launch may do now. retry says whether the caller makes
// the attempts while sandboxes fail (Check and jobs do, the warm pool
// does not). A turnTrial must be ended with exactly one of started, failed
// or inconclusive.
func (g *startGate) turn(retry bool) (startTurn, <-chan struct{}, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.state == startsWork:
		return turnGo, nil, nil
	case g.trial != nil && g.state == startsUnknown:
		return turnBusy, g.trial, nil
	case g.trial != nil:
		return turnBusy, g.trial, g.errLocked(time.Now().Add(time.Second))
	case g.state == startsUnknown:
		g.trial = make(chan struct{})
		return turnTrial, nil, nil
	}
	now := time.Now()
	due := g.next
	if g.pruneLocked(now); len(g.failures) >= g.cap {
		due = later(due, g.failures[0].Add(g.window))
	}
	if !retry || now.Before(due) {
		return turnDenied, nil, g.errLocked(due)
	}
	g.trial = make(chan struct{})
	return turnTrial, nil, nil
}

// started records a launch that started its sandbox.
func (g *startGate) started(trial bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == startsFail {
		g.log.Info("sandboxes start again", "runtime", g.runtime, "failures_in_window", len(g.failures))
	}
	if g.state != startsWork {
		close(g.working)
	}
	g.state, g.failures, g.lastErr = startsWork, nil, nil
	g.bo.Reset()
	g.endTrialLocked(trial)
}

// failed records a launch whose sandbox did not start while the engine
// answered, and returns the error for its caller. Only the first failure
// and trials move the back-off on: launches that were already in flight
// when sandboxes stopped starting fail together.
func (g *startGate) failed(trial bool, err error) *StartError {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	g.failures = append(g.failures, now)
	g.lastErr = err
	first := g.state != startsFail
	if first {
		if g.state == startsWork {
			g.working = make(chan struct{})
		}
		g.state = startsFail
		g.bo.Reset()
	}
	if first || trial {
		g.next = now.Add(g.bo.NextBackOff())
	}
	g.log.Warn("sandboxes do not start; backing off", "runtime", g.runtime,
		"retry_in", time.Until(g.next).Round(time.Millisecond), "error", err)
	g.endTrialLocked(trial)
	return g.errLocked(g.next)
}

// inconclusive ends a launch that says nothing about starts: the engine
// did not answer, the image is missing, the caller gave up.
func (g *startGate) inconclusive(trial bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.endTrialLocked(trial)
}

// whenWorking returns a channel closed once sandboxes start.
func (g *startGate) whenWorking() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.working
}

// err returns the StartError while sandboxes fail, else nil.
func (g *startGate) err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != startsFail {
		return nil
	}
	return g.errLocked(g.next)
}

func (g *startGate) endTrialLocked(trial bool) {
	if trial && g.trial != nil {
		close(g.trial)
		g.trial = nil
	}
}

func (g *startGate) errLocked(retry time.Time) *StartError {
	err := g.lastErr
	if err == nil {
		err = errors.New("no sandbox started yet")
	}
	return &StartError{Runtime: g.runtime, Err: err, Retry: retry}
}

func (g *startGate) pruneLocked(now time.Time) {
	i := 0
	for i < len(g.failures) && now.Sub(g.failures[i]) >= g.window {
		i++
	}
	g.failures = g.failures[i:]
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
