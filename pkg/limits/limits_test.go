package limits

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want Size
		ok   bool
	}{
		{"1024", 1024, true},
		{"0", 0, true},
		{"512m", 512 * MiB, true},
		{"512M", 512 * MiB, true},
		{"512mb", 512 * MiB, true},
		{"512MiB", 512 * MiB, true},
		{"1.5g", 1536 * MiB, true},
		{"64k", 64 * KiB, true},
		{"2t", 2 * TiB, true},
		{" 8m ", 8 * MiB, true},
		{"10b", 10, true},
		{"", 0, false},
		{"m", 0, false},
		{"-1m", 0, false},
		{"abc", 0, false},
		{"NaN", 0, false},
		{"inf", 0, false},
		{"1e30t", 0, false},
		{"12x", 0, false},
	}
	for _, c := range cases {
		got, err := ParseSize(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestSizeStringAndJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s    Size
		want string
	}{{512 * MiB, "512m"}, {GiB, "1g"}, {1536 * MiB, "1536m"}, {1000, "1000"}, {0, "0"}, {3 * KiB, "3k"}} {
		if c.s.String() != c.want {
			t.Errorf("%d.String() = %q, want %q", int64(c.s), c.s.String(), c.want)
		}
		b, _ := json.Marshal(c.s)
		var back Size
		if err := json.Unmarshal(b, &back); err != nil || back != c.s {
			t.Errorf("JSON round trip of %d: %s -> %d, %v", int64(c.s), b, back, err)
		}
	}
	var s Size
	if err := json.Unmarshal([]byte("1048576"), &s); err != nil || s != MiB {
		t.Errorf("a JSON number: %d, %v", s, err)
	}
	for _, bad := range []string{`-1`, `"lots"`, `true`, `1e300`} {
		if err := json.Unmarshal([]byte(bad), &s); err == nil {
			t.Errorf("Unmarshal(%s) accepted", bad)
		}
	}
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"30s", 30 * time.Second, true},
		{"1m30s", 90 * time.Second, true},
		{"30", 30 * time.Second, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"250ms", 250 * time.Millisecond, true},
		{" 2s ", 2 * time.Second, true},
		{"", 0, false},
		{"-1s", 0, false},
		{"-1", 0, false},
		{"soon", 0, false},
		{"NaN", 0, false},
		{"1e300", 0, false},
	}
	for _, c := range cases {
		got, err := ParseDuration(c.in)
		if (err == nil) != c.ok || got.D() != c.want {
			t.Errorf("ParseDuration(%q) = %s, %v; want %s ok=%v", c.in, got, err, c.want, c.ok)
		}
	}
	var d Duration
	if err := json.Unmarshal([]byte(`2.5`), &d); err != nil || d.D() != 2500*time.Millisecond {
		t.Errorf("a JSON number of seconds: %s, %v", d, err)
	}
	if err := json.Unmarshal([]byte(`"45s"`), &d); err != nil || d.D() != 45*time.Second {
		t.Errorf("a JSON string: %s, %v", d, err)
	}
	if b, _ := json.Marshal(Duration(30 * time.Second)); string(b) != `"30s"` {
		t.Errorf("Marshal = %s", b)
	}
}

func TestFlagValues(t *testing.T) {
	t.Parallel()
	var s Size
	var d Duration
	if s.Set("2g") != nil || s != 2*GiB || d.Set("10s") != nil || d.D() != 10*time.Second {
		t.Fatal("Set")
	}
	if s.Set("x") == nil || d.Set("x") == nil {
		t.Fatal("Set accepted garbage")
	}
}

func TestDefaultIsTheSeeds(t *testing.T) {
	t.Parallel()
	d := Default()
	if d.Memory != 512*MiB || d.CPUs != 1 || d.Timeout.D() != 30*time.Second || d.Network != nil ||
		d.Tmpfs != 64*MiB || d.Pids != 64 || d.Output != MiB {
		t.Fatalf("Default() = %+v", d)
	}
	if err := ValidateCaps(Default(), DefaultCaps()); err != nil {
		t.Fatal(err)
	}
}

func TestResolveAndValidate(t *testing.T) {
	t.Parallel()
	caps := DefaultCaps()
	cases := []struct {
		name  string
		req   Limits
		field string
		err   error
		msg   []string
	}{
		{name: "empty takes the defaults"},
		{name: "within caps", req: Limits{Memory: GiB, CPUs: 2, Pids: 100, Timeout: Duration(time.Minute)}},
		{name: "memory over cap", req: Limits{Memory: 8 * GiB}, field: "memory", err: ErrOverCap, msg: []string{"8g", "4g"}},
		{name: "memory too small", req: Limits{Memory: MiB}, field: "memory", err: ErrInvalid},
		{name: "timeout over cap", req: Limits{Timeout: Duration(time.Hour)}, field: "timeout", err: ErrOverCap, msg: []string{"1h0m0s", "10m0s"}},
		{name: "timeout negative", req: Limits{Timeout: Duration(-time.Second)}, field: "timeout", err: ErrInvalid},
		{name: "cpus over cap", req: Limits{CPUs: 3}, field: "cpus", err: ErrOverCap},
		{name: "cpus negative", req: Limits{CPUs: -1}, field: "cpus", err: ErrInvalid},
		{name: "cpus NaN", req: Limits{CPUs: math.NaN()}, field: "cpus", err: ErrInvalid},
		{name: "cpus below what the kernel enforces", req: Limits{CPUs: 1e-10}, field: "cpus", err: ErrInvalid},
		{name: "cpus just under the least", req: Limits{CPUs: 0.009}, field: "cpus", err: ErrInvalid},
		{name: "pids over cap", req: Limits{Pids: 5000}, field: "pids", err: ErrOverCap},
		{name: "pids negative", req: Limits{Pids: -3}, field: "pids", err: ErrInvalid},
		{name: "network not allowed", req: Limits{Network: &Network{Open: true}}, field: "network", err: ErrNotAllow},
		{name: "output over cap", req: Limits{Output: 10 * MiB}, field: "output", err: ErrOverCap},
		{name: "output negative", req: Limits{Output: -1}, field: "output", err: ErrInvalid},
		{name: "tmpfs over cap", req: Limits{Tmpfs: 2 * GiB}, field: "tmpfs", err: ErrOverCap},
		{name: "tmpfs too small", req: Limits{Tmpfs: KiB}, field: "tmpfs", err: ErrInvalid},
	}
	for _, c := range cases {
		got, err := Resolve(c.req, Default(), caps)
		if c.err == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else if got.Memory == 0 || got.Timeout == 0 || got.Pids == 0 || got.Output == 0 || got.Tmpfs == 0 || got.CPUs == 0 {
				t.Errorf("%s: not fully resolved: %+v", c.name, got)
			}
			continue
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, c.err) {
			t.Errorf("%s: err = %v, want a FieldError on %s wrapping %v", c.name, err, c.field, c.err)
			continue
		}
		for _, m := range append(c.msg, "limits."+c.field) {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: message %q lacks %q", c.name, err, m)
			}
		}
	}
	caps.Network = &Network{Open: true}
	if _, err := Resolve(Limits{Network: &Network{Open: true}}, Default(), caps); err != nil {
		t.Errorf("network allowed by caps: %v", err)
	}
	if err := ValidateCaps(Limits{Memory: 8 * GiB}, DefaultCaps()); err == nil {
		t.Error("ValidateCaps accepted defaults over the caps")
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"512m", "1.5g", "64MiB", "1024", "", "-1", "1e400", "9223372036854775807", "0.0000001k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSize(s)
		if err != nil {
			return
		}
		if v < 0 {
			t.Fatalf("ParseSize(%q) = %d, negative", s, v)
		}
		// The canonical form parses back to the same value.
		back, err := ParseSize(v.String())
		if err != nil || back != v {
			t.Fatalf("ParseSize(%q) = %d; its String %q parses to %d, %v", s, v, v.String(), back, err)
		}
	})
}

func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"30s", "1m30s", "30", "1.5", "", "-1", "1e300", "9223372036s", "NaN"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseDuration(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("ParseDuration(%q) = %s, negative", s, d)
		}
		back, err := ParseDuration(d.String())
		if err != nil || back != d {
			t.Fatalf("ParseDuration(%q) = %s; its String parses to %s, %v", s, d, back, err)
		}
	})
}
