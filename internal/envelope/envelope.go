// Package envelope is the wire format between the executor and the launcher
// inside a sandbox container.
//
// The executor writes, on the container's stdin:
//
//	SANDFLEET2 <n>\n
//	<n bytes of JSON Header>
//	<Header.Restore.Bytes of a workspace's snapshot, when the header has one>
//	<the job's own stdin, raw, until EOF>
//
// Decode reads exactly the first two parts and never past them; the
// launcher then reads exactly the snapshot's bytes, if any, so that its fd
// 0 is then exactly the job's stdin and can be handed to the job's process
// as is. The container therefore needs nothing job-specific at
// create time, which is what lets a warm pool start containers before their
// jobs arrive.
//
// The launcher runs the job with pipes of its own for stdout and stderr and
// frames what they carry onto the container's stdout (see frame.go), so the
// job never holds the container's streams. Its last frame is a Trailer
// signed with the Header's key (see Seal), which the job never sees; the
// executor checks the signature and the byte counts.
package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/sandfleet/sandfleet/internal/field"
)

// Magic starts every envelope; the digit is the format's version.
const Magic = "SANDFLEET2"

// MaxHeaderBytes bounds the JSON header, so that a corrupt length cannot make
// the launcher allocate without limit. It is well above jobs.MaxJobBytes
// even after base64.
const MaxHeaderBytes = 64 << 20

// maxLineBytes bounds the first line: the magic, a space, 20 digits, "\n".
const maxLineBytes = len(Magic) + 1 + 20 + 1

// DefaultDir is the working directory files are written to.
const DefaultDir = "/workspace"

// File is one file to write into the working directory. Data is []byte so
// that binary content survives JSON (as base64).
type File struct {
	Name string `json:"name"`
	Data []byte `json:"data"`
	Mode uint32 `json:"mode,omitempty"` // permission bits; 0 means 0644
}

// Header tells the launcher what to unpack and run.
type Header struct {
	Argv  []string          `json:"argv"`
	Env   map[string]string `json:"env,omitempty"`
	Dir   string            `json:"dir,omitempty"` // "" means DefaultDir
	Files []File            `json:"files,omitempty"`
	Key   string            `json:"key"` // signs the trailer; 64 hex digits (see Seal)

	// Restore and Archive are a workspace's (see workspace.go); both are
	// opt-in, so that a launcher and an executor of different versions
	// agree on every job that uses neither.
	Restore *Restore `json:"restore,omitempty"`
	Archive *Archive `json:"archive,omitempty"`

	// Compile and Tests are a compiled preset's and a judged job's (see
	// tests.go); both opt-in too. CompileOutputLimit bounds the compiler's
	// output kept (0: MaxCompileOutput).
	Compile            []string `json:"compile,omitempty"`
	CompileOutputLimit int64    `json:"compile_output_limit,omitempty"`
	Tests              *Tests   `json:"tests,omitempty"`

	// Session makes the launcher a session's agent (see session.go):
	// Argv is then unused.
	Session *Session `json:"session,omitempty"`
}

// Seal returns the seal the header carries.
func (h *Header) Seal() Seal { return Seal{Key: h.Key} }

// ErrFormat is wrapped by every decoding and validation error.
var ErrFormat = errors.New("envelope")

func errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

var keyRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Validate checks what the launcher relies on: a command, safe file names,
// no duplicate files, well-formed env and a key.
func (h *Header) Validate() error {
	if h.Session != nil {
		if err := h.Session.validate(); err != nil {
			return err
		}
	} else if len(h.Argv) == 0 {
		return errorf("argv: empty command")
	}
	if err := field.Argv(h.Argv); err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if err := field.Env(h.Env); err != nil {
		return fmt.Errorf("%w: %w", ErrFormat, err)
	}
	if h.Dir != "" && (!strings.HasPrefix(h.Dir, "/") || strings.IndexByte(h.Dir, 0) >= 0) {
		return errorf("dir %q must be an absolute path", h.Dir)
	}
	seen := make(map[string]bool, len(h.Files))
	for _, f := range h.Files {
		if err := field.FileName(f.Name); err != nil {
			return fmt.Errorf("%w: %w", ErrFormat, err)
		}
		if seen[f.Name] {
			return errorf("file %q given twice", f.Name)
		}
		seen[f.Name] = true
		if f.Mode&^0o777 != 0 {
			return errorf("file %q: mode %o has bits beyond 0777", f.Name, f.Mode)
		}
	}
	// A file that is also a directory of another ("a" and "a/b") cannot be
	// written; say so here rather than failing half-way through unpacking.
	for name := range seen {
		for i := 0; i < len(name); i++ {
			if name[i] == '/' && seen[name[:i]] {
				return errorf("file %q is also a directory of %q", name[:i], name)
			}
		}
	}
	if !keyRE.MatchString(h.Key) {
		return errorf("key must be 64 lowercase hex digits")
	}
	if err := h.validateWorkspace(); err != nil {
		return err
	}
	return h.validateTests()
}

// Marshal returns the header part of an envelope: the first line and the
// JSON. The job's stdin follows it on the wire.
func Marshal(h *Header) ([]byte, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	body, err := json.Marshal(h)
	if err != nil {
		return nil, errorf("encode: %v", err)
	}
	if len(body) > MaxHeaderBytes {
		return nil, errorf("header is %d bytes, over the limit of %d", len(body), MaxHeaderBytes)
	}
	out := make([]byte, 0, maxLineBytes+len(body))
	out = append(out, Magic...)
	out = append(out, ' ')
	out = strconv.AppendInt(out, int64(len(body)), 10)
	out = append(out, '\n')
	return append(out, body...), nil
}

// Decode reads one header from r and nothing more: the first line byte by
// byte, then exactly the announced number of bytes. What r holds next is the
// job's stdin. The header is validated.
func Decode(r io.Reader) (*Header, error) {
	var line [maxLineBytes]byte
	n := 0
	for {
		if n == len(line) {
			return nil, errorf("first line longer than %d bytes", maxLineBytes)
		}
		if _, err := io.ReadFull(r, line[n:n+1]); err != nil {
			return nil, errorf("reading first line: %v", err)
		}
		if line[n] == '\n' {
			break
		}
		n++
	}
	magic, num, ok := bytes.Cut(line[:n], []byte{' '})
	if !ok || string(magic) != Magic {
		return nil, errorf("want %q at the start", Magic+" <length>")
	}
	if len(num) == 0 || (len(num) > 1 && num[0] == '0') {
		return nil, errorf("bad length %q", num)
	}
	size, err := strconv.ParseUint(string(num), 10, 63)
	if err != nil || size > MaxHeaderBytes {
		return nil, errorf("bad length %q (the most is %d)", num, MaxHeaderBytes)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, errorf("reading %d header bytes: %v", size, err)
	}
	var h Header
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return nil, errorf("header JSON: %v", err)
	}
	if dec.More() {
		return nil, errorf("trailing data after the header JSON")
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return &h, nil
}
