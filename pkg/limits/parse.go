package limits

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Size is a number of bytes. It parses Docker's notation ("512m", "1.5g",
// "64MiB", "1024") with binary multiples, and marshals to the shortest exact
// form of it.
type Size int64

// Binary size units.
const (
	KiB Size = 1 << 10
	MiB Size = 1 << 20
	GiB Size = 1 << 30
	TiB Size = 1 << 40
)

// ParseSize parses a human size. A bare number is bytes; suffixes k, m, g, t
// (optionally followed by "b" or "ib", any case) are powers of 1024.
func ParseSize(s string) (Size, error) {
	in := strings.TrimSpace(s)
	lower := strings.ToLower(in)
	lower = strings.TrimSuffix(lower, "ib")
	lower = strings.TrimSuffix(lower, "b")
	mult := Size(1)
	if n := len(lower); n > 0 {
		switch lower[n-1] {
		case 'k':
			mult = KiB
		case 'm':
			mult = MiB
		case 'g':
			mult = GiB
		case 't':
			mult = TiB
		}
		if mult != 1 {
			lower = lower[:n-1]
		}
	}
	lower = strings.TrimSpace(lower)
	if lower == "" {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	f, err := strconv.ParseFloat(lower, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("invalid size %q: want a number of bytes or one like 512m, 1.5g", s)
	}
	b := f * float64(mult)
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return Size(b), nil
}

// String renders the size in the largest unit that divides it exactly.
func (s Size) String() string {
	for _, u := range []struct {
		n    Size
		name string
	}{{TiB, "t"}, {GiB, "g"}, {MiB, "m"}, {KiB, "k"}} {
		if s != 0 && s%u.n == 0 {
			return strconv.FormatInt(int64(s/u.n), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(s), 10)
}

// MarshalJSON writes the size as a string such as "512m".
func (s Size) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON accepts a string ("512m") or a number of bytes.
func (s *Size) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		var n float64
		if err := json.Unmarshal(b, &n); err != nil || n < 0 || n >= math.MaxInt64 {
			return fmt.Errorf("invalid size %s: want a string like \"512m\" or a number of bytes", b)
		}
		*s = Size(n)
		return nil
	}
	v, err := ParseSize(str)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Set implements flag.Value.
func (s *Size) Set(v string) error {
	n, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = n
	return nil
}

// Duration is a wall-clock span. It parses Go durations ("30s", "1m30s")
// and bare numbers of seconds ("30", "1.5").
type Duration time.Duration

// ParseDuration parses "30s", "1m30s" or a bare number of seconds.
func ParseDuration(s string) (Duration, error) {
	in := strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(in, 64); err == nil {
		if f < 0 || math.IsNaN(f) || f > float64(math.MaxInt64)/float64(time.Second) {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		return Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(in)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid duration %q: want one like 30s, 1m30s or a number of seconds", s)
	}
	return Duration(d), nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as a string such as "30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON accepts a string ("30s", "1.5") or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		var f float64
		if err := json.Unmarshal(b, &f); err != nil {
			return fmt.Errorf("invalid duration %s: want a string like \"30s\" or a number of seconds", b)
		}
		str = strconv.FormatFloat(f, 'f', -1, 64)
	}
	v, err := ParseDuration(str)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// Set implements flag.Value.
func (d *Duration) Set(v string) error {
	n, err := ParseDuration(v)
	if err != nil {
		return err
	}
	*d = n
	return nil
}
