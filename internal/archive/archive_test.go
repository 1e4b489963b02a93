package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"net"
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
// nothing outside its root; what it left, written again, extracts whole.
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
				if out, _ := leadsOut(rootLinks{root}, filepath.ToSlash(rel)); out {
					t.Fatalf("link %s leads out", rel)
				}
			}
			return nil
		})
		// And whatever it left, saved again, restores.
		chmodTree(dir)
		writeExtract(t, dir, Limits{MaxBytes: 1 << 20, MaxFiles: 100})
	})
}

// writeExtract writes the tree under src and extracts the archive into a
// fresh directory, which must take it whole: what Write emits, Extract
// accepts.
func writeExtract(t testing.TB, src string, lim Limits) (Stats, string) {
	t.Helper()
	var b bytes.Buffer
	st, err := Write(&b, openRoot(t, src), nil, lim)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	dst := t.TempDir()
	xst, err := Extract(openRoot(t, dst), bytes.NewReader(b.Bytes()), lim)
	if err != nil {
		t.Fatalf("Extract refused what Write wrote: %v", err)
	}
	if xst.Files != st.Files || xst.Bytes != st.Bytes {
		t.Fatalf("extracted %+v, wrote %+v", xst, st)
	}
	t.Cleanup(func() { chmodTree(dst) })
	return st, dst
}

// chmodTree makes every directory under dir writable again, so that the
// test's cleanup can remove it.
func chmodTree(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
}

// TestWriteHoldsToExtractRules: for every rule Extract holds an entry to,
// and for where links lead, a tree that would break it. Write leaves out
// what would (listing it with the rule's reason) or mends it (the mode's
// bits), and Extract takes the archive whole.
func TestWriteHoldsToExtractRules(t *testing.T) {
	t.Parallel()
	d200 := strings.Repeat("D", 200)
	deep := strings.Join([]string{d200, d200, d200, d200, d200}, "/") // 1,004 bytes, 1,010 with "/f"
	type skip struct{ name, reason string }
	cases := []struct {
		rule  string // a rule's name (rules), or "links": where each leads
		what  string
		build func(t *testing.T, dir string)
		skips []skip   // each listed, its reason holding the text
		kept  []string // in the extracted tree
		modes map[string]fs.FileMode
	}{
		{rule: "name", what: "a file at a 1,010-byte path, 5 directories deep", build: func(t *testing.T, dir string) {
			mkdirs(t, filepath.Join(dir, deep))
			create(t, filepath.Join(dir, deep, "f"), "x")
		}, skips: []skip{{d200 + "/" + d200, "the path is 401 bytes: a name must be 1 to 255 bytes; left out with the 4 entries under it"}}, kept: []string{d200}},
		{rule: "name", what: "255 bytes kept, 256 left out", build: func(t *testing.T, dir string) {
			mkdirs(t, filepath.Join(dir, d200))
			create(t, filepath.Join(dir, d200, strings.Repeat("k", 54)), "kept")
			create(t, filepath.Join(dir, d200, strings.Repeat("s", 55)), "skipped")
		}, skips: []skip{{d200 + "/" + strings.Repeat("s", 55), "the path is 256 bytes"}}, kept: []string{d200 + "/" + strings.Repeat("k", 54)}},
		{rule: "mode", what: "setuid, setgid and sticky bits", build: func(t *testing.T, dir string) {
			create(t, filepath.Join(dir, "suid"), "s")
			must(t, os.Chmod(filepath.Join(dir, "suid"), 0o755|fs.ModeSetuid|fs.ModeSetgid))
			mkdirs(t, filepath.Join(dir, "sticky"))
			must(t, os.Chmod(filepath.Join(dir, "sticky"), 0o777|fs.ModeSticky))
		}, kept: []string{"suid", "sticky"}, modes: map[string]fs.FileMode{"suid": 0o755, "sticky": 0o777 | fs.ModeDir}},
		{rule: "sparse", what: "a sparse file is written whole", build: func(t *testing.T, dir string) {
			f, err := os.Create(filepath.Join(dir, "sparse"))
			must(t, err)
			must(t, f.Truncate(1<<20))
			must(t, f.Close())
		}, kept: []string{"sparse"}},
		{rule: "type", what: "a fifo, a socket, a hard link", build: func(t *testing.T, dir string) {
			must(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
			l, err := net.Listen("unix", filepath.Join(dir, "sock"))
			must(t, err)
			t.Cleanup(func() { l.Close() })
			create(t, filepath.Join(dir, "a"), "a")
			must(t, os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "hard")))
		}, skips: []skip{{"fifo", "a fifo"}, {"sock", "a socket"}}, kept: []string{"a", "hard"}},
		{rule: "link target", what: "absolute, and out by its path", build: func(t *testing.T, dir string) {
			mkdirs(t, filepath.Join(dir, "sub"))
			must(t, os.Symlink("/etc/passwd", filepath.Join(dir, "abs")))
			must(t, os.Symlink("../../etc", filepath.Join(dir, "sub/out")))
			// Through abs, which is left out: dangling, as in the tree
			// extracted, and kept.
			must(t, os.Symlink("../abs", filepath.Join(dir, "sub/up")))
		}, skips: []skip{{"abs", "is absolute"}, {"sub/out", "leads out"}}, kept: []string{"sub", "sub/up"}},
		{rule: "links", what: "out through another link, and a loop", build: func(t *testing.T, dir string) {
			mkdirs(t, filepath.Join(dir, "d"))
			must(t, os.Symlink("..", filepath.Join(dir, "d/l")))
			must(t, os.Symlink("d/l/..", filepath.Join(dir, "m")))
			must(t, os.Symlink("loop2", filepath.Join(dir, "loop1")))
			must(t, os.Symlink("loop1", filepath.Join(dir, "loop2")))
		}, skips: []skip{{"m", "leads out"}, {"loop1", "more than 40 links"}, {"loop2", "more than 40 links"}}, kept: []string{"d/l"}},
		{rule: "links", what: "a link inside only through one whose name is left out", build: func(t *testing.T, dir string) {
			// d200/x is a link deep into the tree, and its name is too long
			// to keep; m goes through it and back up, which without it
			// climbs out of the tree.
			mkdirs(t, filepath.Join(dir, d200))
			x := strings.Repeat("x", 60)
			must(t, os.Symlink("a/b/c/d/e/f", filepath.Join(dir, d200, x)))
			must(t, os.Symlink(d200+"/"+x+"/../../../../../..", filepath.Join(dir, "m")))
		}, skips: []skip{{d200 + "/" + strings.Repeat("x", 60), "the path is 261 bytes"}, {"m", "leads out"}}, kept: []string{d200}},
	}
	tested := map[string]bool{}
	for _, tc := range cases {
		tested[tc.rule] = true
		t.Run(tc.rule+": "+tc.what, func(t *testing.T) {
			t.Parallel()
			src := t.TempDir()
			tc.build(t, src)
			st, dst := writeExtract(t, src, big)
			if st.Skipped < len(tc.skips) || len(st.Skips) != len(tc.skips) {
				t.Errorf("skipped %d: %+v; want %d", st.Skipped, st.Skips, len(tc.skips))
			}
			for _, want := range tc.skips {
				i := slices.IndexFunc(st.Skips, func(s Skip) bool { return s.Name == want.name })
				if i < 0 || !strings.Contains(st.Skips[i].Reason, want.reason) {
					t.Errorf("%.40s... not listed with %q: %+v", want.name, want.reason, st.Skips)
				}
				if _, err := os.Lstat(filepath.Join(dst, want.name)); err == nil {
					t.Errorf("%.40s... was archived", want.name)
				}
			}
			for _, name := range tc.kept {
				if _, err := os.Lstat(filepath.Join(dst, name)); err != nil {
					t.Errorf("%.40s... not kept: %v", name, err)
				}
			}
			for name, want := range tc.modes {
				if fi, err := os.Lstat(filepath.Join(dst, name)); err != nil || fi.Mode() != want {
					t.Errorf("%s: mode %v, %v; want %v", name, fi.Mode(), err, want)
				}
			}
		})
	}
	for _, r := range rules {
		if !tested[r.name] {
			t.Errorf("rule %q has no case: add a tree that would break it", r.name)
		}
	}
}

// TestExtractNamesTheRule: a refused entry's error gives the rule it
// broke, not another's.
func TestExtractNamesTheRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e    archivetest.Entry
		want string
	}{
		{archivetest.Entry{Name: strings.Repeat("D/", 200) + "f"}, "the path is 401 bytes: a name must be 1 to 255 bytes"},
		{archivetest.Entry{Name: "a/../b"}, "empty, '.' or '..' parts"},
		{archivetest.Entry{Name: "/etc/x"}, "a name must be relative"},
		{archivetest.Entry{Name: "s", Mode: 0o4755}, "setuid"},
		{archivetest.Entry{Name: "l", Typ: tar.TypeSymlink, Link: "/etc"}, "is absolute"},
		{archivetest.Entry{Name: "h", Typ: tar.TypeLink, Link: "x"}, "a hard link"},
	} {
		_, err := Extract(openRoot(t, t.TempDir()), bytes.NewReader(archivetest.Tar(tc.e)), big)
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.20s: %v, want %q", tc.e.Name, err, tc.want)
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mkdirs(t testing.TB, dir string) {
	t.Helper()
	must(t, os.MkdirAll(dir, 0o755))
}

func create(t testing.TB, name, data string) {
	t.Helper()
	must(t, os.WriteFile(name, []byte(data), 0o644))
}

// FuzzWriteExtract builds a tree from the fuzzer's bytes (directories,
// files, links with any target, fifos, modes, names past the limit), writes
// it and extracts the archive: Extract must take whatever Write emits.
//
//	go test ./internal/archive -run '^$' -fuzz FuzzWriteExtract -fuzztime 60s
func FuzzWriteExtract(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7})
	f.Add([]byte{2, 0x13, 0x41, 2, 0x31, 0x10, 2, 0x55, 0x55, 0, 0x66})
	f.Add([]byte{0, 0x33, 0, 0x33, 0, 0x33, 1, 0x33, 2, 0x01, 0x05})
	f.Fuzz(func(t *testing.T, ops []byte) {
		src := t.TempDir()
		buildTree(src, ops)
		t.Cleanup(func() { chmodTree(src) })
		writeExtract(t, src, Limits{MaxBytes: 1 << 20, MaxFiles: 1000})
	})
}

// buildTree reads ops as a program that makes a tree under dir; what the
// file system refuses is passed over.
func buildTree(dir string, ops []byte) {
	long := strings.Repeat("L", 120)
	parts := []string{"a", "b", "c", long, "..", "."}
	next := func() byte {
		if len(ops) == 0 {
			return 0
		}
		b := ops[0]
		ops = ops[1:]
		return b
	}
	// A path of 1 to 4 parts; names (of what is made) use only the first 4.
	pathOf := func(target bool) string {
		b := next()
		n := int(b>>6) + 1
		var ps []string
		for i := range n {
			k := int(b>>(i*2)) & 3
			if target && b&1 != 0 && i == n-1 {
				k = 4 + int(next()&1)
			}
			ps = append(ps, parts[k])
		}
		return strings.Join(ps, "/")
	}
	for len(ops) > 0 {
		op := next()
		name := filepath.Join(dir, pathOf(false))
		os.MkdirAll(filepath.Dir(name), 0o755)
		switch op % 6 {
		case 0:
			os.Mkdir(name, 0o755)
		case 1:
			// O_EXCL: never through a fifo made before, which would block.
			if f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
				f.WriteString(name[len(dir):])
				f.Close()
			}
		case 2:
			target := pathOf(true)
			if op&0x80 != 0 {
				target = "/" + target
			}
			os.Symlink(target, name)
		case 3:
			syscall.Mkfifo(name, 0o644)
		case 4:
			os.Chmod(name, fs.FileMode(next())<<1|0o700|fs.ModeSetuid)
		case 5:
			os.Symlink(strings.Repeat("../", int(next()%4))+pathOf(true), name)
		}
	}
}
