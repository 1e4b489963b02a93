// Package field holds the checks of a job's fields that more than one room
// makes: pkg/jobs when a job is decoded, internal/envelope when the
// executor seals it and the launcher opens it. One copy, so they cannot
// disagree; the package imports nothing of the project's but
// internal/shorten (the standard library only), so the launcher stays small.
//
// Each check returns a *Error naming the field as a user wrote it
// (`files["a/../b"]`, `env["PATH"]`, `labels`), which callers wrap in their
// own sentinel (jobs.ErrInvalidJob, envelope.ErrFormat).
package field

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sandfleet/sandfleet/internal/shorten"
)

// Bounds on a job's fields. The job's encoded size (jobs.MaxJobBytes)
// bounds the total; these bound the count and the single pieces, so that a
// job within the size still cannot make the launcher or the engine fail in
// ways that look like the fleet's fault.
const (
	MaxFiles      = 1000      // files besides the preset's main file
	MaxFileName   = 255       // bytes in a file's path
	MaxArgs       = 4096      // argv entries
	MaxArgBytes   = 128 << 10 // one argv entry or env value: Linux's MAX_ARG_STRLEN
	MaxEnv        = 256       // env entries
	MaxEnvName    = 256       // bytes in an env name
	MaxLabels     = 64        // label entries, besides the reserved ones
	MaxLabelKey   = 128       // bytes in a label key
	MaxLabelValue = 1024      // bytes in a label value

	// ReservedLabels is the prefix of the labels sandfleet sets itself
	// (sandfleet.batch, sandfleet.token): they do not count against
	// MaxLabels, so that a job with the most labels a caller may give
	// still takes them; a job holds at most MaxReservedLabels.
	ReservedLabels    = "sandfleet."
	MaxReservedLabels = 8
)

// Error is a field that failed its check.
type Error struct {
	Field  string // as a user would write it: id, files["x"], env["K"], labels
	Reason string
}

func (e *Error) Error() string { return e.Field + ": " + e.Reason }

func fail(name, format string, args ...any) error {
	return &Error{Field: name, Reason: fmt.Sprintf(format, args...)}
}

// Quote shows s as a field key in an error: quoted, and shortened when long.
func Quote(s string) string {
	return fmt.Sprintf("%q", shorten.Text(s, 64))
}

// FileName checks a path to be written into the working directory: 1 to
// MaxFileName bytes, relative, without empty, "." or ".." parts, no NUL.
func FileName(name string) error {
	at := "files[" + Quote(name) + "]"
	switch {
	case name == "" || len(name) > MaxFileName:
		return fail(at, "a name must be 1 to %d bytes", MaxFileName)
	case name[0] == '/':
		return fail(at, "a name must be relative")
	case strings.IndexByte(name, 0) >= 0:
		return fail(at, "a name must not contain a NUL byte")
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == "" || part == "." || part == ".." {
			return fail(at, "a name must not contain empty, '.' or '..' parts")
		}
	}
	return nil
}

// FileNames checks each name and their count (extra is how many files the
// caller adds of its own, such as a preset's main file), in sorted order so
// that the error is the same every time.
func FileNames(names []string, extra int) error {
	if len(names) > MaxFiles+extra {
		return fail("files", "%d files, over the limit of %d", len(names)-extra, MaxFiles)
	}
	for _, n := range slices.Sorted(slices.Values(names)) {
		if err := FileName(n); err != nil {
			return err
		}
	}
	return nil
}

// Argv checks a command: a non-empty first entry, no NUL, bounded sizes.
func Argv(argv []string) error {
	if len(argv) > MaxArgs {
		return fail("argv", "%d entries, over the limit of %d", len(argv), MaxArgs)
	}
	if len(argv) > 0 && argv[0] == "" {
		return fail("argv[0]", "the command is empty")
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return fail(fmt.Sprintf("argv[%d]", i), "contains a NUL byte")
		}
		if len(a) > MaxArgBytes {
			return fail(fmt.Sprintf("argv[%d]", i), "%d bytes, over the limit of %d", len(a), MaxArgBytes)
		}
	}
	return nil
}

// Env checks environment variables: names non-empty, without '=' or NUL,
// values without NUL, bounded count and sizes.
func Env(env map[string]string) error {
	if len(env) > MaxEnv {
		return fail("env", "%d entries, over the limit of %d", len(env), MaxEnv)
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		v := env[k]
		at := "env[" + Quote(k) + "]"
		switch {
		case k == "" || strings.ContainsAny(k, "=\x00"):
			return fail(at, "a name must be non-empty, without '=' or NUL")
		case len(k) > MaxEnvName:
			return fail(at, "the name is %d bytes, over the limit of %d", len(k), MaxEnvName)
		case strings.IndexByte(v, 0) >= 0:
			return fail(at, "the value contains a NUL byte")
		case len(v) > MaxArgBytes:
			return fail(at, "the value is %d bytes, over the limit of %d", len(v), MaxArgBytes)
		}
	}
	return nil
}

// Labels checks a job's labels: bounded count and sizes, UTF-8 text
// without control characters (they end up in logs, metrics and a console).
func Labels(labels map[string]string) error {
	reserved := 0
	for k := range labels {
		if strings.HasPrefix(k, ReservedLabels) {
			reserved++
		}
	}
	if n := len(labels) - reserved; n > MaxLabels {
		return fail("labels", "%d entries, over the limit of %d", n, MaxLabels)
	}
	if reserved > MaxReservedLabels {
		return fail("labels", "%d entries named %s*, over the limit of %d", reserved, ReservedLabels, MaxReservedLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		v := labels[k]
		at := "labels[" + Quote(k) + "]"
		switch {
		case k == "" || len(k) > MaxLabelKey:
			return fail(at, "a key must be 1 to %d bytes", MaxLabelKey)
		case len(v) > MaxLabelValue:
			return fail(at, "the value is %d bytes, over the limit of %d", len(v), MaxLabelValue)
		case hasControl(k) || hasControl(v):
			return fail(at, "control characters are not allowed")
		}
	}
	return nil
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) })
}

// UTF8 checks that a field's raw bytes are UTF-8: a JSON decoder would
// otherwise replace the bad bytes silently, and the job would run other
// code than was sent.
func UTF8(name string, raw []byte) error {
	if !utf8.Valid(raw) {
		return fail(name, "not valid UTF-8 (a job carries text; encode binary data, e.g. as base64)")
	}
	return nil
}
