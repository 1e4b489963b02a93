package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/sandfleet/sandfleet/internal/testutil/archivetest"
)

var big = Limits{MaxBytes: 64 << 20, MaxFiles: 1000}

func openRoot(t testing.TB, dir string) *os.Root {
	t.Helper()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestExtractRefuses feeds archives no launcher writes: each is refused,
// and nothing lands outside the root.
func TestExtractRefuses(t *testing.T) {
	t.Parallel()
	lim := Limits{MaxBytes: 1 << 20, MaxFiles: 1000}
	cases := append(archivetest.Hostile(lim.MaxBytes),
		archivetest.Case{Name: "too many files", Tar: archivetest.TinyFiles(lim.MaxFiles + 1), TooLarge: true})
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			outer := t.TempDir()
			dir := filepath.Join(outer, "ws")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := Extract(openRoot(t, dir), bytes.NewReader(tc.Tar), lim)
			if !errors.Is(err, ErrRefused) || tc.TooLarge != errors.Is(err, ErrTooLarge) {
				t.Fatalf("Extract: %v, want ErrRefused (too large: %v)", err, tc.TooLarge)
			}
			if names := list(t, outer); !slices.Equal(names, []string{"ws"}) {
				t.Fatalf("something was written outside the root: %q", names)
			}
			if _, err := os.Stat("/tmp/evil"); err == nil {
				t.Fatal("/tmp/evil exists")
			}
		})
	}
}

func list(t testing.TB, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, d := range des {
		names = append(names, d.Name())
	}
	return names
}

// TestRoundTrip writes a tree with what a job may leave behind and
// extracts it: what a workspace keeps comes back byte for byte, with its
// modes; what it may not keep is counted as skipped.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(src, "sub/deep"), 0o755))
	must(os.WriteFile(filepath.Join(src, "data.csv"), []byte("x,y\n1,2\n"), 0o644))
	must(os.WriteFile(filepath.Join(src, "sub/deep/run.sh"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(src, "bin.dat"), []byte{0, 1, 2, 0xff}, 0o600))
	must(os.WriteFile(filepath.Join(src, "suid"), []byte("s"), 0o644))
	must(os.Chmod(filepath.Join(src, "suid"), 0o4755|fs.ModeSetuid))
	must(os.Symlink("sub/deep", filepath.Join(src, "inside")))
	must(os.Symlink("../data.csv", filepath.Join(src, "sub/up")))
	must(os.Symlink("/etc/passwd", filepath.Join(src, "abs")))
	must(os.Symlink("../../etc", filepath.Join(src, "sub/out")))
	must(syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644))
	must(os.MkdirAll(filepath.Join(src, "ro"), 0o755))
	must(os.WriteFile(filepath.Join(src, "ro/f"), []byte("r"), 0o444))
	must(os.Chmod(filepath.Join(src, "ro"), 0o555))
	t.Cleanup(func() { os.Chmod(filepath.Join(src, "ro"), 0o755) })

	var b bytes.Buffer
	st, err := Write(&b, openRoot(t, src), nil, big)
	must(err)
	if st.Skipped != 3 { // abs, sub/out, fifo
		t.Errorf("skipped %d, want 3 (abs, sub/out, fifo)", st.Skipped)
	}
	dst := t.TempDir()
	xst, err := Extract(openRoot(t, dst), bytes.NewReader(b.Bytes()), big)
	must(err)
	if xst.Files != st.Files || xst.Bytes != st.Bytes {
		t.Errorf("extracted %+v, wrote %+v", xst, st)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(dst, "ro"), 0o755) })
	for name, want := range map[string]string{"data.csv": "x,y\n1,2\n", "sub/deep/run.sh": "#!/bin/sh\n", "bin.dat": "\x00\x01\x02\xff", "inside/run.sh": "#!/bin/sh\n", "sub/up": "x,y\n1,2\n", "ro/f": "r", "suid": "s"} {
		got, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", name, got, err, want)
		}
	}
	for name, want := range map[string]fs.FileMode{"sub/deep/run.sh": 0o755, "bin.dat": 0o600, "suid": 0o755, "ro": 0o555 | fs.ModeDir, "ro/f": 0o444} {
		fi, err := os.Lstat(filepath.Join(dst, name))
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", name, fi.Mode(), err, want)
		}
	}
	for _, gone := range []string{"abs", "sub/out", "fifo"} {
		if _, err := os.Lstat(filepath.Join(dst, gone)); err == nil {
			t.Errorf("%s was archived", gone)
		}
	}
}

func TestWriteKeepsOnlyMatches(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	for _, n := range []string{"a.png", "b.txt", "out/c.png", "results/x/y.csv"} {
		os.MkdirAll(filepath.Join(src, filepath.Dir(n)), 0o755)
		os.WriteFile(filepath.Join(src, n), []byte(n), 0o644)
	}
	os.Symlink("a.png", filepath.Join(src, "link.png"))
	var b bytes.Buffer
	globs := []string{"*.png", "results/**"}
	if _, err := Write(&b, openRoot(t, src), func(n string) bool { return MatchAny(globs, n) }, big); err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(&b)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		got = append(got, h.Name)
	}
	if want := []string{"a.png", "results/x/y.csv"}; !slices.Equal(got, want) {
		t.Fatalf("archived %q, want %q", got, want)
	}
}

func TestWriteLimits(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	for i := range 5 {
		os.WriteFile(filepath.Join(src, "f"+strconv.Itoa(i)), bytes.Repeat([]byte("x"), 1000), 0o644)
	}
	for _, lim := range []Limits{{MaxBytes: 1 << 20, MaxFiles: 4}, {MaxBytes: 3000, MaxFiles: 100}} {
		var b bytes.Buffer
		if _, err := Write(&b, openRoot(t, src), nil, lim); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%+v: %v, want ErrTooLarge", lim, err)
		}
		if int64(b.Len()) > lim.MaxBytes {
			t.Errorf("%+v: wrote %d bytes", lim, b.Len())
		}
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		glob, name string
		want       bool
	}{
		{"*.png", "plot.png", true},
		{"*.png", "out/plot.png", false},
		{"**/*.png", "out/plot.png", true},
		{"**/*.png", "plot.png", true},
		{"results/**", "results/a", true},
		{"results/**", "results/a/b/c", true},
		{"results/**", "result/a", false},
		{"results/**/*.csv", "results/x.csv", true},
		{"results/**/*.csv", "results/a/b/x.csv", true},
		{"results/**/*.csv", "results/a/b/x.txt", false},
		{"a/?/c", "a/b/c", true},
		{"[ab].txt", "b.txt", true},
		{"**", "anything/at/all", true},
		{"**/**/**/**/**/**/**/**/**/**/**/**/**/**/**/**/**/**/z", strings.Repeat("a/", 60) + "y", false},
	} {
		if got := Match(tc.glob, tc.name); got != tc.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tc.glob, tc.name, got, tc.want)
		}
	}
}

// FuzzExtract: whatever the archive, Extract returns (no panic) and writes
// nothing outside its root.
func FuzzExtract(f *testing.F) {
	f.Add(archivetest.Tar(archivetest.Entry{Name: "a", Data: "x"}, archivetest.Entry{Name: "d", Typ: tar.TypeDir, Mode: 0o755},
		archivetest.Entry{Name: "l", Typ: tar.TypeSymlink, Link: "a"}))
	for _, c := range archivetest.Hostile(1 << 20) {
		f.Add(c.Tar)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		outer := t.TempDir()
		dir := filepath.Join(outer, "ws")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		_, _ = Extract(root, bytes.NewReader(data), Limits{MaxBytes: 1 << 20, MaxFiles: 100})
		if names := list(t, outer); !slices.Equal(names, []string{"ws"}) {
			t.Fatalf("wrote outside the root: %q", names)
		}
		// Every link left behind stays inside.
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type()&fs.ModeSymlink != 0 {
				rel, _ := filepath.Rel(dir, p)
				if out, _ := leadsOut(root, filepath.ToSlash(rel)); out {
					t.Fatalf("link %s leads out", rel)
				}
			}
			return nil
		})
	})
}
