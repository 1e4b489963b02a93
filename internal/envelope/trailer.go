package envelope

import (
	"bytes"
	"encoding/json"
)

// Trailer is what the launcher reports after the job's process ended. A
// figure it could not obtain is nil, never a guess.
type Trailer struct {
	Exit   int `json:"exit"`             // exit status, or 128+Signal
	Signal int `json:"signal,omitempty"` // the signal that killed the process, if any

	// From wait4 of the job's process (and the descendants it waited for).
	MaxRSSBytes *int64 `json:"maxrss_bytes,omitempty"`
	CPUNanos    *int64 `json:"cpu_ns,omitempty"` // user + system

	// From the container's own cgroup (v1 or v2), which covers every process
	// in the sandbox, tmpfs pages included, and is what the limits enforce.
	CgroupPeakBytes *int64 `json:"cgroup_peak_bytes,omitempty"`
	CgroupCPUNanos  *int64 `json:"cgroup_cpu_ns,omitempty"`
	// CgroupOOMKills counts the OOM kills in the sandbox's cgroup so far
	// (memory.events or memory.oom_control). With it, the executor can give
	// the verdict as soon as the trailer arrives, without waiting for the
	// engine to report the container's exit and its OOMKilled flag.
	CgroupOOMKills *int64 `json:"cgroup_oom_kills,omitempty"`

	// Error is set when the launcher could not run the job at all (a file
	// that did not fit, a command not found).
	Error string `json:"error,omitempty"`
}

// MaxTrailerBytes bounds an encoded trailer, marker included; the executor
// keeps this much beyond a stream's output cap so that the trailer of a job
// that wrote exactly up to the cap is not lost.
const MaxTrailerBytes = 1024

// maxErrorBytes bounds Trailer.Error, so that the trailer fits in MaxTrailerBytes.
const maxErrorBytes = 512

func marker(nonce string) []byte {
	// The record separator makes an accidental match by job output unlikely;
	// the nonce, which the job cannot read, makes a deliberate one impossible.
	return []byte("\x1e" + Magic + "-END " + nonce + " ")
}

// EndMarker is how a trailer for nonce begins. The launcher ends stdout
// with a copy of the trailer too, so that the executor knows when both
// streams are complete.
func EndMarker(nonce string) []byte { return marker(nonce) }

// AppendTrailer appends the encoded trailer to dst.
func AppendTrailer(dst []byte, nonce string, t Trailer) []byte {
	if len(t.Error) > maxErrorBytes {
		t.Error = t.Error[:maxErrorBytes]
	}
	body, _ := json.Marshal(t) // cannot fail: plain fields only
	dst = append(dst, marker(nonce)...)
	dst = append(dst, body...)
	return append(dst, '\n')
}

// CutTrailer removes the trailer from the end of stderr (or stdout). ok is false when
// stderr does not end with a well-formed trailer for nonce, for instance
// because the launcher was killed.
func CutTrailer(stderr []byte, nonce string) (rest []byte, t Trailer, ok bool) {
	m := marker(nonce)
	i := bytes.LastIndex(stderr, m)
	if i < 0 || len(stderr)-i > MaxTrailerBytes || !bytes.HasSuffix(stderr, []byte("\n")) {
		return stderr, Trailer{}, false
	}
	body := stderr[i+len(m) : len(stderr)-1]
	if err := json.Unmarshal(body, &t); err != nil {
		return stderr, Trailer{}, false
	}
	return stderr[:i], t, true
}
