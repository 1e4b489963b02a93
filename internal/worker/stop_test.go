package worker_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A stop leaves no pull request of the worker outstanding, and a force then
// hands the job in flight back once (not three times: the stopping worker's
// own pulls used to take the naked job back, and it was naked again as attempt 2 and 3
// within milliseconds). FetchWait is 30 s and the lease a minute, so a
// pull left to expire, or a nak lost on the way out, would outlast every
// deadline below. Idle slots wait in a pull before the stop (NumWaiting);
// after it, none (NumWaiting 0) while the job still runs; when Run returns
// the server has had one nak (its advisory), the consumer has made one
// delivery in all, and another worker runs the job at once as attempt 2.
func TestStopLeavesNoPullOutstanding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		atOnce bool // stop and force together: SIGQUIT, or two signals in a row
	}{
		{name: "drain then force"},
		{name: "force at once", atOnce: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupWith(t, fleet.Topology{AckWait: time.Minute, MaxJobBytes: 64 << 10})
			cons, err := b.topo.EnsureConsumer(t.Context(), b.js, jobs.DefaultQueue)
			if err != nil {
				t.Fatal(err)
			}
			info := func() *jetstream.ConsumerInfo {
				t.Helper()
				ci, err := cons.Info(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				return ci
			}
			r := b.startWorker(t, worker.Config{ID: "stopping", Slots: 4, FetchWait: 30 * time.Second})
			if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "stuck", Image: "python", Code: "block"}); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 10*time.Second, "job running", func() bool { return b.exec.Running() == 1 })
			testutil.Eventually(t, 10*time.Second, "an idle slot waiting in a pull", func() bool { return info().NumWaiting > 0 })

			naks, err := b.nc.SubscribeSync(server.JSAdvisoryConsumerMsgNakPre + "." + fleet.StreamName + "." + fleet.ConsumerName(jobs.DefaultQueue))
			if err != nil {
				t.Fatal(err)
			}
			if err := b.nc.Flush(); err != nil {
				t.Fatal(err)
			}

			r.stop()
			if tc.atOnce {
				r.force()
			} else {
				testutil.Eventually(t, 5*time.Second, "no pull outstanding after the stop", func() bool { return info().NumWaiting == 0 })
				if _, err := b.client.Submit(t.Context(), &jobs.Job{ID: "later", Image: "python", Code: "print later"}); err != nil {
					t.Fatal(err)
				}
				if b.exec.Running() != 1 {
					t.Fatal("the job in flight ended before the force")
				}
				r.force()
			}
			r.Stop(t)
			// The server's nak advisory says it took the job back; a nak
			// lost on the way out would hold it for the 1 min lease.
			m, err := naks.NextMsg(2 * time.Second)
			if err != nil {
				t.Fatalf("no nak reached the server: %v", err)
			}
			var nak server.JSConsumerDeliveryNakAdvisory
			if err := json.Unmarshal(m.Data, &nak); err != nil || nak.Deliveries != 1 {
				t.Errorf("nak advisory %s: %v, want the first delivery's", m.Data, err)
			}
			ci := info()
			if ci.Delivered.Consumer != 1 || ci.NumRedelivered != 0 || ci.NumWaiting != 0 {
				t.Errorf("after the force: %d deliveries, %d redelivered, %d pulls waiting; want 1, 0, 0",
					ci.Delivered.Consumer, ci.NumRedelivered, ci.NumWaiting)
			}
			if n := b.exec.Runs("stuck"); n != 1 {
				t.Errorf("forced job ran %d times on the stopping worker, want 1", n)
			}

			b.startWorker(t, worker.Config{ID: "next"})
			testutil.Eventually(t, 10*time.Second, "the job redelivered at once", func() bool { return b.exec.Runs("stuck") == 2 && b.exec.Running() == 1 })
			res, err := b.client.Cancel(t.Context(), "stuck")
			if err != nil || res.Attempt != 2 || res.Worker != "next" {
				t.Errorf("redelivered job: %v %+v, want attempt 2 on next", err, res)
			}
			if n, _, _ := naks.Pending(); n != 0 {
				t.Errorf("%d more naks, want the job handed back once", n)
			}
			if !tc.atOnce {
				res, err := b.client.Wait(waitCtx(t), "later")
				if err != nil || res.Status != jobs.StatusSucceeded || res.Attempt != 1 || res.Worker != "next" {
					t.Errorf("job queued during the drain: %v %+v, want attempt 1 on next", err, res)
				}
			}
		})
	}
}
