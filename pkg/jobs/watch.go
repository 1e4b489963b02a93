package jobs

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/shorten"
)

// ErrWatchClosed: a watch on RESULTS ended without its reader stopping it
// or its context ending (the server or the connection went away).
var ErrWatchClosed = errors.New("result watch closed")

// ResultsWatch delivers the results stored in RESULTS after it was opened
// (WatchResults), in the order they were stored: every job's, or those of
// the IDs it was opened for. Stop it when done.
type ResultsWatch struct {
	w jetstream.KeyWatcher
	// A tenant's (tenantAccess.watchResults), instead of w: a
	// subscription to its own keys, the IDs it keeps (none: every one),
	// and what it checks to know it missed nothing.
	c          *Client
	tenant     string
	sub        *nats.Subscription
	ids        map[string]bool
	reconnects uint64
}

// StoredResult is a result as a ResultsWatch delivers it: still encoded,
// so that a reader of every job's results decodes only the ones it wants.
type StoredResult struct {
	ID   string // the job's ID: the key the result is stored under
	Data []byte // the result as stored
}

// Decode parses the result (DecodeStoredResult).
func (s StoredResult) Decode() (*Result, error) { return DecodeStoredResult(s.ID, s.Data) }

// WatchResults opens a watch on the results stored from now on: of the
// jobs ids, or of every job when ids is empty. Results stored before are
// not delivered: open the watch first, then look up (Get) or publish, and
// each result is either found or delivered. One watch of a whole batch
// costs the server one consumer instead of one per job. A tenant's client
// watches its own results only (ids of another tenant are invalid).
func (c *Client) WatchResults(ctx context.Context, ids ...string) (*ResultsWatch, error) {
	for _, id := range ids {
		if !ValidID(id) {
			return nil, invalid("id %q must match [A-Za-z0-9_-]{1,128}", shorten.Text(id, 140))
		}
		if !c.acc.reaches(TenantOf(id)) {
			return nil, invalid("id %q is not tenant %s's", shorten.Text(id, 140), c.Tenant())
		}
	}
	return c.acc.watchResults(ctx, ids)
}

// watchResults for the fleet's client: a watch of RESULTS.
func (a *fleetAccess) watchResults(ctx context.Context, ids []string) (*ResultsWatch, error) {
	// WatchFiltered writes the bucket's prefix into the slice it is given.
	w, err := a.st.Results.WatchFiltered(ctx, slices.Clone(ids), jetstream.UpdatesOnly())
	if err != nil {
		return nil, fmt.Errorf("watch results: %w", err)
	}
	return &ResultsWatch{w: w}, nil
}

// Next blocks until the next result is stored, and returns it. It returns
// ctx's error when ctx is done first, and ErrWatchClosed when the watch
// ended.
func (rw *ResultsWatch) Next(ctx context.Context) (StoredResult, error) {
	if rw.sub != nil {
		return rw.nextTenant(ctx)
	}
	e, err := nextPut(ctx, rw.w)
	if err != nil {
		return StoredResult{}, err
	}
	return StoredResult{ID: e.Key(), Data: e.Value()}, nil
}

// Stop closes the watch.
func (rw *ResultsWatch) Stop() error {
	if rw.sub != nil {
		return rw.sub.Unsubscribe()
	}
	return rw.w.Stop()
}

// watchResults is WatchResults for a tenant: a subscription to the
// tenant's keys' subjects, which the workers' puts are published on, and
// no consumer, for the reasons of keyWatch. A delivery names the key, and
// the value is read from RESULTS by a direct get: a put the stream refused
// (a second result of a job) reaches the subscription too, and the first
// stored is the one that counts. A subscription delivers at most once, so
// a reconnect or a message dropped for a slow reader ends the watch with
// ErrWatchClosed: a result may have been missed, and the caller looks up
// what it still waits for.
func (a *tenantAccess) watchResults(ctx context.Context, ids []string) (*ResultsWatch, error) {
	nc := a.c.js.Conn()
	sub, err := nc.SubscribeSync(kvSubject(fleet.ResultsBucket, a.name+".*"))
	if err != nil {
		return nil, fmt.Errorf("watch results: %w", err)
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("watch results: %w", err)
	}
	rw := &ResultsWatch{c: a.c, tenant: a.name, sub: sub, reconnects: nc.Stats().Reconnects}
	if len(ids) > 0 {
		rw.ids = map[string]bool{}
		for _, id := range ids {
			rw.ids[id] = true
		}
	}
	return rw, nil
}

func (rw *ResultsWatch) nextTenant(ctx context.Context) (StoredResult, error) {
	prefix := kvSubject(fleet.ResultsBucket, "")
	for {
		m, err := rw.sub.NextMsgWithContext(ctx)
		switch {
		case ctx.Err() != nil:
			return StoredResult{}, ctx.Err()
		case err != nil:
			return StoredResult{}, fmt.Errorf("watch results: %w: %w", ErrWatchClosed, err)
		}
		if dropped, _ := rw.sub.Dropped(); dropped > 0 || rw.c.js.Conn().Stats().Reconnects != rw.reconnects {
			return StoredResult{}, fmt.Errorf("watch results: %w: a result may have been missed (reconnected, or a slow reader)", ErrWatchClosed)
		}
		id := strings.TrimPrefix(m.Subject, prefix)
		// A push consumer's delivery keeps its stream's subject and
		// carries an ack subject: not a put on a key.
		if !strings.HasPrefix(m.Subject, prefix) || strings.HasPrefix(m.Reply, "$JS.ACK.") || isKVDelete(m.Header) ||
			TenantOf(id) != rw.tenant || (rw.ids != nil && !rw.ids[id]) {
			continue
		}
		data, err := rw.stored(ctx, m.Subject)
		if err != nil {
			return StoredResult{}, err
		}
		if data == nil {
			continue // refused by the stream, and nothing stored
		}
		return StoredResult{ID: id, Data: data}, nil
	}
}

// stored reads what RESULTS holds on subject, just published: the
// subscription may have its message before the stream has stored it, so a
// miss is read again, for a second at most; nil when nothing is stored.
func (rw *ResultsWatch) stored(ctx context.Context, subject string) ([]byte, error) {
	for wait := 5 * time.Millisecond; ; wait *= 2 {
		m, err := rw.c.directGet(ctx, "KV_"+fleet.ResultsBucket, subject)
		switch {
		case err == nil:
			return m.Data, nil
		case !errors.Is(err, errNoMessage):
			return nil, fmt.Errorf("watch results: %w", err)
		case wait > time.Second:
			return nil, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// nextPut returns the next value stored under a key w watches, skipping
// the end of the initial values.
func nextPut(ctx context.Context, w jetstream.KeyWatcher) (jetstream.KeyValueEntry, error) {
	for {
		if e, err := nextEntry(ctx, w); err != nil || e != nil {
			return e, err
		}
	}
}

// nextEntry returns the next value stored under a key w watches, or nil
// at the end of the initial values, skipping deleted or expired keys.
func nextEntry(ctx context.Context, w jetstream.KeyWatcher) (jetstream.KeyValueEntry, error) {
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				return nil, ErrWatchClosed
			}
			if e != nil && e.Operation() != jetstream.KeyValuePut {
				continue
			}
			return e, nil
		}
	}
}

// keyWatch watches RESULTS[id] without a consumer: a subscription to the
// key's subject, on which the worker's put is published, wakes it, and a
// get (a direct get) reads the value. A consumer would be made through the
// JetStream API, whose one queue any tenant can flood, and count against
// the stream's consumers; a subscription and a direct get are neither (see
// tenant.go). What the subscription delivers is only a signal: the value
// is the stream's, so a message pushed onto the subject by anyone else (a
// push consumer's delivery) forges nothing.
func (c *Client) keyWatch(ctx context.Context, id string) (*ResultWatch, error) {
	nc := c.js.Conn()
	wake := make(chan *nats.Msg, 1)
	sub, err := nc.Subscribe(kvSubject(fleet.ResultsBucket, id), func(m *nats.Msg) {
		select {
		case wake <- m:
		default: // one wake-up pending is as good as many
		}
	})
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", id, err)
	}
	// A subscription the server refuses is only reported asynchronously;
	// the flush's round trip makes it take effect before the get below,
	// so that a result stored after that get wakes it.
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := nc.FlushWithContext(fctx); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("watch %s: %w", id, err)
	}
	tw := &keyResultWatch{c: c, sub: sub, wake: wake, id: id, reconnects: nc.Stats().Reconnects}
	switch r, err := c.Get(ctx, id); {
	case err == nil:
		tw.first = r
	case !errors.Is(err, ErrNotFound):
		_ = sub.Unsubscribe()
		return nil, err
	}
	return &ResultWatch{kw: tw}, nil
}

// keyRecheck is how often a result watch checks that it missed
// nothing: a subscription delivers at most once, and not while the
// connection is down, so after a reconnect or a dropped message the stored
// value is read again, and every keyRereads checks in any case: a server
// whose permissions predate the subscription refuses it, and says so only
// in an asynchronous error, and in a cluster the subscription's interest
// reaches the other servers a moment after the flush, so a put on one of
// them in between is not forwarded.
const (
	keyRecheck = time.Second
	keyRereads = 5
)

// keyResultWatch is a ResultWatch (keyWatch).
type keyResultWatch struct {
	c          *Client
	sub        *nats.Subscription
	wake       chan *nats.Msg
	id         string
	first      *Result // the value stored when the watch opened
	reconnects uint64  // the connection's, when last checked
	dropped    int     // the subscription's, when last checked
	checks     int     // since the stored value was last read
}

func (tw *keyResultWatch) next(ctx context.Context) (*Result, error) {
	if r := tw.first; r != nil {
		tw.first = nil
		return r, nil
	}
	tick := time.NewTicker(keyRecheck)
	defer tick.Stop()
	// A put reaches the subscription as the stream gets it, which may be
	// before the stream has stored it: a wake-up that finds nothing reads
	// again, after retry (doubling up to a second), and then waits anew.
	var retry time.Duration
	again := time.NewTimer(time.Hour)
	again.Stop()
	defer again.Stop()
	for {
		if retry > 0 {
			again.Reset(retry)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tw.wake:
			retry = 0
		case <-again.C:
		case <-tick.C:
			if !tw.sub.IsValid() {
				return nil, fmt.Errorf("watch %s: %w", tw.id, ErrWatchClosed)
			}
			dropped, _ := tw.sub.Dropped()
			n := tw.c.js.Conn().Stats().Reconnects
			if tw.checks++; n == tw.reconnects && dropped == tw.dropped && tw.checks < keyRereads {
				continue
			}
			tw.reconnects, tw.dropped = n, dropped
		}
		tw.checks = 0
		r, err := tw.c.Get(ctx, tw.id)
		switch {
		case err == nil:
			return r, nil
		case errors.Is(err, ErrNotFound):
			// Not stored yet, or a delete, or a wake-up that was no put.
			switch {
			case retry == 0:
				retry = 5 * time.Millisecond
			case retry < time.Second:
				retry *= 2
			default:
				retry = 0
			}
			continue
		case ctx.Err() != nil:
			return nil, ctx.Err()
		}
		return nil, err
	}
}

func (tw *keyResultWatch) stop() error { return tw.sub.Unsubscribe() }
