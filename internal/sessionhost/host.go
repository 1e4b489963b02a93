// Package sessionhost is a worker's side of sessions (pkg/sessions): it
// takes creates while it has room, starts each session's sandbox, answers
// the session's subjects, records it in the SESSIONS bucket, and ends it
// when it is deleted, idle past its timeout, at its maximum lifetime, or
// when the worker stops.
//
// Session capacity is the host's own (Config.Max), apart from the
// worker's job slots: sessions never take a job's slot, and jobs never
// take a session's.
package sessionhost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/sessionwire"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// Host serves sessions on one worker.
type Host struct {
	cfg   Config
	nc    *nats.Conn
	kv    jetstream.KeyValue
	start Starter
	log   *slog.Logger

	mu        sync.Mutex
	live      map[string]*live
	starting  int
	create    *nats.Subscription // nil while the host is full
	closed    bool
	admitting sync.Mutex     // one admission at a time (caps.go)
	pending   map[string]int // creates admitted whose record is not written yet, by owner's and tenant's keys
	ended     []*endedCells  // ended sessions' histories, oldest first (cells.go)
	wg        sync.WaitGroup
	ready     chan struct{} // closed once creates reach the host

	rateMu sync.Mutex
	rates  map[string]*bucket // each tenant's checkpoint bytes (ckrate.go)
}

// live is a session the host holds.
type live struct {
	key   string // its record's (sessionwire.Key)
	info  sessions.Info
	sb    Sandbox
	sub   *nats.Subscription
	lim   limits.Limits
	calls chan struct{}
	ptys  *relays // its terminals (pty.go)
	conns *relays // its connections (conn.go)

	mu       sync.Mutex
	active   time.Time // the last call
	recorded time.Time // when the record's ActiveAt was last written
	ended    bool
	answers  *answerCache
	cells    *cellLog
	kvRev    uint64 // the record's KV revision as last written: written by compare-and-swap on it

	recMu sync.Mutex // one write of the record at a time
	ck    checkpointing
}

// EnsureBucket creates the SESSIONS bucket, or updates its settings.
func EnsureBucket(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	return js.CreateOrUpdateKeyValue(ctx, sessionwire.BucketConfig(sessions.Bucket))
}

// New returns a host; Run serves.
func New(ctx context.Context, js jetstream.JetStream, start Starter, cfg Config) (*Host, error) {
	cfg.setDefaults()
	kv, err := EnsureBucket(ctx, js)
	if err != nil {
		return nil, fmt.Errorf("sessions: bucket %s: %w", sessions.Bucket, err)
	}
	return &Host{cfg: cfg, nc: js.Conn(), kv: kv, start: start, log: cfg.Logger, live: map[string]*live{},
		pending: map[string]int{}, ready: make(chan struct{})}, nil
}

// Ready is closed once Run listens and the server has its subscription:
// a create made after it reaches this host (until it is full).
func (h *Host) Ready() <-chan struct{} { return h.ready }

// Run serves until ctx ends, then ends every session the host holds.
func (h *Host) Run(ctx context.Context) error {
	h.migrate(ctx)
	h.markLost(ctx)
	h.mu.Lock()
	err := h.listenLocked()
	h.mu.Unlock()
	if err != nil {
		return err
	}
	// Said once creates can reach the host (the server has the
	// subscription): a test, or an operator, that waits for it may create
	// at once.
	_ = h.nc.Flush()
	close(h.ready)
	h.log.Info("serving sessions", "max", h.cfg.Max)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			h.shutdown()
			return nil
		case now := <-tick.C:
			h.expire(now)
		}
	}
}

// markLost records the sessions an earlier run of this worker held as
// lost: their sandboxes ended with it (the reaper removes what is left).
// A persistent session that has something to resume from is left as it
// is: its next call finds no one answering and resumes it, on this worker
// or another, as when any worker is lost.
func (h *Host) markLost(ctx context.Context) {
	keys, err := h.kv.ListKeys(ctx)
	if err != nil {
		return
	}
	defer keys.Stop()
	for k := range keys.Keys() {
		e, err := h.kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var info sessions.Info
		if json.Unmarshal(e.Value(), &info) != nil || info.Worker != h.cfg.Worker || info.Status != sessions.StatusRunning {
			continue
		}
		if h.resumable(ctx, &info) {
			h.log.Info("a persistent session of this worker's earlier run resumes at its next call", "session_id", k)
			continue
		}
		if h.endLost(ctx, k, &info, e.Revision()) == nil {
			h.log.Info("a session of this worker's earlier run is lost", "session_id", k)
		}
	}
}

// resumable reports whether a session whose sandbox is gone can start
// again: it persists, and has a checkpoint, or a workspace it names that
// holds a revision.
func (h *Host) resumable(ctx context.Context, info *sessions.Info) bool {
	switch {
	case !info.Persist || h.cfg.Workspaces == nil:
		return false
	case info.Checkpoint != nil:
		return true
	}
	heads, _, err := h.cfg.Workspaces(ctx, info.Tenant)
	if err != nil {
		return true // not known now: the resume finds out
	}
	e, err := heads.Get(ctx, info.Workspace)
	if err != nil {
		return !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted)
	}
	head, err := jobs.DecodeWorkspaceHead(info.Workspace, e.Value())
	return err == nil && head.Revision > 0
}

// endLost records a session ended as lost under its record's key, by
// compare-and-swap on rev.
func (h *Host) endLost(ctx context.Context, key string, info *sessions.Info, rev uint64) error {
	now := time.Now().UTC()
	info.Status, info.EndReason, info.EndedAt = sessions.StatusEnded, sessions.EndLost, &now
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	_, err = h.kv.Update(ctx, key, b, rev)
	return err
}

// Stats are the host's counts: sessions running, starting, and its
// capacity.
type Stats struct {
	Live, Starting, Max int
}

// Stats returns the host's counts.
func (h *Host) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Stats{Live: len(h.live), Starting: h.starting, Max: h.cfg.Max}
}

// listenLocked takes creates while the host has room, and stops taking
// them while it has none: a create then goes to another worker.
func (h *Host) listenLocked() error {
	room := !h.closed && len(h.live)+h.starting < h.cfg.Max
	switch {
	case room && h.create == nil:
		sub, err := h.nc.QueueSubscribe(sessions.SubjectCreate, sessions.QueueGroup, h.onCreate)
		if err != nil {
			return fmt.Errorf("sessions: listen for creates: %w", err)
		}
		h.create = sub
	case !room && h.create != nil:
		_ = h.create.Unsubscribe()
		h.create = nil
	}
	return nil
}

func answer(msg *nats.Msg, result any, err error) {
	var a sessionwire.Answer
	if err != nil {
		e := sessionapi.AsError(err)
		if e == nil {
			e = sessionapi.Errorf(sessionapi.ErrFailed, "%v", err)
		}
		a.Error = e
	} else if result != nil {
		b, merr := json.Marshal(result)
		if merr != nil {
			a.Error = sessionapi.Errorf(sessionapi.ErrFailed, "encode the answer: %v", merr)
		} else {
			a.Result = b
		}
	}
	data, _ := json.Marshal(a)
	_ = msg.Respond(data)
}

func (h *Host) onCreate(msg *nats.Msg) {
	var call sessionwire.Call
	if err := json.Unmarshal(msg.Data, &call); err != nil {
		answer(msg, nil, sessionapi.Errorf(sessionapi.ErrInvalid, "not a call: %v", err))
		return
	}
	h.mu.Lock()
	if h.closed || len(h.live)+h.starting >= h.cfg.Max {
		h.mu.Unlock()
		answer(msg, nil, sessionapi.Errorf(sessionapi.ErrFull, "worker %s holds its %d sessions", h.cfg.Worker, h.cfg.Max))
		return
	}
	h.starting++
	_ = h.listenLocked()
	h.mu.Unlock()
	h.wg.Go(func() {
		info, err := h.createSession(call)
		h.mu.Lock()
		h.starting--
		_ = h.listenLocked()
		h.mu.Unlock()
		answer(msg, info, err)
	})
}

// spec checks a create's spec against the worker's presets and caps.
func (h *Host) spec(call sessionwire.Call) (sessions.Spec, limits.Limits, time.Duration, time.Duration, error) {
	var spec sessions.Spec
	fail := func(format string, args ...any) (sessions.Spec, limits.Limits, time.Duration, time.Duration, error) {
		return spec, limits.Limits{}, 0, 0, sessionapi.Errorf(sessionapi.ErrInvalid, format, args...)
	}
	if len(call.Body) > 0 {
		dec := json.NewDecoder(strings.NewReader(string(call.Body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			return fail("not a session spec: %v", err)
		}
	}
	if spec.Image == "" {
		spec.Image = "python"
	}
	if !h.cfg.Images(spec.Tenant, spec.Image) {
		return fail("image: unknown preset %q", spec.Image)
	}
	lim, err := h.cfg.Limits(spec.Tenant, spec.Image, spec.Limits)
	if err != nil {
		return fail("%v", err)
	}
	idle, life := spec.IdleTimeout.D(), spec.MaxLifetime.D()
	if idle == 0 {
		idle = sessions.DefaultIdleTimeout
	}
	if life == 0 {
		life = min(sessions.DefaultMaxLifetime, h.cfg.MaxLifetime)
	}
	capped := func(cap, format string, args ...any) (sessions.Spec, limits.Limits, time.Duration, time.Duration, error) {
		return spec, limits.Limits{}, 0, 0, sessionapi.CapErrorf(cap, format, args...)
	}
	if life > h.cfg.MaxLifetime {
		return capped(sessionapi.CapMaxLifetime, "max_lifetime: %s is over the cap of %s (the worker's --session-max-lifetime)", life, h.cfg.MaxLifetime)
	}
	if idle > h.cfg.MaxIdleTimeout {
		return capped(sessionapi.CapIdleTimeout, "idle_timeout: %s is over the cap of %s (the worker's --session-max-idle)", idle, h.cfg.MaxIdleTimeout)
	}
	if idle > life {
		idle = life
	}
	if err := sessions.ValidLabels(spec.Labels); err != nil {
		return spec, limits.Limits{}, 0, 0, err
	}
	if spec.Persist {
		if err := sessions.ValidRecordEnv(spec.Env); err != nil {
			return spec, limits.Limits{}, 0, 0, err
		}
	}
	return spec, lim, idle, life, nil
}

func (h *Host) createSession(call sessionwire.Call) (*sessions.Info, error) {
	spec, lim, idle, life, err := h.spec(call)
	if err != nil {
		return nil, err
	}
	resuming := ""
	if spec.From != nil && spec.From.Resume {
		resuming = spec.From.Session
	}
	release, err := h.admit(call, resuming)
	if err != nil {
		return nil, err
	}
	defer release()
	if spec.From != nil {
		return h.createFrom(call, spec)
	}
	id := "s-" + strings.ReplaceAll(uuid.Must(uuid.NewV7()).String(), "-", "")
	o := opening{key: sessionwire.Key(call.Tenant, call.Owner, id), info: sessions.Info{ID: id, Owner: call.Owner, Image: spec.Image, Limits: lim,
		IdleTimeout: limits.Duration(idle), MaxLifetime: limits.Duration(life), Labels: spec.Labels, Tenant: spec.Tenant},
		env: spec.Env, files: spec.Files}
	if spec.Persist || spec.Workspace != "" || spec.WorkspaceFrom != nil {
		if err := h.persistOpening(&o, spec); err != nil {
			return nil, err
		}
	}
	return h.open(o)
}

// opening is a session on its way to a sandbox: new, forked, or resumed.
type opening struct {
	key     string        // its record's key
	info    sessions.Info // its record, but for what the start fills in
	env     map[string]string
	files   map[string]string
	from    *source // the snapshot to restore, if any
	forked  *jobs.WorkspaceRef
	dirty   bool   // checkpoint at the first idle point: the files differ from the workspace's head
	kvRev   uint64 // a resume's: the record's revision it took
	prev    []byte // a resume's: the record as it was, put back if the start fails
	restore string // a resume's: why (sessions.Restored.Why)
}

// open starts the sandbox of o and serves it.
func (h *Host) open(o opening) (*sessions.Info, error) {
	id := o.info.ID
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ptys, conns := newRelays(h.nc, ptyKind), newRelays(h.nc, connKind)
	onEvent := func(ev *envelope.Event) {
		ptys.event(ev)
		conns.event(ev)
	}
	st := StartSpec{ID: id, Image: o.info.Image, Tenant: o.info.Tenant, Limits: o.info.Limits, Env: o.env, Files: o.files,
		Lifetime: o.info.MaxLifetime.D(), MaxOutput: min(int64(o.info.Limits.Output), sessionapi.MaxReplyOutput), OnEvent: onEvent}
	var rev int64
	if o.from != nil {
		snap, r, err := h.fetch(ctx, o.from)
		if err != nil {
			h.giveBack(ctx, o)
			return nil, err
		}
		defer snap.Close()
		st.Restore, rev = restoring(snap), r
	}
	sb, err := h.start(ctx, st)
	if err != nil {
		h.log.Warn("a session failed to start", "session_id", id, "error", err)
		h.giveBack(ctx, o)
		return nil, sessionapi.Errorf(sessionapi.ErrFailed, "start the session's sandbox: %v", err)
	}
	now := time.Now().UTC()
	info := o.info
	info.Status, info.Worker, info.ImageDigest = sessions.StatusRunning, h.cfg.Worker, sb.ImageID()
	info.ActiveAt, info.ExpiresAt, info.EndedAt, info.EndReason, info.PausedAt = now, now.Add(info.MaxLifetime.D()), nil, "", nil
	if info.CreatedAt.IsZero() {
		info.CreatedAt = now
	}
	if o.restore != "" {
		info.Restored = &sessions.Restored{Revision: rev, At: now, Why: o.restore}
	}
	if info.Persist {
		info.Env = o.env
	}
	l := &live{sb: sb, lim: info.Limits, ptys: ptys, conns: conns, calls: make(chan struct{}, h.cfg.MaxCalls), active: now, answers: newAnswerCache(64), cells: &cellLog{},
		key: o.key, info: info, kvRev: o.kvRev}
	l.ck.dirty, l.ck.forked = o.dirty, o.forked
	// Its calls are answered before the record says it runs: a caller
	// that reads the record finds a responder.
	sub, err := h.nc.Subscribe(sessions.Subject(id, "*"), func(msg *nats.Msg) { h.onCall(l, msg) })
	if err != nil {
		sb.Close(ctx)
		h.giveBack(ctx, o)
		return nil, sessionapi.Errorf(sessionapi.ErrFailed, "listen for the session's calls: %v", err)
	}
	l.sub = sub
	if err := h.record(ctx, l); err != nil {
		_ = sub.Unsubscribe()
		sb.Close(ctx)
		return nil, sessionapi.Errorf(sessionapi.ErrFailed, "record the session: %v", err)
	}
	h.mu.Lock()
	h.live[id] = l
	h.mu.Unlock()
	h.wg.Go(func() {
		<-sb.Done()
		why := sb.Why()
		reason := sessions.EndLost
		if why == "lifetime" {
			reason = sessions.EndLifetime
		}
		h.end(l, reason) // a no-op when the host ended it itself
	})
	if o.restore != "" {
		h.cfg.Observer.Restored()
	} else {
		h.cfg.Observer.Created()
	}
	h.log.Info("session started", "session_id", id, "owner", info.Owner, "image", info.Image,
		"persist", info.Persist, "restored", o.restore != "")
	out := l.snapshot()
	return &out, nil
}

func (l *live) snapshot() sessions.Info {
	l.mu.Lock()
	defer l.mu.Unlock()
	info := l.info
	info.ActiveAt = l.active
	return info
}

// record writes the session's record by compare-and-swap on the revision
// it last wrote: errTakenOver when another wrote it meanwhile (a resume on
// another worker, after this one stopped answering for a while).
func (h *Host) record(ctx context.Context, l *live) error {
	l.recMu.Lock()
	defer l.recMu.Unlock()
	info := l.snapshot()
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if len(b) > sessions.MaxRecordBytes {
		return fmt.Errorf("the record is %d bytes, over the limit of %d", len(b), sessions.MaxRecordBytes)
	}
	l.mu.Lock()
	prev := l.kvRev
	l.mu.Unlock()
	var rev uint64
	if prev == 0 {
		rev, err = h.kv.Create(ctx, l.key, b)
	} else {
		rev, err = h.kv.Update(ctx, l.key, b, prev)
	}
	if fleet.Raced(err) {
		return errTakenOver
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.kvRev, l.recorded = rev, info.ActiveAt
	l.mu.Unlock()
	return nil
}
