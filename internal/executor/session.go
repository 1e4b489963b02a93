package executor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/internal/archive"
	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// SessionSpec is what a session's sandbox is made of: the same preset,
// limits and hardening as a job's, but an agent in it instead of one
// command (envelope/session.go).
type SessionSpec struct {
	ID    string // the session's, for logs and the container's label
	Image string // a preset, or a template of Tenant's or the operator's
	// Tenant is the session's ("" for the operator's): its own templates
	// are found by Image, as its jobs' are, and no other tenant's.
	Tenant string
	Limits limits.Limits
	Env    map[string]string
	Files  map[string]string // written into the working directory first
	// Restore, if set, is a workspace's snapshot unpacked into the working
	// directory before Files, by the sandbox's agent with a job's rules.
	Restore *jobrun.Snapshot

	// Deadman is how long the sandbox's agent goes on without hearing
	// from the executor, which pings it every third of it: past it the
	// sandbox ends itself, so that one whose worker died does not
	// outlive it by more. Default 30 s.
	Deadman time.Duration
	// Lifetime ends the session that long after it started, inside the
	// sandbox too. Default 1 h.
	Lifetime time.Duration
	// MaxProcesses bounds its background processes. Default 32.
	MaxProcesses int
	// OutputLimit bounds what a command's reply carries of each stream.
	// Default (and at most) the limits' output.
	OutputLimit int64
	// OnEvent, if set, is told each piece of live output, from the
	// stream's goroutine: it must not block.
	OnEvent func(*envelope.Event)
}

// Session is a live session's sandbox: requests go to its agent, and
// replies come back signed. Its methods are safe for concurrent use.
type Session struct {
	e    *Executor
	s    *sandbox
	seal envelope.Seal
	log  *slog.Logger
	spec SessionSpec
	lim  limits.Limits

	writeMu sync.Mutex
	archMu  sync.Mutex // one Archive at a time

	netMu  sync.Mutex
	egress []limits.NetworkUse // once closed: what its sandbox carried

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan *envelope.Reply
	asm     *envelope.Assembler
	sink    *archiveSink // where the agent's FrameArchive frames go during an Archive

	ended     chan struct{} // the agent's trailer came, or the stream ended
	endedOnce sync.Once
	why       string // the trailer's reason, once ended
	stopPing  context.CancelFunc
	closeOnce sync.Once
	brokeOnce sync.Once
	lie       bool // a frame failed its check; the session ends as "broken"
}

// ErrSessionEnded is returned by Do once the session's sandbox is gone.
var ErrSessionEnded = errors.New("session ended")

// StartSession starts a session's sandbox (a warm one when the pool has
// one that fits) and hands it its envelope. The session is admitted as a
// job of its tenant is: the same presets and templates (its tenant's own
// among them), limits and env, and a template's sandbox runs its start
// and ready before the agent's envelope.
func (e *Executor) StartSession(ctx context.Context, spec SessionSpec) (*Session, error) {
	a, err := e.admission(ctx, spec.Tenant, spec.Image, spec.Limits, spec.Env)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRejected, err)
	}
	spec.Env = a.env
	spec.setDefaults()
	seal := envelope.NewSeal()
	header, err := e.sessionHeader(spec, a.lim, seal, nil)
	if err != nil {
		return nil, err
	}
	log := e.cfg.Logger.With("session_id", spec.ID, "worker", e.cfg.WorkerID)
	s, err := e.sandboxFor(ctx, log, a, spec.ID)
	if err != nil {
		return nil, err
	}
	if a.tmpl != nil {
		if err := e.prepare(ctx, s, a.tmpl, a.lim); err != nil {
			e.leave(ctx, log, s)
			return nil, fmt.Errorf("%w: template %s: %w", ErrRejected, a.tmpl.Name, err)
		}
	}
	if s.net != nil {
		// As a job's: the proxy's environment in the envelope (checked
		// above without it).
		if header, err = e.sessionHeader(spec, a.lim, seal, s.net.Env); err != nil {
			e.leave(ctx, log, s)
			return nil, err
		}
	}
	// One reply in progress at a time: the agent writes each reply's
	// parts at once, under its lock, so a part of a second before the
	// first's last is not its agent's, and what is not yet checked is
	// bounded by one message.
	ss := &Session{e: e, s: s, seal: seal, log: log, spec: spec, lim: a.lim,
		waiting: map[uint64]chan *envelope.Reply{}, asm: envelope.NewAssembler(1), ended: make(chan struct{})}
	s.out.serveSession(ss.frame)
	if err := handOff(s, header, spec.Restore); err != nil {
		e.leave(ctx, log, s)
		return nil, err
	}
	go func() {
		select {
		case <-s.out.ended:
		case <-s.copyDone:
		}
		ss.end()
	}()
	var pctx context.Context
	pctx, ss.stopPing = context.WithCancel(context.Background())
	go ss.ping(pctx)
	if spec.Restore != nil {
		// The agent answers once the snapshot is in place; one it refused
		// ends the sandbox, its trailer saying why.
		if _, err := ss.Do(ctx, &envelope.Request{Op: envelope.OpPing}); err != nil {
			ss.Close(ctx)
			return nil, fmt.Errorf("%w: %s", ErrRestore, cmp.Or(ss.Why(), err.Error()))
		}
	}
	log.Info("session started", "container", s.short, "image", spec.Image)
	return ss, nil
}

// setDefaults fills in the deadman, the lifetime and the processes a
// session's spec leaves out.
func (spec *SessionSpec) setDefaults() {
	if spec.Deadman <= 0 {
		spec.Deadman = 30 * time.Second
	}
	if spec.Lifetime <= 0 {
		spec.Lifetime = time.Hour
	}
	if spec.MaxProcesses <= 0 {
		spec.MaxProcesses = 32
	}
}

// sessionHeader is the envelope that makes a sandbox a session's: its
// limits, its files and the snapshot it restores, sealed with seal. A
// snapshot over the tmpfs, or a header that cannot be built, is
// ErrRejected.
//
// base is the environment under the session's own (the egress proxy's,
// for a sandbox with a network).
func (e *Executor) sessionHeader(spec SessionSpec, lim limits.Limits, seal envelope.Seal, base map[string]string) ([]byte, error) {
	out := int64(lim.Output)
	if spec.OutputLimit > 0 && spec.OutputLimit < out {
		out = spec.OutputLimit
	}
	h := &envelope.Header{Env: jobEnv(base, spec.Env), Dir: workDir, Key: seal.Key, Session: &envelope.Session{
		DeadmanMS: spec.Deadman.Milliseconds(), LifetimeMS: spec.Lifetime.Milliseconds(),
		OutputLimit: out, MaxProcesses: spec.MaxProcesses, Runtime: e.cfg.Runtime,
	}}
	if r := spec.Restore; r != nil {
		if r.Size > int64(lim.Tmpfs) {
			return nil, fmt.Errorf("%w: limits.tmpfs: the workspace's snapshot is %s, over the working directory's tmpfs of %s",
				ErrRejected, limits.Size(r.Size), lim.Tmpfs)
		}
		h.Restore = &envelope.Restore{Bytes: r.Size, SHA256: r.SHA256, MaxBytes: int64(lim.Tmpfs), MaxFiles: archive.DefaultMaxFiles}
	}
	h.Files = append(h.Files, filesByName(spec.Files)...)
	header, err := envelope.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return header, nil
}

// handOff writes a session's envelope to its sandbox, then the snapshot
// it restores.
func handOff(s *sandbox, header []byte, restore *jobrun.Snapshot) error {
	if _, err := s.att.Conn.Write(header); err != nil {
		return infraErr("hand the session its envelope", err)
	}
	if r := restore; r != nil {
		if _, err := io.Copy(s.att.Conn, io.LimitReader(r.R, r.Size)); err != nil {
			return infraErr("hand the session its snapshot", err)
		}
	}
	return nil
}

// ResolveLimits is what limits a session of image asking for l gets, as
// a job's: the defaults of image's template (looked up as tenant's, ""
// for the operator's) or else the worker's filled in, checked against
// the template's caps and the worker's.
func (e *Executor) ResolveLimits(tenant, image string, l limits.Limits) (limits.Limits, error) {
	def, caps := e.cfg.Defaults, e.cfg.Caps
	if _, tmpl, ok := e.lookup(tenant, image); ok && tmpl != nil {
		def, caps = e.templateLimits(tmpl)
	}
	return limits.Resolve(l, def, caps)
}

// HasPreset reports whether the executor serves the preset, or a
// template of the name that tenant ("" for the operator) may name: its
// own or the operator's.
func (e *Executor) HasPreset(tenant, name string) bool {
	_, _, ok := e.lookup(tenant, name)
	return ok
}

// ErrRestore: the session's agent refused or could not unpack the snapshot
// it was given (the message says why).
var ErrRestore = errors.New("restore the session's workspace")

// ErrRejected wraps what is wrong with a session's spec.
var ErrRejected = errors.New("rejected")

// Container is the short ID of the session's container.
func (ss *Session) Container() string { return ss.s.short }

// ImageID is the image the session's sandbox was created from.
func (ss *Session) ImageID() string { return ss.s.imageID }

// Done is closed once the session's sandbox has ended.
func (ss *Session) Done() <-chan struct{} { return ss.ended }

// Why says why the session ended ("closed", "idle", "lifetime",
// "stopped", "broken": a frame on its stream was not its agent's), once
// Done is closed; "" when its agent said nothing.
func (ss *Session) Why() string {
	<-ss.ended
	return ss.why
}

// Archive archives the session's working directory into w while the
// session goes on (a checkpoint): its agent stops the session's processes
// while it reads the tree, and continues them after. What came is checked
// against the agent's signed report.
func (ss *Session) Archive(ctx context.Context, w io.Writer) (*envelope.ArchiveReport, error) {
	ss.archMu.Lock()
	defer ss.archMu.Unlock()
	sink := newArchiveSink(w, int64(ss.lim.Tmpfs))
	ss.mu.Lock()
	ss.sink = sink
	ss.mu.Unlock()
	r, err := ss.Do(ctx, &envelope.Request{Op: envelope.OpArchive, MaxBytes: int64(ss.lim.Tmpfs), MaxFiles: archive.DefaultMaxFiles})
	ss.mu.Lock()
	ss.sink = nil
	ss.mu.Unlock()
	switch {
	case err != nil:
		return nil, err
	case r.Error != nil:
		return nil, r.Error
	case r.Archive == nil:
		return nil, errors.New("archive: the agent's reply reports no archive")
	case sink.err != nil:
		return nil, fmt.Errorf("archive: %w", sink.err)
	case sink.n != r.Archive.Bytes || sink.digest() != r.Archive.SHA256:
		return nil, fmt.Errorf("archive: %d bytes came, of sha256 %s; the agent reports %d, %s", sink.n, sink.digest(), r.Archive.Bytes, r.Archive.SHA256)
	}
	return r.Archive, nil
}

// ping renews the agent's deadman while the session is held.
func (ss *Session) ping(ctx context.Context) {
	t := time.NewTicker(ss.spec.Deadman / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ss.ended:
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, ss.spec.Deadman/3)
			_, _ = ss.Do(pctx, &envelope.Request{Op: envelope.OpPing})
			cancel()
		}
	}
}

// Close ends the session: its agent ends every process, and the sandbox
// is removed.
func (ss *Session) Close(ctx context.Context) {
	ss.closeOnce.Do(func() {
		ss.stopPing()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, _ = ss.Do(cctx, &envelope.Request{Op: envelope.OpClose})
		select {
		case <-ss.ended:
		case <-cctx.Done():
		}
		cancel()
		ss.end()
		use := ss.e.leave(ctx, ss.log, ss.s)
		ss.netMu.Lock()
		ss.egress = use
		ss.netMu.Unlock()
		ss.log.Info("session ended", "container", ss.s.short, "why", ss.why)
	})
}

// Abandon stops renewing the session without closing it, as a worker that
// died would: its agent ends it when the deadman runs out. For tests of
// that path.
func (ss *Session) Abandon() { ss.stopPing() }

// SetNetwork changes the session's egress policy while it runs: n (nil
// or one that grants nothing: "none", the lock after the installs) is
// checked against the worker's caps as at the start, and the proxy
// applies it at once, closing the connections opened under the old one.
// A session started without a network has no route to open later.
// It returns the session's limits with the new policy.
func (ss *Session) SetNetwork(ctx context.Context, n *limits.Network) (limits.Limits, error) {
	ss.netMu.Lock()
	defer ss.netMu.Unlock()
	if ss.s.net == nil {
		return limits.Limits{}, fmt.Errorf("%w: limits.network: the session was started without a network; start it with one to change it later", ErrRejected)
	}
	lim := ss.lim
	lim.Network = n
	lim, err := limits.Resolve(lim, ss.e.cfg.Defaults, ss.e.cfg.Caps)
	if err != nil {
		return limits.Limits{}, fmt.Errorf("%w: %w", ErrRejected, err)
	}
	if err := ss.e.cfg.Egress.Update(ctx, ss.s.id, *ss.s.net, lim.Network); err != nil {
		return limits.Limits{}, infraErr("egress", err)
	}
	ss.lim = lim
	ss.log.Info("session network changed", "container", ss.s.short, "network", lim.Network.String())
	return lim, nil
}

// Egress is what the session's sandbox carried through the egress proxy
// so far, per destination and verdict; nil without a network.
func (ss *Session) Egress(ctx context.Context) ([]limits.NetworkUse, error) {
	if ss.s.net == nil {
		return nil, nil
	}
	ss.netMu.Lock()
	done := ss.egress
	ss.netMu.Unlock()
	if done != nil {
		return done, nil
	}
	return ss.e.cfg.Egress.Usage(ctx, ss.s.id)
}
