package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The fetching under the lanes' rules (lanes.go): slots taken before
// every fetch, pulls left waiting only on empty lanes.

// lanePoll is how often slots waiting on some lanes are called back to
// look at the lanes without a pull: the most a job on such a lane waits
// while a slot is free.
const lanePoll = time.Second

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
// (a forced job was once naked back into its own worker's pulls as
// attempts 2 and 3).
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
		var poll <-chan time.Time
		if f.held == 0 && f.nWaiting > 0 && f.nWaiting < len(w.lanes) {
			// Fewer slots free than lanes: the waiting ones hold pulls on
			// the heaviest lanes only, and work arriving on another would
			// wait for a slot to free. Call them back now and then to
			// look at every lane.
			poll = time.After(lanePoll)
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
		case <-poll:
			f.withdraw()
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
