// Package limits describes the resources a sandboxed job may use: parsing of
// human sizes and durations, the defaults every job gets, the caps a worker
// enforces, and validation that names the offending field.
package limits

import (
	"errors"
	"fmt"
	"time"
)

// Limits are the resources of one sandbox. In a job, a zero field means
// "the worker's default"; after Resolve every field is set.
type Limits struct {
	Timeout Duration `json:"timeout,omitempty"` // wall clock, counted from the hand-off to the sandbox
	Memory  Size     `json:"memory,omitempty"`  // RAM, with swap disabled (Memory == MemorySwap)
	CPUs    float64  `json:"cpus,omitempty"`    // CPU share, as docker run --cpus
	Pids    int64    `json:"pids,omitempty"`    // processes and threads
	Network *Network `json:"network,omitempty"` // egress through the worker's proxy; nil: none, the default
	Output  Size     `json:"output,omitempty"`  // bytes kept per stream (stdout, stderr); past it the job is killed
	Tmpfs   Size     `json:"tmpfs,omitempty"`   // size of /tmp and of the working directory
}

// Default returns the limits a job gets when it asks for nothing: 30 s,
// 512 MiB without swap, 1 CPU, 64 pids, no network, 1 MiB of output per
// stream and a 64 MiB tmpfs.
func Default() Limits {
	return Limits{
		Timeout: Duration(30 * time.Second),
		Memory:  512 * MiB,
		CPUs:    1,
		Pids:    64,
		Network: nil,
		Output:  1 * MiB,
		Tmpfs:   64 * MiB,
	}
}

// Caps are the most a worker grants one job. Network is what a job may
// name in its own: nil, none; Open, open egress; Allow, the rules (the
// worker's --egress-allow) that must cover each of a job's allow rules.
type Caps Limits

// DefaultCaps returns the caps a worker applies when configured with none.
func DefaultCaps() Caps {
	return Caps{
		Timeout: Duration(10 * time.Minute),
		Memory:  4 * GiB,
		CPUs:    2,
		Pids:    1024,
		Network: nil,
		Output:  2 * MiB,
		Tmpfs:   1 * GiB,
	}
}

// Sentinel errors wrapped by FieldError.
var (
	ErrOverCap  = errors.New("over the worker's cap")
	ErrInvalid  = errors.New("invalid value")
	ErrNotAllow = errors.New("not allowed by this worker")
)

// FieldError names the field of Limits that failed and why.
type FieldError struct {
	Field string // JSON name: "memory", "timeout", ...
	Value string // what was asked for
	Cap   string // the cap, when Err is ErrOverCap; why, when ErrNotAllow
	Err   error  // ErrOverCap, ErrInvalid or ErrNotAllow
}

func (e *FieldError) Error() string {
	switch {
	case errors.Is(e.Err, ErrOverCap):
		return fmt.Sprintf("limits.%s: %s is over the worker's cap of %s", e.Field, e.Value, e.Cap)
	case errors.Is(e.Err, ErrNotAllow) && e.Cap != "":
		return fmt.Sprintf("limits.%s: %s is not allowed by this worker: %s", e.Field, e.Value, e.Cap)
	case errors.Is(e.Err, ErrNotAllow):
		return fmt.Sprintf("limits.%s: %s is not allowed by this worker", e.Field, e.Value)
	default:
		return fmt.Sprintf("limits.%s: invalid value %s", e.Field, e.Value)
	}
}

func (e *FieldError) Unwrap() error { return e.Err }

// Resolve fills the zero fields of req from def and checks the result
// against caps. A value over a cap is an error, never silently clamped.
func Resolve(req, def Limits, caps Caps) (Limits, error) {
	out := req.Fill(def)
	if err := out.Validate(caps); err != nil {
		return Limits{}, err
	}
	return out, nil
}

// Fill returns l with its zero fields taken from def. Network is not
// filled: none is its default and a meaningful value; a policy that
// grants nothing becomes nil, so that equal limits compare equal.
func (l Limits) Fill(def Limits) Limits {
	if l.Network.None() {
		l.Network = nil
	}
	if l.Timeout == 0 {
		l.Timeout = def.Timeout
	}
	if l.Memory == 0 {
		l.Memory = def.Memory
	}
	if l.CPUs == 0 {
		l.CPUs = def.CPUs
	}
	if l.Pids == 0 {
		l.Pids = def.Pids
	}
	if l.Output == 0 {
		l.Output = def.Output
	}
	if l.Tmpfs == 0 {
		l.Tmpfs = def.Tmpfs
	}
	return l
}

// minMemory is the least memory Docker accepts for a container.
const minMemory = 6 * MiB

// minCPUs is the least CPU share the kernel enforces (a CFS quota of 1 ms
// per 100 ms period). Less would round to NanoCPUs 0, which means no limit
// at all, or fail in runc as if Docker were broken.
const minCPUs = 0.01

// Validate checks fully resolved limits against caps, field by field, and
// returns the first failure as a *FieldError.
func (l Limits) Validate(caps Caps) error {
	over := func(field, value, limit string) error {
		return &FieldError{Field: field, Value: value, Cap: limit, Err: ErrOverCap}
	}
	invalid := func(field, value string) error {
		return &FieldError{Field: field, Value: value, Err: ErrInvalid}
	}
	switch {
	case l.Timeout <= 0:
		return invalid("timeout", l.Timeout.String())
	case l.Timeout > caps.Timeout:
		return over("timeout", l.Timeout.String(), caps.Timeout.String())
	case l.Memory < minMemory:
		return invalid("memory", l.Memory.String()+" (the least is 6m)")
	case l.Memory > caps.Memory:
		return over("memory", l.Memory.String(), caps.Memory.String())
	case !(l.CPUs >= minCPUs): // also NaN
		return invalid("cpus", fmt.Sprint(l.CPUs)+" (the least is 0.01)")
	case l.CPUs > caps.CPUs:
		return over("cpus", fmt.Sprint(l.CPUs), fmt.Sprint(caps.CPUs))
	case l.Pids <= 0:
		return invalid("pids", fmt.Sprint(l.Pids))
	case l.Pids > caps.Pids:
		return over("pids", fmt.Sprint(l.Pids), fmt.Sprint(caps.Pids))
	case l.Network.within(caps.Network) != nil:
		return l.Network.within(caps.Network)
	case l.Output <= 0:
		return invalid("output", l.Output.String())
	case l.Output > caps.Output:
		return over("output", l.Output.String(), caps.Output.String())
	case l.Tmpfs < MiB:
		return invalid("tmpfs", l.Tmpfs.String()+" (the least is 1m)")
	case l.Tmpfs > caps.Tmpfs:
		return over("tmpfs", l.Tmpfs.String(), caps.Tmpfs.String())
	}
	return nil
}

// ValidateCaps checks that caps are usable and admit the defaults.
func ValidateCaps(def Limits, caps Caps) error {
	if err := def.Validate(caps); err != nil {
		return fmt.Errorf("the defaults do not fit the caps: %w", err)
	}
	return nil
}
