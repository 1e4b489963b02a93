package fakeexec

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sandfleet/sandfleet/internal/archive"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// files is the fake's working directory: regular files by name, restored
// from RunOptions.Restore and archived to RunOptions.Archive as tar, as
// the launcher does in a real sandbox. Script commands:
//
//	write FILE TEXT   FILE holds TEXT and a newline
//	append FILE TEXT  TEXT and a newline are appended to FILE
//	cat FILE          FILE's content goes to stdout
//	fill FILE N       FILE holds N bytes
type files map[string][]byte

// restore reads the snapshot, checking its size and digest.
func restore(opts jobrun.Options, job *jobs.Job) (files, error) {
	fs := files{}
	if s := opts.Restore; s != nil {
		data, err := io.ReadAll(io.LimitReader(s.R, s.Size+1))
		if err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		if int64(len(data)) != s.Size || hex.EncodeToString(sum[:]) != s.SHA256 {
			return nil, fmt.Errorf("snapshot of %d bytes, sha256 %x: not as announced", len(data), sum)
		}
		tr := tar.NewReader(bytes.NewReader(data))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
			if h.Typeflag == tar.TypeReg {
				b, _ := io.ReadAll(tr)
				fs[h.Name] = b
			}
		}
	}
	for name, data := range job.Files {
		fs[name] = []byte(data)
	}
	return fs, nil
}

// command runs a file command of the script; ok is false for others.
func (fs files) command(cmd, arg string, stdout *strings.Builder) bool {
	name, text, _ := strings.Cut(arg, " ")
	switch cmd {
	case "write":
		fs[name] = []byte(text + "\n")
	case "append":
		fs[name] = append(fs[name], text+"\n"...)
	case "cat":
		stdout.Write(fs[name])
	case "fill":
		n, err := strconv.Atoi(text)
		if err != nil || n < 0 {
			return false
		}
		fs[name] = bytes.Repeat([]byte{'x'}, n)
	default:
		return false
	}
	return true
}

// archive writes what opts.Archive asks for, for a job that ended with
// status.
func (fs files) archive(opts jobrun.Options, status jobs.Status) {
	a := opts.Archive
	if a == nil {
		return
	}
	if status != jobs.StatusSucceeded && status != jobs.StatusFailed {
		a.Err = "the job did not end on its own"
		return
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, name := range slices.Sorted(maps.Keys(fs)) {
		if !a.All && !archive.MatchAny(a.Outputs, name) {
			continue
		}
		_ = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(fs[name]))})
		_, _ = tw.Write(fs[name])
		a.Files++
	}
	_ = tw.Close()
	sum := sha256.Sum256(b.Bytes())
	a.Bytes, a.SHA256 = int64(b.Len()), hex.EncodeToString(sum[:])
	if _, err := a.W.Write(b.Bytes()); err != nil {
		a.Err = err.Error()
		return
	}
	a.Complete = true
}
