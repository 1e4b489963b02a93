package executor

import (
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// A session of a preset whose optional image this worker lacks is refused
// as a job of it is, naming the image and how to build it, and no
// container is made for it.
func TestSessionOptionalImageMissing(t *testing.T) {
	t.Parallel()
	idle := func(killed <-chan struct{}, stdin io.Reader, stdout, stderr io.Writer) int64 { <-killed; return 137 }
	f := &fakeDocker{missing: map[string]bool{LangsImage: true}, behave: idle}
	e, err := newWithAPI(Config{WorkerID: "w"}, f)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ss, err := e.StartSession(t.Context(), SessionSpec{ID: "s1", Image: "cpp"})
	if err == nil {
		ss.Close(t.Context())
		t.Fatal("a session of cpp started without its image")
	}
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), LangsImage) || !strings.Contains(err.Error(), "make images-all") {
		t.Errorf("cpp's session without its image: %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Contains(f.calls, "create") {
		t.Errorf("a container was made for a refused session: %v", f.calls)
	}
}
