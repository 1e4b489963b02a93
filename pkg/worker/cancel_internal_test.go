package worker

import (
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// The requests the watch has read answer a job's check, except one older
// than the bucket's TTL: the server has expired it without telling the
// watch, and a job ID used again after that must run. Past maxCancels
// the worker keeps none (and every job reads CANCELS).
func TestCancelRequestedFromTheWatch(t *testing.T) {
	w := &Worker{cfg: Config{Topology: jobs.Topology{ResultTTL: time.Hour}}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	w.cancels = map[string]time.Time{"now": time.Now(), "old": time.Now().Add(-2 * time.Hour)}
	if !w.cancelRequested("now", w.log) {
		t.Error("a request stored a moment ago not found")
	}
	if w.cancelRequested("old", w.log) {
		t.Error("a request older than the bucket's TTL found")
	}
	if w.cancelRequested("none", w.log) {
		t.Error("a job without a request found")
	}
	for i := range maxCancels {
		w.cancelRunning(strconv.Itoa(i), time.Now())
	}
	w.mu.Lock()
	n := len(w.cancels)
	w.mu.Unlock()
	if n != 0 {
		t.Errorf("%d requests kept past the bound of %d", n, maxCancels)
	}
}
