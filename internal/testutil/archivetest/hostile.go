// Package archivetest builds archives for tests: the hostile snapshots a
// launcher must refuse, and tar files from a list of entries.
package archivetest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Entry is one member of a test archive. Typ 0 is a regular file; Mode 0
// is 0644.
type Entry struct {
	Name, Link string
	Typ        byte
	Mode       int64
	Data       string
}

// Tar returns the archive of es, in order. It panics on what archive/tar
// refuses to write: test input is the test's own.
func Tar(es ...Entry) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := &tar.Header{Name: e.Name, Linkname: e.Link, Typeflag: e.Typ, Mode: e.Mode, Size: int64(len(e.Data))}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			panic(fmt.Sprintf("%s: %v", e.Name, err))
		}
		if _, err := tw.Write([]byte(e.Data)); err != nil {
			panic(err)
		}
	}
	if err := tw.Close(); err != nil {
		panic(err)
	}
	return b.Bytes()
}

// GNUSparse is an old-GNU-format sparse entry ('S') whose logical size is
// size while the archive holds one byte of it: what archive/tar cannot
// write, made by hand.
func GNUSparse(name string, size int64) []byte {
	var blk [512]byte
	copy(blk[0:], name)
	copy(blk[100:], "0000644\x00")
	copy(blk[108:], "0000000\x00")
	copy(blk[116:], "0000000\x00")
	copy(blk[124:], fmt.Sprintf("%011o\x00", 1)) // one byte of data
	copy(blk[136:], fmt.Sprintf("%011o\x00", 0))
	blk[156] = 'S'
	copy(blk[257:], "ustar  \x00") // GNU magic and version
	// One sparse chunk: the last byte of the file.
	copy(blk[386:], fmt.Sprintf("%011o\x00", size-1))
	copy(blk[398:], fmt.Sprintf("%011o\x00", 1))
	copy(blk[483:], fmt.Sprintf("%011o\x00", size))
	for i := 148; i < 156; i++ {
		blk[i] = ' '
	}
	sum := 0
	for _, c := range blk {
		sum += int(c)
	}
	copy(blk[148:], fmt.Sprintf("%06o\x00 ", sum))
	out := append(blk[:], make([]byte, 512)...) // the data block
	out[512] = 'x'
	return append(out, make([]byte, 1024)...) // end of archive
}

// TinyFiles is an archive of n empty files: a million of them is the
// inode bomb of the issue; past the file limit it is refused.
func TinyFiles(n int) []byte {
	es := make([]Entry, n)
	for i := range es {
		es[i] = Entry{Name: "f" + strconv.Itoa(i)}
	}
	return Tar(es...)
}

// Case is a hostile archive and what refuses it.
type Case struct {
	Name string
	Tar  []byte
	// TooLarge: refused for its size or count (archive.ErrTooLarge), not
	// its content.
	TooLarge bool
}

// Hostile returns the archives a launcher never writes and must refuse,
// each with a file "evil" or a link meant to land outside the working
// directory or to give the job more than it has. maxBytes is the limit the
// oversized one exceeds.
func Hostile(maxBytes int64) []Case {
	return []Case{
		{Name: "dotdot", Tar: Tar(Entry{Name: "../evil", Data: "x"})},
		{Name: "dotdot inside", Tar: Tar(Entry{Name: "a/../../evil", Data: "x"})},
		{Name: "absolute", Tar: Tar(Entry{Name: "/tmp/evil", Data: "x"})},
		{Name: "link absolute", Tar: Tar(Entry{Name: "passwd", Typ: tar.TypeSymlink, Link: "/etc/passwd"})},
		{Name: "link up", Tar: Tar(Entry{Name: "a/up", Typ: tar.TypeSymlink, Link: "../../tmp"})},
		{Name: "link then write through it", Tar: Tar(Entry{Name: "l", Typ: tar.TypeSymlink, Link: "/tmp"}, Entry{Name: "l/evil", Data: "x"})},
		{Name: "link chain leads out", Tar: Tar(
			Entry{Name: "d", Typ: tar.TypeDir, Mode: 0o755},
			Entry{Name: "m", Typ: tar.TypeSymlink, Link: "d/l/.."},
			Entry{Name: "d/l", Typ: tar.TypeSymlink, Link: ".."})},
		{Name: "hard link", Tar: Tar(Entry{Name: "f", Data: "x"}, Entry{Name: "h", Typ: tar.TypeLink, Link: "/etc/passwd"})},
		{Name: "char device", Tar: Tar(Entry{Name: "mem", Typ: tar.TypeChar})},
		{Name: "block device", Tar: Tar(Entry{Name: "sda", Typ: tar.TypeBlock})},
		{Name: "fifo", Tar: Tar(Entry{Name: "p", Typ: tar.TypeFifo})},
		{Name: "setuid", Tar: Tar(Entry{Name: "suid", Mode: 0o4755, Data: "#!/bin/sh\n"})},
		{Name: "setgid dir", Tar: Tar(Entry{Name: "d", Typ: tar.TypeDir, Mode: 0o2755})},
		{Name: "sticky", Tar: Tar(Entry{Name: "s", Mode: 0o1777, Data: "x"})},
		{Name: "sparse 10 GB", Tar: GNUSparse("sparse", 10<<30)},
		{Name: "name given twice", Tar: Tar(Entry{Name: "f", Data: "1"}, Entry{Name: "f", Data: "2"})},
		{Name: "over the size limit", Tar: Tar(Entry{Name: "a", Data: strings.Repeat("x", int(maxBytes/2)+1)}, Entry{Name: "b", Data: strings.Repeat("y", int(maxBytes/2)+1)}), TooLarge: true},
		{Name: "file declared 10 GB", Tar: Declared("big", 10<<30, 4096), TooLarge: true},
		{Name: "not a tar", Tar: bytes.Repeat([]byte("garbage!"), 128)},
	}
}

// Declared is an archive whose one file says it holds size bytes but that
// ends after the first n of them: its limit must be checked from the
// header, before the bytes are written, for the stream is cut.
func Declared(name string, size int64, n int) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		panic(err)
	}
	if _, err := tw.Write(bytes.Repeat([]byte("z"), n)); err != nil {
		panic(err)
	}
	return b.Bytes() // no Close: the rest never comes
}
