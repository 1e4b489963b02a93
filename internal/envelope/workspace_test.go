package envelope

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func withWorkspace() *Header {
	h := sample()
	h.Restore = &Restore{Bytes: 3, SHA256: strings.Repeat("ab", 32), MaxBytes: 64 << 20, MaxFiles: 100}
	h.Archive = &Archive{All: true, Outputs: []string{"*.png", "results/**"}, MaxBytes: 64 << 20, MaxFiles: 100}
	return h
}

// The snapshot follows the header; Decode leaves it, and the job's stdin
// after it, on the reader.
func TestRestoreRoundTrip(t *testing.T) {
	t.Parallel()
	b, err := Marshal(withWorkspace())
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(append(b, "TARstdin"...))
	h, err := Decode(r)
	if err != nil {
		t.Fatal(err)
	}
	if h.Restore.Bytes != 3 || !h.Archive.All || h.Archive.Outputs[1] != "results/**" {
		t.Fatalf("decoded %+v %+v", h.Restore, h.Archive)
	}
	rest, _ := io.ReadAll(r)
	if string(rest) != "TARstdin" {
		t.Fatalf("left %q", rest)
	}
}

// A job that uses no workspace has the header and trailer of a launcher
// and executor that know none: new fields are absent, not empty.
func TestWorkspaceFieldsAreOptIn(t *testing.T) {
	t.Parallel()
	b, _ := Marshal(sample())
	for _, k := range []string{"restore", "archive"} {
		if bytes.Contains(b, []byte(`"`+k+`"`)) {
			t.Errorf("header without a workspace carries %q: %s", k, b)
		}
	}
	tr := seal.Sign(Trailer{Exit: 0, StdoutBytes: 1})
	if bytes.Contains(tr, []byte("archive")) {
		t.Errorf("trailer without an archive names one: %s", tr)
	}
	// The largest trailer without an archive fits the old bound of 1024.
	big := int64(1 << 62)
	full := seal.Sign(Trailer{Exit: 255, Signal: 9, MaxRSSBytes: &big, CPUNanos: &big, CgroupPeakBytes: &big,
		CgroupCPUNanos: &big, CgroupOOMKills: &big, StdoutBytes: big, StderrBytes: big, Error: strings.Repeat("e", 600)})
	if len(full) > 1024 {
		t.Errorf("trailer without an archive is %d bytes, over the old bound of 1024", len(full))
	}
	// And the largest with an archive fits MaxTrailerBytes.
	withArchive := seal.Sign(Trailer{Exit: 255, MaxRSSBytes: &big, StdoutBytes: big, StderrBytes: big,
		Error: strings.Repeat("e", 600), ArchiveBytes: big, ArchiveSHA256: strings.Repeat("a", 64),
		ArchiveFiles: 1 << 30, ArchiveSkipped: 1 << 30, ArchiveError: strings.Repeat("f", 600)})
	if len(withArchive) > MaxTrailerBytes {
		t.Errorf("trailer with an archive is %d bytes, over %d", len(withArchive), MaxTrailerBytes)
	}
	if got, ok := seal.Open(withArchive); !ok || got.ArchiveBytes != big || got.ArchiveFiles != 1<<30 {
		t.Errorf("Open = %+v, %v", got, ok)
	}
}

func TestValidateWorkspace(t *testing.T) {
	t.Parallel()
	bad := map[string]func(h *Header){
		"restore over its max":  func(h *Header) { h.Restore.Bytes = h.Restore.MaxBytes + 1 },
		"restore negative":      func(h *Header) { h.Restore.Bytes = -1 },
		"restore no max":        func(h *Header) { h.Restore.MaxFiles = 0 },
		"restore bad sha":       func(h *Header) { h.Restore.SHA256 = "xyz" },
		"archive of nothing":    func(h *Header) { h.Archive.All, h.Archive.Outputs = false, nil },
		"archive no max":        func(h *Header) { h.Archive.MaxBytes = 0 },
		"archive glob absolute": func(h *Header) { h.Archive.Outputs = []string{"/etc/*"} },
		"archive glob dotdot":   func(h *Header) { h.Archive.Outputs = []string{"../*"} },
		"archive glob bad":      func(h *Header) { h.Archive.Outputs = []string{"[a"} },
	}
	for name, mod := range bad {
		h := withWorkspace()
		mod(h)
		if err := h.Validate(); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: Validate = %v, want ErrFormat", name, err)
		}
	}
	if err := withWorkspace().Validate(); err != nil {
		t.Fatal(err)
	}
}
