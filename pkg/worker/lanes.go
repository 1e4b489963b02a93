package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// Priority lanes. A worker serves one or more queues, each a lane with a
// weight (worker --queue interactive:10 --queue batch:1). The heaviest
// lane has the highest priority. Who gets a free slot:
//
//   - Only a lane with work. A slot never waits on an empty lane while
//     another lane has work for it: slots that wait for work hold a pull
//     on an empty lane, and are called back (the pull withdrawn) as soon
//     as a fetch finds more work than there are free slots.
//   - Among the lanes with work, the one that would finish its next slot
//     first in virtual time, each slot costing a lane 1/weight (weighted
//     fair queueing); the heavier lane on a tie. With 10:1 and both lanes
//     full the slots go ten to interactive, one to batch, and so on: a
//     lower lane is never starved, it gets weight/total of the slots (one
//     in eleven here) whatever arrives above it.
//   - A lane coming back from idle starts at the current virtual time:
//     idleness earns no credit, so it cannot take a run of slots from the
//     others, and the heavier lane's first job after idle goes first.
//
// So an interactive job submitted while batch work saturates the fleet
// starts at the next slot that frees on any worker, or, when that slot
// is batch's one in eleven on its worker, the one after.
//
// The fetching keeps the single-queue guarantees: a slot is taken before
// every fetch, a fetch asks for at most as many messages as slots are
// held for it (FetchNoWait, answered at once), a pull left waiting at the
// server (one message, one slot held for it) exists only on a lane found
// empty, and a stop or the executor going down withdraws every pull
// before the worker goes on (see pullWhileUp).

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

// arrival is what a waiting pull's Next returned.
type arrival struct {
	l   *lane
	it  jetstream.MessagesContext
	msg jetstream.Msg
	err error
}

// fetcher is one pullWhileUp: the slots it holds, the pulls it has waiting.
type fetcher struct {
	w           *Worker
	stop, force context.Context
	slots       chan struct{}
	jobsWG      *sync.WaitGroup

	held     int // slots taken and not yet given to a job or a waiting pull
	nWaiting int
	arrivals chan arrival   // from the waiting pulls, at most one per lane
	waiters  sync.WaitGroup // the waiting pulls' goroutines, and hand-backs
	handed   int
}

// pullWhileUp serves free slots until stop, the executor going down or a
// failed pull, and returns how many messages it handed out. It takes
// every free slot, then fetches at most that many messages among the
// lanes (FetchNoWait: what is there now, answered at once, in one request
// per lane). A slot left over when every lane is empty waits in a pull of
// one message on an empty lane (Consumer.Messages, which pulls only while
// a slot waits in Next), one per lane, heaviest first; the other slots
// left over stay held until a waiting pull brings work.
//
// When a fetch finds more work than there are free slots, or a waiting
// pull brings a job while no other slot is free to look for more, the
// waiting pulls are withdrawn: their iterators drained, their slots back
// for the lane that has work (or back in a pull, if it had no more). On the way out every iterator is drained, neither
// stopped nor left to expire. Draining unsubscribes its inbox and flushes,
// so the server, which hands nothing to a pull request whose subscriber
// is gone, has seen the unsubscribe when Next reports the iterator
// closed; a message it sent before still comes out of Next, and is run
// with the slot that waited for it. A stopped iterator would drop that
// message, leaving it unacked until AckWait; a pull left to expire would
// keep taking work while the worker stops, a forced job's nak included
// (issue 11: naked back into its own worker's pulls as attempts 2 and 3).
func (w *Worker) pullWhileUp(stop, force context.Context, slots chan struct{}, jobsWG *sync.WaitGroup) (int, error) {
	f := &fetcher{w: w, stop: stop, force: force, slots: slots, jobsWG: jobsWG,
		arrivals: make(chan arrival, len(w.lanes))}
	defer f.close()
	down := w.health.downCh()
	for {
		var take chan<- struct{}
		if f.nWaiting < len(w.lanes) {
			take = slots // a lane without a waiting pull could use a slot
		}
		brought := false // a waiting pull brought a job: its lane may have more
		select {
		case take <- struct{}{}:
			f.held++
		case a := <-f.arrivals:
			if err := f.arrived(a); err != nil {
				return f.handed, err
			}
			brought = a.err == nil
		case <-stop.Done():
			return f.handed, nil
		case <-down:
			return f.handed, nil
		}
		// A free slot and a stop may both be ready: select picks at random.
		if stop.Err() != nil {
			return f.handed, nil
		}
		f.held += takeFree(slots)
		if f.held > 0 {
			if err := f.round(); err != nil {
				return f.handed, err
			}
		} else if brought && f.nWaiting > 0 {
			// No slot to look for more with: call the waiting ones back.
			f.withdraw()
		}
	}
}

// takeFree takes the slots that are free now, without waiting.
func takeFree(slots chan struct{}) int {
	n := 0
	for {
		select {
		case slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
}

// round gives the held slots to the lanes without a waiting pull, in the
// order the scheduler plans; what no lane has work for waits in pulls.
func (f *fetcher) round() error {
	lanes := f.w.lanes
	if len(lanes) == 1 && f.held == 1 && !lanes[0].waiting {
		// One slot, one lane: a waiting pull returns a job as soon as a
		// fetch would, and saves the request.
		return f.wait(lanes[0])
	}
	var cands []*lane
	for _, l := range lanes {
		if !l.waiting {
			cands = append(cands, l)
		}
	}
	f.w.sched.rejoin(cands)
	for f.held > 0 && len(cands) > 0 {
		plan := f.w.sched.plan(cands, f.held)
		var still []*lane // lanes that gave all they were asked for, or were not asked
		for i, l := range cands {
			if plan[i] == 0 {
				still = append(still, l)
				continue
			}
			msgs, err := f.w.fetchNow(l, plan[i])
			if err != nil {
				return err
			}
			f.w.sched.grant(l, len(msgs))
			for _, m := range msgs {
				f.run(l, m)
			}
			if len(msgs) < plan[i] {
				l.empty = true
			} else {
				still = append(still, l)
			}
		}
		cands = still
	}
	if f.held == 0 {
		if len(cands) > 0 && f.nWaiting > 0 {
			f.withdraw() // more work than slots: call the waiting slots back
		}
		return nil
	}
	// Every lane without a waiting pull is empty.
	for _, l := range lanes {
		if f.held == 0 {
			break
		}
		if !l.waiting {
			if err := f.wait(l); err != nil {
				return err
			}
		}
	}
	return nil
}

// run hands msg of lane l to a held slot.
func (f *fetcher) run(l *lane, msg jetstream.Msg) {
	f.held--
	f.handed++
	f.w.busy.Add(1)
	l.busy.Add(1)
	f.jobsWG.Go(func() {
		defer func() {
			l.busy.Add(-1)
			f.w.busy.Add(-1)
			<-f.slots
		}()
		f.w.handle(f.stop, f.force, msg)
	})
}

// wait gives a held slot to a pull that waits on lane l.
func (f *fetcher) wait(l *lane) error {
	if l.it == nil {
		it, err := l.cons.Messages(jetstream.PullMaxMessages(1), jetstream.PullExpiry(max(f.w.cfg.FetchWait, time.Second)))
		if err != nil {
			return err
		}
		l.it = it
	}
	f.held--
	f.nWaiting++
	l.waiting = true
	it := l.it
	f.waiters.Go(func() {
		msg, err := it.Next()
		f.arrivals <- arrival{l: l, it: it, msg: msg, err: err}
	})
	return nil
}

// withdraw drains the iterators of the waiting pulls; their slots come
// back through arrived.
func (f *fetcher) withdraw() {
	for _, l := range f.w.lanes {
		if l.waiting && !l.withdrawn {
			l.withdrawn = true
			l.it.Drain()
		}
	}
}

// arrived takes back the slot of a waiting pull, and runs its job if it
// brought one.
func (f *fetcher) arrived(a arrival) error {
	l := a.l
	l.waiting = false
	f.nWaiting--
	f.held++
	withdrawn := l.withdrawn
	if withdrawn {
		l.withdrawn = false
		l.it = nil // drained: the next wait opens another
	}
	if a.err == nil {
		f.w.sched.grant(l, 1)
		f.run(l, a.msg)
		if withdrawn {
			f.waiters.Go(func() { f.w.handBack(a.it) })
		}
		return nil
	}
	if withdrawn && errors.Is(a.err, jetstream.ErrMsgIteratorClosed) {
		return nil
	}
	return a.err
}

// close withdraws every pull and gives back every slot but those of the
// jobs it started: a message a withdrawn pull still brings is run.
func (f *fetcher) close() {
	for _, l := range f.w.lanes {
		if l.it != nil && !l.withdrawn {
			l.it.Drain()
		}
	}
	for f.nWaiting > 0 {
		a := <-f.arrivals
		a.l.waiting = false
		f.nWaiting--
		f.held++
		if a.err == nil {
			f.w.sched.grant(a.l, 1)
			f.run(a.l, a.msg)
		}
	}
	f.waiters.Wait()
	for _, l := range f.w.lanes {
		if l.it != nil {
			f.w.handBack(l.it)
		}
		l.it, l.withdrawn = nil, false
	}
	for range f.held {
		<-f.slots
	}
	f.held = 0
}

// fetchNow pulls at most n messages of lane l that are there now, in one
// request the server answers at once: it leaves no request waiting.
func (w *Worker) fetchNow(l *lane, n int) ([]jetstream.Msg, error) {
	batch, err := l.cons.FetchNoWait(n)
	if err != nil {
		return nil, err
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if err := batch.Error(); err != nil && len(msgs) == 0 &&
		!errors.Is(err, nats.ErrTimeout) && !errors.Is(err, jetstream.ErrNoMessages) {
		return nil, err
	}
	return msgs, nil
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

// Lanes reads the statistics of every lane, heaviest first; before Run
// has set the topology up it returns the lanes with zero figures.
func (w *Worker) Lanes(ctx context.Context) ([]LaneStats, error) {
	if !w.setUp.Load() {
		out := make([]LaneStats, len(w.cfg.Queues))
		for i, l := range w.cfg.Queues {
			out[i].Lane = l
		}
		return out, nil
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
			jetstream.WithGetMsgSubject(jobs.SubjectPrefix+l.Queue+".>"))
		if err == nil {
			out[i].OldestPending = m.Time
		} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
			errs = append(errs, fmt.Errorf("queue %s: oldest job: %w", l.Queue, err))
		}
	}
	return out, errors.Join(errs...)
}
