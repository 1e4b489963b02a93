package gateway

import (
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// replies delivers the results of the jobs this gateway submits with a
// wait. Each such job names a subject under the gateway's own inbox as its
// reply_to, and one subscription takes every reply: a waiting submit costs
// no JetStream consumer of its own (a KV watch is two API calls more per
// job), and the gateway receives only its own jobs' results.
//
// The reply is best effort, as reply_to always is: the worker publishes it
// once, after storing the result. A caller whose reply does not come
// (a reconnect, or an ID whose duplicate was dropped by the stream) finds
// the result in RESULTS when its wait ends.
type replies struct {
	prefix  string // <inbox>.
	sub     *nats.Subscription
	mu      sync.Mutex
	waiting map[string][]chan *jobs.Result
}

func newReplies(nc *nats.Conn) (*replies, error) {
	r := &replies{prefix: nc.NewRespInbox() + ".", waiting: map[string][]chan *jobs.Result{}}
	// ">": a tenant's job ID is two tokens, <tenant>.<id>.
	sub, err := nc.Subscribe(r.prefix+">", r.deliver)
	if err != nil {
		return nil, err
	}
	r.sub = sub
	return r, nil
}

// subject is the reply_to of a job: the gateway's inbox and the job's ID.
func (r *replies) subject(id string) string { return r.prefix + id }

// expect returns the channel the result of id will arrive on. Call done
// when no longer waiting.
func (r *replies) expect(id string) (result <-chan *jobs.Result, done func()) {
	ch := make(chan *jobs.Result, 1)
	r.mu.Lock()
	r.waiting[id] = append(r.waiting[id], ch)
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		list := r.waiting[id]
		for i, c := range list {
			if c == ch {
				list = append(list[:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(r.waiting, id)
		} else {
			r.waiting[id] = list
		}
	}
}

func (r *replies) deliver(m *nats.Msg) {
	id := strings.TrimPrefix(m.Subject, r.prefix)
	res, err := jobs.DecodeReply(m, r.subject(id))
	if err != nil || res.ID != id {
		return // not a worker's reply, or not a result of the job the subject names
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ch := range r.waiting[id] {
		select {
		case ch <- res:
		default: // already has it (a reply published twice)
		}
	}
}

func (r *replies) close() { _ = r.sub.Unsubscribe() }
