package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/metrics"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// pooledFake is the fake executor with the warm pool's accessor of
// internal/executor, so that the pool gauges are wired as with Docker.
type pooledFake struct{ *fakeexec.Executor }

func (pooledFake) PoolStats() executor.PoolStats {
	return executor.PoolStats{Size: 3, Idle: 2, Hits: 5, Misses: 1}
}

// scrape returns the samples of /metrics: `name{labels}` → value.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	code, body := httpGet("http://" + addr + "/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	out := map[string]float64{}
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// Jobs of every kind run through a worker on the fake executor; /metrics
// then counts each outcome once under its status and preset (an unknown
// image under "other"), observes durations and queue waits of the jobs that
// ran, sums the egress the results account per queue, shows the busy slot
// while a job runs, and serves the pool gauges,
// the Go and process collectors.
func TestMetrics(t *testing.T) {
	t.Parallel()
	addr := testutil.FreeAddr(t)
	exec := &fakeexec.Executor{}
	s := startServe(t, []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(),
		"--slots", "2", "--id", "m1", "--metrics", addr}, pooledFake{exec})
	defer s.Stop(t)
	c := connect(t, s.url)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	for _, j := range []jobs.Job{
		{ID: "ok1", Image: "python", Code: "print 1\negress a.test:443 true 2 100 5000\negress b.test:80 false 1 0 0"},
		{ID: "ok2", Image: "python", Code: "print 2"},
		{ID: "sh", Image: "shell", Code: "exit 3"},
		{ID: "slow", Image: "python", Code: "timeout"},
		{ID: "bad", Image: "cobol", Code: "x"},
	} {
		if _, err := c.SubmitAndWait(ctx, &j); err != nil {
			t.Fatalf("%s: %v", j.ID, err)
		}
	}
	if _, err := c.Submit(ctx, &jobs.Job{ID: "blocker", Image: "python", Code: "block"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "blocker running", func() bool { return exec.Running() == 1 })
	// A slot is busy until its job is settled (acked), which may come
	// after the result a client waited for: poll for the earlier jobs'
	// slots to be given back.
	var m map[string]float64
	testutil.Eventually(t, 10*time.Second, "the blocker's slot alone busy", func() bool {
		m = scrape(t, addr)
		return m["sandfleet_slots_busy"] <= 1
	})
	if m["sandfleet_slots"] != 2 || m["sandfleet_slots_busy"] != 1 {
		t.Errorf("slots %v busy %v, want 2 and 1", m["sandfleet_slots"], m["sandfleet_slots_busy"])
	}
	if _, err := c.Cancel(ctx, "blocker"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "slot freed", func() bool { return scrape(t, addr)["sandfleet_slots_busy"] == 0 })

	m = scrape(t, addr)
	want := map[string]float64{
		`sandfleet_jobs_finished_total{preset="python",status="succeeded"}`:     2,
		`sandfleet_jobs_finished_total{preset="shell",status="failed"}`:         1,
		`sandfleet_jobs_finished_total{preset="python",status="timeout"}`:       1,
		`sandfleet_jobs_finished_total{preset="other",status="rejected"}`:       1,
		`sandfleet_jobs_finished_total{preset="python",status="canceled"}`:      1,
		`sandfleet_job_duration_seconds_count{preset="python"}`:                 4,
		`sandfleet_job_duration_seconds_count{preset="shell"}`:                  1,
		`sandfleet_job_queue_wait_seconds_count`:                                5,
		`sandfleet_job_deliveries_total`:                                        6,
		`sandfleet_egress_connections_total{queue="default",verdict="allowed"}`: 2,
		`sandfleet_egress_connections_total{queue="default",verdict="denied"}`:  1,
		`sandfleet_egress_bytes_total{direction="out",queue="default"}`:         100,
		`sandfleet_egress_bytes_total{direction="in",queue="default"}`:          5000,
		`sandfleet_job_redeliveries_total`:                                      0,
		`sandfleet_dead_letters_total`:                                          0,
		`sandfleet_jobs_held`:                                                   0,
		`sandfleet_executor_ready`:                                              1,
		`sandfleet_ready`:                                                       1,
		`sandfleet_draining`:                                                    0,
		`sandfleet_worker_info{queue="default",version="dev",worker="m1"}`:      1,
		`sandfleet_pool_size`:                                                   3,
		`sandfleet_pool_idle`:                                                   2,
		`sandfleet_pool_hits_total`:                                             5,
		`sandfleet_pool_misses_total`:                                           1,
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	for _, k := range []string{"go_goroutines", "process_cpu_seconds_total"} {
		if _, ok := m[k]; !ok {
			t.Errorf("%s missing", k)
		}
	}
	undescribed(t, m)
	if t.Failed() {
		for k, v := range m {
			if strings.HasPrefix(k, "sandfleet_") {
				t.Logf("%s %v", k, v)
			}
		}
	}
}

// undescribed fails for each family of the scrape m that "worker metrics"
// (metricDescs, which docs/metrics.md is generated from) leaves out.
func undescribed(t *testing.T, m map[string]float64) {
	t.Helper()
	described := map[string]bool{}
	for _, d := range metricDescs() {
		described[d.Name] = true
		if d.Type == metrics.HistogramType {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				described[d.Name+s] = true
			}
		}
	}
	for k := range m {
		if name, _, _ := strings.Cut(k, "{"); !described[name] {
			t.Errorf("%s is served but not in worker metrics", name)
		}
	}
}
