package archive

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
)

// The launcher's share of a step on a 1 MiB workspace, without the
// sandbox around it:
//
//	go test ./internal/archive -run '^$' -bench . -benchtime 200x
func BenchmarkRoundTrip1MiB(b *testing.B) {
	src := b.TempDir()
	data := make([]byte, 1<<20)
	rand.Read(data)
	if err := os.WriteFile(filepath.Join(src, "blob.bin"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "main.py"), []byte("print(1)\n"), 0o644)
	root, err := os.OpenRoot(src)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	var tarBytes bytes.Buffer
	lim := Limits{MaxBytes: 64 << 20, MaxFiles: DefaultMaxFiles}
	b.SetBytes(2 << 20) // restored and archived
	for b.Loop() {
		tarBytes.Reset()
		if _, err := Write(&tarBytes, root, nil, lim); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		dst, err := os.MkdirTemp(b.TempDir(), "x")
		if err != nil {
			b.Fatal(err)
		}
		droot, err := os.OpenRoot(dst)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := Extract(droot, bytes.NewReader(tarBytes.Bytes()), lim); err != nil {
			b.Fatal(err)
		}
		droot.Close()
	}
}
