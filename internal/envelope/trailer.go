package envelope

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"

	"github.com/sandfleet/sandfleet/internal/shorten"
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

	// StdoutBytes and StderrBytes count what the launcher framed of the
	// job's stdout and stderr before this trailer. The executor checks them
	// against what it received, so that bytes which did not come through
	// the launcher cannot pass for the job's output.
	StdoutBytes int64 `json:"stdout_bytes"`
	StderrBytes int64 `json:"stderr_bytes"`

	// Error is set when the launcher could not run the job at all (a file
	// that did not fit, a command not found).
	Error string `json:"error,omitempty"`

	// The archive the launcher framed after the job, when the header asked
	// for one (see Archive): its size and digest, which the executor checks
	// against what it received, how many entries it holds and how many
	// were left out (the first of them, with the reason, in ArchiveSkips,
	// as many as fit: see Sign), and why it is incomplete, if it is. All
	// are absent for a job that asked for none.
	ArchiveBytes   int64         `json:"archive_bytes,omitempty"`
	ArchiveSHA256  string        `json:"archive_sha256,omitempty"`
	ArchiveFiles   int           `json:"archive_files,omitempty"`
	ArchiveSkipped int           `json:"archive_skipped,omitempty"`
	ArchiveSkips   []ArchiveSkip `json:"archive_skips,omitempty"`
	ArchiveError   string        `json:"archive_error,omitempty"`

	// The compile step's, when the header had one: its exit status (or
	// 128+N for signal N), how long it took, and the bytes of its output
	// framed (FrameCompile) and seen in all. CompileExit is nil when
	// there was no compile step.
	CompileExit  *int  `json:"compile_exit,omitempty"`
	CompileMS    int64 `json:"compile_ms,omitempty"`
	CompileBytes int64 `json:"compile_bytes,omitempty"`
	CompileSeen  int64 `json:"compile_seen,omitempty"`

	// The case reports framed (FrameCase), when the header had tests: how
	// many and their CaseDigest.
	Cases       int    `json:"cases,omitempty"`
	CasesSHA256 string `json:"cases_sha256,omitempty"`

	// The display outputs framed (FrameDisplay, see DisplayDir): how many,
	// their DisplayDigest, and how many were dropped at the bounds.
	Displays        int    `json:"displays,omitempty"`
	DisplaysSHA256  string `json:"displays_sha256,omitempty"`
	DisplaysDropped int    `json:"displays_dropped,omitempty"`
}

// ArchiveSkip is an entry the archive left out, and why.
type ArchiveSkip struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// MaxTrailerBytes bounds an encoded trailer, MAC included. A trailer
// without the archive's fields stays under 1024 bytes, the bound of
// executors that know none; one without ArchiveSkips, under 2048, the
// bound of executors that know no skips.
const MaxTrailerBytes = 16 << 10

// maxErrorBytes bounds Trailer.Error, so that the trailer fits in MaxTrailerBytes.
const maxErrorBytes = 512

// maxSkipNameBytes bounds the name of an ArchiveSkip (a path may be as
// long as the file system lets it be); a longer one is shortened.
const maxSkipNameBytes = 1024

// Seal authenticates the trailer of one job. The executor makes a fresh
// one per job and sends its key in the Header; the launcher keeps it in
// memory that nothing else in the sandbox can read (it is PID 1 and not
// dumpable) and never passes it to the job. A job cannot make a trailer the
// executor accepts, and one that replayed a real trailer cannot change a
// figure in it, nor add a byte of output without the counts disagreeing.
type Seal struct {
	Key string // 64 lowercase hex digits: an HMAC-SHA256 key
}

// NewSeal returns a seal with a random key.
func NewSeal() Seal {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails on Linux
	return Seal{Key: hex.EncodeToString(b)}
}

// macLen is the length of the hex MAC at the end of a trailer.
const macLen = 2 * sha256.Size

// trailerDomain keeps a MAC of this format from passing for any other.
const trailerDomain = Magic + " trailer\n"

// mac is the hex HMAC-SHA256 of body under s.Key.
func (s Seal) mac(body []byte) []byte {
	key, _ := hex.DecodeString(s.Key) // validated by Header.Validate
	m := hmac.New(sha256.New, key)
	m.Write([]byte(trailerDomain))
	m.Write(body)
	return hex.AppendEncode(nil, m.Sum(nil))
}

// Sign returns the payload of the trailer frame for t: its JSON, a space
// and the MAC.
func (s Seal) Sign(t Trailer) []byte {
	if len(t.Error) > maxErrorBytes {
		t.Error = t.Error[:maxErrorBytes]
	}
	if len(t.ArchiveError) > maxErrorBytes {
		t.ArchiveError = t.ArchiveError[:maxErrorBytes]
	}
	t.ArchiveSkips = slices.Clone(t.ArchiveSkips)
	for i, s := range t.ArchiveSkips {
		t.ArchiveSkips[i].Name = shorten.Text(s.Name, maxSkipNameBytes)
		t.ArchiveSkips[i].Reason = shorten.Text(s.Reason, maxErrorBytes)
	}
	body, _ := json.Marshal(t) // cannot fail: plain fields only
	// The skips listed are as many as fit; ArchiveSkipped counts them all.
	for len(body)+1+macLen > MaxTrailerBytes && len(t.ArchiveSkips) > 0 {
		t.ArchiveSkips = t.ArchiveSkips[:len(t.ArchiveSkips)-1]
		body, _ = json.Marshal(t)
	}
	out := append(body, ' ')
	return append(out, s.mac(body)...)
}

// Open checks a trailer frame's payload under s and decodes it. ok is false
// for anything the launcher holding s did not sign.
func (s Seal) Open(payload []byte) (t Trailer, ok bool) {
	if len(payload) > MaxTrailerBytes || len(payload) < macLen+1 || payload[len(payload)-macLen-1] != ' ' {
		return Trailer{}, false
	}
	body, sum := payload[:len(payload)-macLen-1], payload[len(payload)-macLen:]
	if !hmac.Equal(sum, s.mac(body)) {
		return Trailer{}, false
	}
	if err := json.Unmarshal(body, &t); err != nil {
		return Trailer{}, false
	}
	return t, true
}
