package executor

import (
	"context"
	"io"
	"sync"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// OnStart is told once, before any output, which sandbox runs the job and
// under which limits, resolved.
func TestRunTellsStartBeforeOutput(t *testing.T) {
	t.Parallel()
	f := &fakeDocker{behave: launcher(func(_ io.Reader, stdout, _ io.Writer) int {
		io.WriteString(stdout, "out")
		return 0
	})}
	e, err := newWithAPI(Config{WorkerID: "w"}, f)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var told []string
	var start jobs.Start
	opts := jobs.RunOptions{
		OnStart: func(s jobs.Start) {
			mu.Lock()
			defer mu.Unlock()
			told, start = append(told, "start"), s
		},
		OnOutput: func(s jobs.Stream, p []byte) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, string(p))
		},
	}
	job := &jobs.Job{ID: "j", Image: "python", Limits: limits.Limits{Output: 4 * limits.KiB}}
	if _, err := e.Run(context.Background(), job, opts); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := limits.Default()
	want.Output = 4 * limits.KiB
	if len(told) != 2 || told[0] != "start" || start.Container == "" || start.Limits != want {
		t.Fatalf("told %q, start %+v; want start (with the sandbox and %+v) before the output", told, start, want)
	}
}
