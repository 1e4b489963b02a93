package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/metrics"
	"github.com/sandfleet/sandfleet/internal/worker"
)

// parseLanes reads the --queue flags: NAME or NAME:WEIGHT, each once.
func parseLanes(flags []string) ([]worker.Lane, error) {
	lanes := make([]worker.Lane, 0, len(flags))
	seen := map[string]bool{}
	for _, f := range flags {
		l, err := worker.ParseLane(f)
		if err != nil {
			return nil, cmdline.Usagef("--queue: %w", err)
		}
		if seen[l.Queue] {
			return nil, cmdline.Usagef("--queue %s is given twice", l.Queue)
		}
		seen[l.Queue] = true
		lanes = append(lanes, l)
	}
	return lanes, nil
}

// The lanes' families: pending and in flight are the queue's consumer's,
// the same from every worker of the queue (take the max, not the sum).
var (
	queuePending = laneGauge("sandfleet_queue_pending",
		"Jobs of the queue never delivered yet, fleet-wide (the same from every worker of the queue).")
	queueInFlight = laneGauge("sandfleet_queue_in_flight",
		"Jobs of the queue delivered and not yet acknowledged, fleet-wide: running, or held until their lease expires.")
	queueOldest = laneGauge("sandfleet_queue_oldest_pending_age_seconds",
		"Age of the queue's oldest job never delivered, fleet-wide; 0 when none waits.")
	queueBusy   = laneGauge("sandfleet_queue_slots_busy", "This worker's slots running the queue's jobs.")
	queueWeight = laneGauge("sandfleet_queue_weight",
		"The lane's weight on this worker (--queue NAME:WEIGHT): its share of the slots, and its priority.")
	queueStatsUp = metrics.Desc{Name: "sandfleet_queue_stats_up", Type: metrics.GaugeType,
		Help: "1 if the queues' fleet-wide figures were read at this scrape, else 0 (they are then left out)."}

	laneDescs = []metrics.Desc{queuePending, queueInFlight, queueOldest, queueBusy, queueWeight, queueStatsUp}
)

func laneGauge(name, help string) metrics.Desc {
	return metrics.Desc{Name: name, Help: help, Type: metrics.GaugeType, Labels: []string{"queue"}}
}

// laneReader is what laneFamilies reads: a *worker.Worker.
type laneReader interface {
	Lanes(ctx context.Context) ([]worker.LaneStats, error)
}

// laneFamilies exports each lane's figures (laneDescs) at scrape time, so
// that an autoscaler can act on a queue's backlog: pending and in flight,
// the age of the oldest job never delivered, and this worker's busy slots
// on the lane. One read of the lanes serves them all.
func laneFamilies(w laneReader) func() []metrics.Family {
	return func() []metrics.Family {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		lanes, err := w.Lanes(ctx)
		up := 1.0
		if err != nil {
			up = 0
			if !errors.Is(err, worker.ErrNotSetUp) {
				slog.Warn("metrics: read the queues' figures", "err", err)
			}
		}
		pending, inFlight, oldest := queuePending.Family(), queueInFlight.Family(), queueOldest.Family()
		busy, weight := queueBusy.Family(), queueWeight.Family()
		stats := queueStatsUp.Family(metrics.Sample{Value: up})
		now := time.Now()
		for _, l := range lanes {
			q := []string{"queue", l.Queue}
			busy.Samples = append(busy.Samples, metrics.Sample{Labels: q, Value: float64(l.Busy)})
			weight.Samples = append(weight.Samples, metrics.Sample{Labels: q, Value: float64(l.Weight)})
			if err != nil {
				continue
			}
			age := 0.0
			if !l.OldestPending.IsZero() {
				age = max(0, now.Sub(l.OldestPending).Seconds())
			}
			pending.Samples = append(pending.Samples, metrics.Sample{Labels: q, Value: float64(l.Pending)})
			inFlight.Samples = append(inFlight.Samples, metrics.Sample{Labels: q, Value: float64(l.InFlight)})
			oldest.Samples = append(oldest.Samples, metrics.Sample{Labels: q, Value: age})
		}
		return []metrics.Family{pending, inFlight, oldest, busy, weight, stats}
	}
}
