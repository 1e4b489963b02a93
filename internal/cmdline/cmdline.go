// Package cmdline is what sandfleet's commands share on the command line:
// flags parsed by spf13/pflag (GNU style: --long and -s, flags before or
// after arguments, "--" ends them), usage errors that the mains turn into
// exit status 2, and the version the binaries report.
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"

	"github.com/spf13/pflag"
)

// ErrHelp is returned by Parse when -h or --help was given: the caller
// prints its help on stdout and exits 0.
var ErrHelp = pflag.ErrHelp

// ErrUsage is matched (errors.Is) by every error of the command line:
// an unknown flag, a bad value, a wrong number of arguments.
var ErrUsage = errors.New("usage error")

type usageError struct{ err error }

func (e *usageError) Error() string        { return e.err.Error() }
func (e *usageError) Unwrap() error        { return e.err }
func (e *usageError) Is(target error) bool { return target == ErrUsage }

// Usagef returns a usage error; %w wraps as in fmt.Errorf.
func Usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// NewFlagSet returns an empty flag set that prints nothing itself (the
// command prints its help and errors) and lists flags in the order they
// are defined.
func NewFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	return fs
}

// Parse parses args into fs. It returns ErrHelp, a usage error, or nil.
func Parse(fs *pflag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err == nil || errors.Is(err, ErrHelp) {
		return err
	}
	// -json is not --json in GNU style but -j -s -o -n; say so.
	var ne *pflag.NotExistError
	if errors.As(err, &ne) {
		name, _, _ := strings.Cut(ne.GetSpecifiedShortnames(), "=")
		if len(name) > 1 && fs.Lookup(name) != nil {
			return Usagef("%w (long flags take two dashes: --%s)", err, name)
		}
	}
	return &usageError{err}
}

// Usages lists the visible flags of fs for a command's help, in the
// order they were defined, one flag a paragraph wrapped at 80 columns:
//
//	-c, --code CODE   the job's CODE (default "x")
//
// A default is shown unless it is the zero value or the usage already
// speaks of one. Flags marked hidden (pflag's MarkHidden) are left out.
func Usages(fs *pflag.FlagSet) string {
	type row struct{ left, usage string }
	var rows []row
	width := 0
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		left := "      --" + f.Name
		if f.Shorthand != "" {
			left = "  -" + f.Shorthand + ", --" + f.Name
		}
		name, usage := pflag.UnquoteUsage(f)
		if f.NoOptDefVal == "" && name != "" {
			left += " " + name
		}
		if !zeroValue(f.DefValue) && !strings.Contains(usage, "default") {
			if f.Value.Type() == "string" {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				usage += fmt.Sprintf(" (default %s)", f.DefValue)
			}
		}
		rows = append(rows, row{left, usage})
		width = max(width, len(left))
	})
	width = min(width, 30)
	var b strings.Builder
	for _, r := range rows {
		b.WriteString(r.left)
		col := len(r.left)
		if col > width {
			b.WriteString("\n")
			col = 0
		}
		indent := strings.Repeat(" ", width+3)
		b.WriteString(strings.Repeat(" ", width+3-col))
		line := width + 3
		for i, word := range strings.Fields(r.usage) {
			if i > 0 && line+1+len(word) > 80 {
				b.WriteString("\n" + indent)
				line = width + 3
			} else if i > 0 {
				b.WriteString(" ")
				line++
			}
			b.WriteString(word)
			line += len(word)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func zeroValue(s string) bool {
	switch s {
	case "", "0", "0s", "false", "[]", "<nil>":
		return true
	}
	return false
}

// Value makes v, a standard library flag.Value such as limits.Size, a
// pflag.Value whose type is typ.
func Value(v flag.Value, typ string) pflag.Value { return typed{v, typ} }

type typed struct {
	flag.Value
	typ string
}

func (t typed) Type() string { return t.typ }

// Version returns the version a binary reports: set, when the build set it
// (-ldflags "-X main.version=..."), else what the Go toolchain recorded (the
// module version, or the VCS revision of a build from a checkout), else
// "dev".
func Version(set string) string {
	if set != "" {
		return set
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return buildVersion(bi)
}

func buildVersion(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified {
		rev += "-dirty"
	}
	return rev
}
