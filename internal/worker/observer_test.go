package worker_test

import (
	"sync"

	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// recorder is a worker.Observer that remembers what it was told.
type recorder struct {
	mu       sync.Mutex
	attempts []int
	finished map[string]string // job ID → status/preset
	dead     int
}

var _ worker.Observer = (*recorder)(nil)

func (r *recorder) Delivered(attempt int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, attempt)
}

func (r *recorder) Finished(res *jobs.Result, preset, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished == nil {
		r.finished = map[string]string{}
	}
	if _, dup := r.finished[res.ID]; dup {
		r.finished[res.ID] = "reported twice"
		return
	}
	r.finished[res.ID] = string(res.Status) + "/" + preset
}

func (r *recorder) DeadLettered() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dead++
}

func (r *recorder) snapshot() (attempts []int, finished map[string]string, dead int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := map[string]string{}
	for k, v := range r.finished {
		f[k] = v
	}
	return append([]int(nil), r.attempts...), f, r.dead
}
