package executor

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// runTelling runs job on a fake engine whose launcher runs script, and
// returns the result with what the RunOptions callbacks were told, in
// order: "start" for OnStart, "<stream>:<bytes>" for OnOutput; and the
// Start that OnStart was given.
func runTelling(t *testing.T, job *jobs.Job, script func(stdin io.Reader, stdout, stderr io.Writer) int) (*jobs.Result, []string, jobrun.Start) {
	t.Helper()
	e, err := newWithAPI(Config{WorkerID: "w"}, &fakeDocker{behave: launcher(script)})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var told []string
	var start jobrun.Start
	res, err := e.Run(context.Background(), job, jobrun.Options{
		OnStart: func(s jobrun.Start) {
			mu.Lock()
			defer mu.Unlock()
			told, start = append(told, "start"), s
		},
		OnOutput: func(s jobs.Stream, p []byte) {
			mu.Lock()
			defer mu.Unlock()
			told = append(told, string(s)+":"+string(p))
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return res, told, start
}

// OnOutput is told each write as it arrives, on its stream, and the result
// holds the same bytes.
func TestRunTellsOutputAsItArrives(t *testing.T) {
	t.Parallel()
	res, told, _ := runTelling(t, &jobs.Job{ID: "j", Image: "python"}, func(_ io.Reader, stdout, stderr io.Writer) int {
		io.WriteString(stdout, "one ")
		io.WriteString(stderr, "two ")
		io.WriteString(stdout, "three")
		return 0
	})
	if strings.Join(told, ",") != "start,stdout:one ,stderr:two ,stdout:three" || res.Stdout != "one three" || res.Stderr != "two " {
		t.Fatalf("told %q; result stdout %q stderr %q", told, res.Stdout, res.Stderr)
	}
}

// OnStart is told once, before any output, which sandbox runs the job and
// under which limits, resolved.
func TestRunTellsStartBeforeOutput(t *testing.T) {
	t.Parallel()
	job := &jobs.Job{ID: "j", Image: "python", Limits: limits.Limits{Output: 4 * limits.KiB}}
	_, told, start := runTelling(t, job, func(_ io.Reader, stdout, _ io.Writer) int {
		io.WriteString(stdout, "out")
		return 0
	})
	want := limits.Default()
	want.Output = 4 * limits.KiB
	if len(told) != 2 || told[0] != "start" || start.Container == "" || start.Limits != want {
		t.Fatalf("told %q, start %+v; want start (with the sandbox and %+v) before the output", told, start, want)
	}
}
