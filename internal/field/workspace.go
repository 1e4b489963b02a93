package field

import (
	"fmt"
	"path"
	"strings"
)

// Bounds on a job's outputs.
const (
	MaxOutputs   = 64  // globs in outputs
	MaxGlobBytes = 255 // bytes in one glob
	MaxNameBytes = 128 // bytes in a workspace name, as in a job ID
)

// Name checks a workspace's name: the rule of a job ID, [A-Za-z0-9_-]{1,128},
// so that it is a KV key and an object name prefix as it is.
func Name(at, name string) error {
	if name == "" || len(name) > MaxNameBytes {
		return fail(at, "%s must be 1 to %d of A-Z a-z 0-9 _ -", Quote(name), MaxNameBytes)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return fail(at, "%s must be 1 to %d of A-Z a-z 0-9 _ -", Quote(name), MaxNameBytes)
		}
	}
	return nil
}

// Outputs checks a job's output globs: at most MaxOutputs, each a relative
// slash-separated pattern of path.Match segments, where a segment "**"
// stands for any number of directories. No empty, "." or ".." segment, no
// NUL: a glob names files under the working directory and nothing else.
func Outputs(globs []string) error {
	if len(globs) > MaxOutputs {
		return fail("outputs", "%d globs, over the limit of %d", len(globs), MaxOutputs)
	}
	for i, g := range globs {
		if err := glob(fmt.Sprintf("outputs[%d]", i), g); err != nil {
			return err
		}
	}
	return nil
}

// Glob checks one output glob (see Outputs).
func Glob(g string) error { return glob("outputs", g) }

func glob(at, g string) error {
	switch {
	case g == "" || len(g) > MaxGlobBytes:
		return fail(at, "a glob must be 1 to %d bytes", MaxGlobBytes)
	case g[0] == '/':
		return fail(at, "%s must be relative to the working directory", Quote(g))
	case strings.IndexByte(g, 0) >= 0:
		return fail(at, "a glob must not contain a NUL byte")
	}
	for seg := range strings.SplitSeq(g, "/") {
		switch {
		case seg == "" || seg == "." || seg == "..":
			return fail(at, "%s must not contain empty, '.' or '..' parts", Quote(g))
		case seg == "**":
			continue
		case strings.Contains(seg, "**"):
			return fail(at, "%s: ** must be a whole part (as in results/**/*.csv)", Quote(g))
		}
		if _, err := path.Match(seg, ""); err != nil {
			return fail(at, "%s: bad pattern %s", Quote(g), Quote(seg))
		}
	}
	return nil
}
