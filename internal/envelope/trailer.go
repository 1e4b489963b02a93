package envelope

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
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

	// StdoutBytes and StderrBytes count what the launcher copied from the
	// job's pipes onto the container's streams before this trailer. The
	// executor checks them against what it received, so that bytes which
	// did not come through the launcher cannot pass for the job's output.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`

	// Error is set when the launcher could not run the job at all (a file
	// that did not fit, a command not found).
	Error string `json:"error,omitempty"`
}

// MaxTrailerBytes bounds an encoded trailer, marker and MAC included; the
// executor keeps this much beyond a stream's output cap so that the trailer
// of a job that wrote exactly up to the cap is not lost.
const MaxTrailerBytes = 1024

// maxErrorBytes bounds Trailer.Error, so that the trailer fits in MaxTrailerBytes.
const maxErrorBytes = 512

// Stream names one of the container's two output streams.
type Stream int

const (
	Stdout Stream = iota
	Stderr
)

// Seal authenticates the trailers of one job. The executor makes a fresh
// one per job and sends it in the Header; the launcher keeps it in memory
// that nothing else in the sandbox can read (it is PID 1 and not dumpable)
// and never passes it to the job. The nonce marks where a trailer begins;
// the key signs it. A job that read or guessed the nonce still cannot make
// a trailer the executor accepts, and one that replayed a real trailer
// cannot change a figure in it or add a byte before it.
type Seal struct {
	Nonce string // 32 lowercase hex digits
	Key   string // 64 lowercase hex digits: an HMAC-SHA256 key
}

// NewSeal returns a seal with a random nonce and key.
func NewSeal() Seal {
	return Seal{Nonce: randomHex(16), Key: randomHex(32)}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
}

// Marker is how a trailer sealed with s begins.
func (s Seal) Marker() []byte {
	// The record separator keeps a job's ordinary output from looking like
	// the start of a trailer; the MAC, not the marker, is what a job cannot
	// produce.
	return []byte("\x1e" + Magic + "-END " + s.Nonce + " ")
}

// mac is the hex HMAC-SHA256 of the marker and body under s.Key.
func (s Seal) mac(body []byte) []byte {
	key, _ := hex.DecodeString(s.Key) // validated by Header.Validate
	m := hmac.New(sha256.New, key)
	m.Write(s.Marker())
	m.Write(body)
	return hex.AppendEncode(nil, m.Sum(nil))
}

// Append appends the trailer line for t to dst: the marker, the JSON body,
// a space, the MAC over both, and a newline.
func (s Seal) Append(dst []byte, t Trailer) []byte {
	if len(t.Error) > maxErrorBytes {
		t.Error = t.Error[:maxErrorBytes]
	}
	body, _ := json.Marshal(t) // cannot fail: plain fields only
	dst = append(dst, s.Marker()...)
	dst = append(dst, body...)
	dst = append(dst, ' ')
	dst = append(dst, s.mac(body)...)
	return append(dst, '\n')
}

// macLen is the length of the hex MAC on a trailer line.
const macLen = 2 * sha256.Size

// Cut removes the trailer from the end of one of the container's streams.
// ok is true only when the stream ends with a trailer line whose MAC checks
// under s and whose byte count for stream equals the bytes before it:
// output that did not pass through the launcher, or a trailer the launcher
// did not write, is never a verdict. When ok is false, rest is buf.
func (s Seal) Cut(buf []byte, stream Stream) (rest []byte, t Trailer, ok bool) {
	m := s.Marker()
	i := bytes.LastIndex(buf, m)
	if i < 0 || len(buf)-i > MaxTrailerBytes || !bytes.HasSuffix(buf, []byte("\n")) {
		return buf, Trailer{}, false
	}
	line := buf[i+len(m) : len(buf)-1]
	if len(line) < macLen+1 || line[len(line)-macLen-1] != ' ' {
		return buf, Trailer{}, false
	}
	body, sum := line[:len(line)-macLen-1], line[len(line)-macLen:]
	if !hmac.Equal(sum, s.mac(body)) {
		return buf, Trailer{}, false
	}
	if err := json.Unmarshal(body, &t); err != nil {
		return buf, Trailer{}, false
	}
	count := t.StdoutBytes
	if stream == Stderr {
		count = t.StderrBytes
	}
	if count != int64(i) {
		return buf, Trailer{}, false
	}
	return buf[:i], t, true
}
