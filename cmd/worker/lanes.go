package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/pkg/worker"
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

// laneCollector exports each lane's figures at scrape time, so that an
// autoscaler can act on a queue's backlog: pending and in flight (the
// queue's consumer, the same from every worker of the queue: take the max,
// not the sum), the age of the oldest job never delivered, and this
// worker's busy slots on the lane.
type laneCollector struct{ w *worker.Worker }

var (
	lanePendingDesc = prometheus.NewDesc("sandfleet_queue_pending",
		"Jobs of the queue never delivered yet, fleet-wide (the same from every worker of the queue).", []string{"queue"}, nil)
	laneInFlightDesc = prometheus.NewDesc("sandfleet_queue_in_flight",
		"Jobs of the queue delivered and not yet acknowledged, fleet-wide: running, or held until their lease expires.", []string{"queue"}, nil)
	laneOldestDesc = prometheus.NewDesc("sandfleet_queue_oldest_pending_age_seconds",
		"Age of the queue's oldest job never delivered, fleet-wide; 0 when none waits.", []string{"queue"}, nil)
	laneBusyDesc = prometheus.NewDesc("sandfleet_queue_slots_busy",
		"This worker's slots running the queue's jobs.", []string{"queue"}, nil)
	laneWeightDesc = prometheus.NewDesc("sandfleet_queue_weight",
		"The lane's weight on this worker (--queue NAME:WEIGHT): its share of the slots, and its priority.", []string{"queue"}, nil)
	laneUpDesc = prometheus.NewDesc("sandfleet_queue_stats_up",
		"1 if the queues' fleet-wide figures were read at this scrape, else 0 (they are then left out).", nil, nil)
)

func (laneCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{lanePendingDesc, laneInFlightDesc, laneOldestDesc, laneBusyDesc, laneWeightDesc, laneUpDesc} {
		ch <- d
	}
}

func (c laneCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	lanes, err := c.w.Lanes(ctx)
	up := 1.0
	if err != nil {
		up = 0
		slog.Warn("metrics: read the queues' figures", "err", err)
	}
	ch <- prometheus.MustNewConstMetric(laneUpDesc, prometheus.GaugeValue, up)
	now := time.Now()
	for _, l := range lanes {
		ch <- prometheus.MustNewConstMetric(laneBusyDesc, prometheus.GaugeValue, float64(l.Busy), l.Queue)
		ch <- prometheus.MustNewConstMetric(laneWeightDesc, prometheus.GaugeValue, float64(l.Weight), l.Queue)
		if err != nil {
			continue
		}
		age := 0.0
		if !l.OldestPending.IsZero() {
			age = max(0, now.Sub(l.OldestPending).Seconds())
		}
		ch <- prometheus.MustNewConstMetric(lanePendingDesc, prometheus.GaugeValue, float64(l.Pending), l.Queue)
		ch <- prometheus.MustNewConstMetric(laneInFlightDesc, prometheus.GaugeValue, float64(l.InFlight), l.Queue)
		ch <- prometheus.MustNewConstMetric(laneOldestDesc, prometheus.GaugeValue, age, l.Queue)
	}
}
