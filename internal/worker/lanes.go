package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Lane is a queue a worker serves and its weight.
type Lane struct {
	Queue string
	// Weight is the lane's share of the slots when several lanes have
	// work, and its priority: the heaviest lane is served first. Default 1.
	Weight int
}

// MaxWeight bounds a lane's weight: a share finer than 1/1000 would not
// be seen with the slots a worker has.
const MaxWeight = 1000

// ParseLane reads NAME or NAME:WEIGHT (worker --queue).
func ParseLane(s string) (Lane, error) {
	name, w, hasWeight := strings.Cut(s, ":")
	l := Lane{Queue: name, Weight: 1}
	if hasWeight {
		n, err := strconv.Atoi(w)
		if err != nil {
			return Lane{}, fmt.Errorf("queue %q: the weight after ':' must be a number", s)
		}
		l.Weight = n
	}
	if err := validLanes([]Lane{l}); err != nil {
		return Lane{}, err
	}
	return l, nil
}

func (l Lane) String() string { return l.Queue + ":" + strconv.Itoa(l.Weight) }

// lanesOf returns the lanes a configuration serves, heaviest first (stable:
// lanes of equal weight keep their order), weights defaulted.
func lanesOf(queue string, queues []Lane) []Lane {
	if len(queues) == 0 {
		if queue == "" {
			queue = jobs.DefaultQueue
		}
		return []Lane{{Queue: queue, Weight: 1}}
	}
	lanes := slices.Clone(queues)
	for i := range lanes {
		if lanes[i].Weight == 0 {
			lanes[i].Weight = 1
		}
	}
	slices.SortStableFunc(lanes, func(a, b Lane) int { return cmp.Compare(b.Weight, a.Weight) })
	return lanes
}

func validLanes(lanes []Lane) error {
	seen := map[string]bool{}
	for _, l := range lanes {
		switch {
		case !jobs.ValidQueue(l.Queue):
			return fmt.Errorf("queue %q must match [A-Za-z0-9_-]{1,64}", l.Queue)
		case l.Weight < 0 || l.Weight > MaxWeight:
			return fmt.Errorf("queue %s: weight %d is not within 1..%d", l.Queue, l.Weight, MaxWeight)
		case seen[l.Queue]:
			return fmt.Errorf("queue %s is given twice", l.Queue)
		}
		seen[l.Queue] = true
	}
	return nil
}

func laneNames(lanes []Lane) []string {
	s := make([]string, len(lanes))
	for i, l := range lanes {
		s[i] = l.String()
	}
	return s
}

// queueNames is the queue attribute of the worker's logs: the one queue,
// or the lanes separated by commas.
func queueNames(lanes []Lane) string {
	s := make([]string, len(lanes))
	for i, l := range lanes {
		s[i] = l.Queue
	}
	return strings.Join(s, ",")
}

// lane is a Lane at run time. Everything but busy belongs to the goroutine
// that fetches.
type lane struct {
	Lane
	cons jetstream.Consumer
	busy atomic.Int64 // slots running this lane's jobs

	stride int64 // virtual time a slot costs this lane: scale/Weight
	pass   int64 // virtual time at which the lane's last slot finished
	empty  bool  // the last fetch found the lane without more work

	it        jetstream.MessagesContext // of the current pullWhileUp, opened for a waiting pull
	waiting   bool                      // a slot waits in it.Next
	withdrawn bool                      // it was drained to get that slot back
}

// scale makes strides integers: 1/weight in units of 1/scale.
const scale = 1 << 20

func (w *Worker) ensureLanes(ctx context.Context) ([]*lane, error) {
	lanes := make([]*lane, len(w.cfg.Queues))
	for i, l := range w.cfg.Queues {
		cons, err := w.cfg.Topology.EnsureConsumer(ctx, w.js, l.Queue)
		if err != nil {
			return nil, err
		}
		lanes[i] = &lane{Lane: l, cons: cons, stride: scale / int64(l.Weight), empty: true}
	}
	return lanes, nil
}

// sched is the virtual clock of weighted fair queueing (see above).
type sched struct {
	vtime int64 // the latest finish of a slot granted: "now" for a lane that rejoins
}

// rejoin takes the lanes about to be asked for work as having work from
// now on: one found empty since it last had work starts again at the
// current virtual time. A lane that turns out empty is marked so by the
// fetcher, and rejoins again next time.
func (s *sched) rejoin(lanes []*lane) {
	for _, l := range lanes {
		if l.empty {
			l.pass = max(l.pass, s.vtime)
			l.empty = false
		}
	}
}

// plan splits n slots among cands (heaviest first, rejoined) as if each
// had work for all of them, without changing anything.
func (s *sched) plan(cands []*lane, n int) []int {
	pass := make([]int64, len(cands))
	for i, l := range cands {
		pass[i] = l.pass
	}
	got := make([]int, len(cands))
	for range n {
		best := 0
		for i := 1; i < len(cands); i++ {
			if pass[i]+cands[i].stride < pass[best]+cands[best].stride {
				best = i
			}
		}
		pass[best] += cands[best].stride
		got[best]++
	}
	return got
}

// grant records that lane l got n slots.
func (s *sched) grant(l *lane, n int) {
	if n == 0 {
		return
	}
	s.rejoin([]*lane{l})
	l.pass += int64(n) * l.stride
	s.vtime = max(s.vtime, l.pass)
}

// LaneStats is what a worker knows of one of its lanes: its own busy
// slots, and the queue's backlog across the fleet (the same figures from
// every worker of the queue: aggregate them with max, not sum).
type LaneStats struct {
	Lane
	// Busy is how many of this worker's slots run the lane's jobs.
	Busy int
	// Pending jobs are queued and never delivered; InFlight jobs are
	// delivered and not yet acknowledged (running, or held until their
	// lease expires).
	Pending  uint64
	InFlight int
	// OldestPending is when the oldest job never delivered was queued;
	// zero when there is none. A job handed back (nak) after a delivery
	// counts as in flight, not here.
	OldestPending time.Time
}

// ErrNotSetUp is Lanes' error before Run has set the topology up: the
// queues' figures were not read.
var ErrNotSetUp = errors.New("worker: the topology is not set up yet")

// Lanes reads the statistics of every lane, heaviest first; before Run
// has set the topology up it returns the lanes with this worker's figures
// only (no queue's), and ErrNotSetUp.
func (w *Worker) Lanes(ctx context.Context) ([]LaneStats, error) {
	if !w.setUp.Load() {
		out := make([]LaneStats, len(w.cfg.Queues))
		for i, l := range w.cfg.Queues {
			out[i].Lane = l
		}
		return out, ErrNotSetUp
	}
	out := make([]LaneStats, len(w.lanes))
	var errs []error
	for i, l := range w.lanes {
		out[i] = LaneStats{Lane: l.Lane, Busy: int(l.busy.Load())}
		info, err := l.cons.Info(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("queue %s: %w", l.Queue, err))
			continue
		}
		out[i].Pending, out[i].InFlight = info.NumPending, info.NumAckPending
		if info.NumPending == 0 {
			continue
		}
		// The consumer delivers in stream order: the first message of the
		// queue past its delivered sequence is the oldest never delivered.
		m, err := w.stores.Stream.GetMsg(ctx, info.Delivered.Stream+1,
			jetstream.WithGetMsgSubject(fleet.SubjectPrefix+l.Queue+".>"))
		if err == nil {
			out[i].OldestPending = m.Time
		} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
			errs = append(errs, fmt.Errorf("queue %s: oldest job: %w", l.Queue, err))
		}
	}
	return out, errors.Join(errs...)
}
