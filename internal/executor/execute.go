package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/envelope"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// observed is what execute saw of one job, before any judgement: verdict
// turns it into an outcome.
type observed struct {
	killed           jobs.Status // the first reason the executor killed the sandbox; "" if it did not
	exitCode         int64       // the container's, as the engine reported it (0 when it did not)
	engineOOM        bool        // the engine reported an OOM kill
	stdout, stderr   []byte      // the job's streams as framed by the launcher, up to the cap
	stdoutN, stderrN int64       // their full sizes
	archiveN         int64       // bytes of archive that came (FrameArchive)
	archiveSHA       string      // their SHA-256, hex; "" when none came
	trailer          []byte      // the trailer frame's payload, nil if none came
	framesBroken     error       // why the framing broke, if it did
	diag             []byte      // the container's stderr: the launcher before it had a seal
	started          time.Time
	finished         time.Time

	// A compiled or judged job's: what the job asked (not observed, but
	// what the observations are judged against), the compiler's output
	// and its count, and the case reports with their count and digest.
	judge      *judgeSpec
	compileOut []byte
	compileN   int64
	cases      [][]byte
	casesN     int
	casesSHA   string

	// The display outputs kept, and the count and digest of all that came.
	displays    [][]byte
	displaysN   int
	displaysSHA string
}

// judgeSpec is what a compiled or judged job asked of the launcher.
type judgeSpec struct {
	compiled bool     // the header had a compile step
	names    []string // the test cases' names, in order; nil for no tests
	tests    bool
}

// execute hands the job (its envelope and stdin) to a launched sandbox and
// watches it to the end. The job's clock, and its wall-clock limit, start at
// the hand-off: the job cannot begin before its envelope.
func (e *Executor) execute(ctx context.Context, log *slog.Logger, s *sandbox, lim limits.Limits, env sealed, stdin []byte, opts jobrun.Options) (*outcome, error) {
	var sink *archiveSink
	if opts.Archive != nil {
		// The launcher stops at the tmpfs size; a frame more is slack.
		sink = newArchiveSink(opts.Archive.W, int64(lim.Tmpfs)+envelope.MaxFramePayload)
		s.out.keepArchive(sink)
	}
	if opts.OnOutput != nil {
		s.out.watch(func(kind byte, p []byte) {
			switch kind {
			case envelope.FrameStdout:
				opts.OnOutput(jobs.Stdout, p)
			case envelope.FrameStderr:
				opts.OnOutput(jobs.Stderr, p)
			}
		})
	}
	if env.judge != nil {
		s.out.expectCases(len(env.judge.names))
	}
	if opts.OnStart != nil {
		opts.OnStart(jobrun.Start{Container: s.short, Limits: lim})
	}
	obs, err := e.watch(ctx, log, s, lim, env, opts.Restore, stdin)
	if err != nil {
		return nil, err
	}
	obs.judge = env.judge
	out := verdict(obs, env.seal, lim)
	out.container = s.short
	reportArchive(opts.Archive, sink, out)
	return out, nil
}

// watch runs the job to its end and records what happened: the trailers on
// both streams, or the container's exit, or the executor's own kill at a
// limit or a cancellation.
func (e *Executor) watch(ctx context.Context, log *slog.Logger, s *sandbox, lim limits.Limits, env sealed, restore *jobrun.Snapshot, stdin []byte) (observed, error) {
	obs := observed{started: time.Now()}
	f := startFeed(s, env.header, restore, stdin)
	// Every goroutine is waited for before watch returns: closing the
	// connection unblocks the feed (release waits for the copy).
	defer func() {
		s.att.Close()
		<-f.done
	}()

	early, err := e.awaitEnd(ctx, log, s, lim, env, &obs)
	if err != nil {
		return obs, err
	}
	if !early {
		e.awaitExit(ctx, log, s, &obs)
	}
	if restore != nil {
		s.att.Close()
		<-f.done
		if f.err != nil {
			return obs, infraErr("restore", fmt.Errorf("%w: %w", errRestoreSource, f.err))
		}
	}
	obs.collect(s.out)
	return obs, nil
}

// detached is a context for the calls made after the job ended or was
// killed: a canceled caller still gets its container killed; each call has
// its deadline (callDeadlines).
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(context.WithoutCancel(ctx))
}

// feed writes the job's input to the sandbox: the envelope's header, the
// snapshot to restore, then stdin. err is read once done is closed.
type feed struct {
	done chan struct{}
	err  error // reading the snapshot failed: the worker's fault
}

func startFeed(s *sandbox, header []byte, restore *jobrun.Snapshot, stdin []byte) *feed {
	f := &feed{done: make(chan struct{})}
	go func() {
		defer close(f.done)
		// Errors here mean the container is gone, which the wait reports.
		if _, err := s.att.Conn.Write(header); err != nil {
			return
		}
		if restore != nil {
			// Large writes (the connection's ReadFrom would copy 32 KiB at
			// a time): each one crosses dockerd and the shim.
			conn := struct{ io.Writer }{s.att.Conn}
			n, err := io.CopyBuffer(conn, io.LimitReader(readerOnly{restore.R, &f.err}, restore.Size), make([]byte, 256<<10))
			if err == nil && n < restore.Size && f.err == nil { // the snapshot is shorter than announced
				f.err = io.ErrUnexpectedEOF
			}
			if err != nil || n < restore.Size {
				_ = s.att.CloseWrite()
				return
			}
		}
		if len(stdin) > 0 {
			if _, err := s.att.Conn.Write(stdin); err != nil {
				return
			}
		}
		_ = s.att.CloseWrite()
	}()
	return f
}

// awaitEnd waits for the job's end: its trailer, or the container's exit.
// On the way it kills the sandbox at the wall-clock limit, the output limit
// or the caller's cancellation, and records the first reason in obs. early
// is true when the trailer alone settled the verdict.
func (e *Executor) awaitEnd(ctx context.Context, log *slog.Logger, s *sandbox, lim limits.Limits, env sealed, obs *observed) (early bool, err error) {
	timer := time.NewTimer(lim.Timeout.D())
	defer timer.Stop()
	// The launcher's last frame is its signed trailer, sent once the job's
	// process has ended. With it in, and saying whether the cgroup saw an
	// OOM kill, the verdict is known: there is no need to wait for the
	// engine to tear the container down and report its exit, which is most
	// of a trivial job's time. release kills and removes it.
	ended := s.out.ended

	var killDeadline <-chan time.Time
	kill := func(reason jobs.Status) {
		if obs.killed != "" {
			return
		}
		obs.killed = reason
		kctx, cancel := detached(ctx)
		defer cancel()
		if _, err := e.api.ContainerKill(kctx, s.id, client.ContainerKillOptions{Signal: "KILL"}); err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			log.Warn("killing the sandbox failed", "container", s.short, "error", err)
		}
		killDeadline = time.After(e.cfg.KillGrace)
	}

	done := ctx.Done()
	var waitErr error
wait:
	for {
		select {
		case <-ended:
			ended = nil
			if obs.killed != "" {
				continue
			}
			// The trailer came, or the framing broke: nothing more on the
			// stream can be the job's.
			s.att.Close()
			<-s.copyDone
			if t, ok := env.seal.Open(s.out.trailer); ok && t.CgroupOOMKills != nil {
				early = true
				break wait
			}
			// No verdict, or a launcher that cannot tell OOM kills: the
			// exit and the inspection will tell the rest.
		case r := <-s.wait.Result:
			obs.exitCode = r.StatusCode
			if r.Error != nil && r.Error.Message != "" {
				waitErr = errors.New(r.Error.Message)
			}
			break wait
		case err := <-s.wait.Error:
			waitErr = err
			break wait
		case <-done:
			done = nil
			kill(jobs.StatusCanceled)
		case <-timer.C:
			kill(jobs.StatusTimeout)
		case <-s.overflow:
			kill(jobs.StatusOutputLimit)
		case <-killDeadline:
			return false, infraErr("wait", fmt.Errorf("container %s still running %s after it was killed", s.short, e.cfg.KillGrace))
		}
	}
	obs.finished = time.Now()
	if waitErr != nil {
		return false, infraErr("wait", waitErr)
	}
	return early, nil
}

// awaitExit follows a container that exited without a trailer that settled
// the verdict: it lets the output stream drain and asks the engine whether
// it killed the container for its memory.
func (e *Executor) awaitExit(ctx context.Context, log *slog.Logger, s *sandbox, obs *observed) {
	select {
	case <-s.copyDone:
	case <-time.After(streamGrace):
		log.Warn("output stream still open after the sandbox exited; cutting it", "container", s.short)
		s.att.Close()
		<-s.copyDone
	}
	ictx, cancel := detached(ctx)
	info, ierr := e.api.ContainerInspect(ictx, s.id, client.ContainerInspectOptions{})
	cancel()
	if ierr != nil {
		log.Warn("inspecting the exited sandbox failed; OOM unknown", "container", s.short, "error", ierr)
	} else if info.Container.State != nil {
		obs.engineOOM = info.Container.State.OOMKilled
	}
}

// collect records what the output copy gathered. The copy has ended: no
// lock is needed.
func (obs *observed) collect(c *capture) {
	obs.stdout, obs.stderr = c.stdout.buf, c.stderr.buf
	obs.stdoutN, obs.stderrN = c.stdout.n, c.stderr.n
	obs.trailer, obs.diag = c.trailer, c.diag
	if c.archive != nil {
		obs.archiveN, obs.archiveSHA = c.archive.n, c.archive.digest()
	}
	obs.framesBroken = c.frames.Err()
	obs.compileOut, obs.compileN = c.compile.buf, c.compile.n
	obs.cases, obs.casesN, obs.casesSHA = c.cases, c.caseSum.Count(), c.caseSum.Sum()
	obs.displays, obs.displaysN, obs.displaysSHA = c.displays, c.displaySum.Count(), c.displaySum.Sum()
}

// streamGrace is how long the output may keep flowing after the container
// exited (the engine flushes the attach stream a little after the wait
// returns); past it the stream is cut.
const streamGrace = 2 * time.Second
