package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// sandbox is a container that is created, attached (its stdin stream
// exists), watched (ContainerWait registered) and started, with its output
// already being demultiplexed into capped buffers: all a job needs but its
// envelope. A fresh one is launched for a job; a pooled one was launched
// ahead of time. Either serves exactly one job and is then released.
type sandbox struct {
	id, short string
	att       client.HijackedResponse
	wait      client.ContainerWaitResult
	stopWait  context.CancelFunc
	overflow  chan struct{}
	out       *capture
	copyDone  chan struct{} // closed when the output stream ended
	born      time.Time
	pool      *pool  // the pool it was taken from, if any
	imageID   string // the image it was created from; "" when the engine gave none
	uid       uint32 // its own, claimed until remove
	prepared  bool   // a template's, its start and ready run (its pool's)
	// net is the egress gateway's network of a sandbox with a network,
	// dropped after the container is removed.
	net *egressnet.Attachment
}

// alive reports whether the sandbox can still take a job: its attach
// stream has not ended (which it does when the container exits or the
// connection dies; the launcher writes nothing before its envelope).
func (s *sandbox) alive() bool {
	select {
	case <-s.copyDone:
		return false
	default:
		return true
	}
}

// admit launches a sandbox for a job when the gate lets it: at once while
// sandboxes start; after the launch in flight when none was tried yet; and
// while they fail only as the next attempt, once it is due. Otherwise it
// returns the StartError and makes no container: a held job retried in a
// loop must not become a container factory.
func (e *Executor) admit(ctx context.Context, image, jobID string, lim limits.Limits) (*sandbox, error) {
	for {
		turn, ended, err := e.starts.turn(true)
		switch turn {
		case turnDenied:
			return nil, err
		case turnBusy:
			if err != nil {
				return nil, err
			}
			select {
			case <-ended:
				continue
			case <-ctx.Done():
				return nil, infraErr("wait for the first sandbox to start", ctx.Err())
			}
		}
		return e.startSandbox(ctx, turn == turnTrial, image, jobID, lim)
	}
}

// startSandbox launches a sandbox and tells the gate how that went. A
// launch that failed while the engine answers its ping is a start failure,
// returned as a *StartError; one that failed because the engine does not
// answer, the image is missing or ctx is done says nothing about starts.
func (e *Executor) startSandbox(ctx context.Context, trial bool, image, jobID string, lim limits.Limits) (*sandbox, error) {
	s, err := e.launch(ctx, image, jobID, lim)
	switch {
	case err == nil:
		e.starts.started(trial)
		return s, nil
	case errors.Is(err, ErrImageMissing), errors.Is(err, errNoUID):
		e.starts.inconclusive(trial)
		return nil, err
	case ctx.Err() != nil:
		e.starts.inconclusive(trial)
		return nil, fmt.Errorf("%w: %w", ErrInfrastructure, err)
	}
	if perr := e.ping(ctx); perr != nil {
		e.starts.inconclusive(trial)
		return nil, fmt.Errorf("%w: %w", ErrInfrastructure, err)
	}
	return nil, e.starts.failed(trial, err)
}

// launch creates, attaches, watches and starts a sandbox for limits lim.
// jobID is "" for a pooled sandbox. On error, nothing is left behind (see
// discard), and the error, but for ErrImageMissing, is the engine's,
// prefixed with the step that failed.
func (e *Executor) launch(ctx context.Context, image, jobID string, lim limits.Limits) (_ *sandbox, err error) {
	// Not canceled with ctx: a create canceled in flight may still make a
	// container the engine never names to us, and nothing would remove it
	// before this worker restarts. A canceled job fails at the next step
	// instead, and the container is removed below.
	id, err := e.resolveImage(ctx, image, false)
	if err != nil {
		return nil, err
	}
	users, err := e.imageUsers(ctx, id)
	if err != nil {
		return nil, err
	}
	var sn *egressnet.Attachment
	if lim.Network != nil {
		a, err := e.cfg.Egress.Prepare(ctx, lim.Network)
		if err != nil {
			return nil, fmt.Errorf("egress: %w", err)
		}
		sn = &a
	}
	created, uid, err := e.create(ctx, image, id, jobID, lim, sn, users)
	if err != nil {
		e.dropNet(ctx, sn)
		return nil, err
	}
	s := &sandbox{id: created.ID, short: shortID(created.ID), born: time.Now(), imageID: id, uid: uid, net: sn}
	defer func() {
		if err != nil {
			if derr := e.discard(ctx, s.id); derr != nil {
				e.stick(s.id, uid, true, sn, derr)
				return
			}
			e.freeUID(uid)
			e.dropNet(ctx, sn)
		}
	}()

	att, err := e.api.ContainerAttach(ctx, s.id, client.ContainerAttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		return nil, fmt.Errorf("attach: %w", err)
	}
	s.att = att.HijackedResponse
	// Registered before start, so that even an instant exit is seen. Its
	// context is the sandbox's, not the caller's: a pooled sandbox outlives
	// the call that launched it.
	var waitCtx context.Context
	waitCtx, s.stopWait = context.WithCancel(context.Background())
	s.wait = e.api.ContainerWait(waitCtx, s.id, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	select {
	case err := <-s.wait.Error: // not registered: no exit would be seen
		s.att.Close()
		s.stopWait()
		return nil, fmt.Errorf("wait: %w", err)
	default:
	}

	s.overflow = make(chan struct{}, 1)
	s.out = newCapture(int64(lim.Output), s.overflow)
	s.copyDone = make(chan struct{})
	go func() {
		defer close(s.copyDone)
		// Its error only says how the stream ended; the wait and the
		// inspection say how the container did.
		_, _ = stdcopy.StdCopy(s.out.stdoutWriter(), s.out.stderrWriter(), s.att.Reader)
	}()

	if _, err := e.api.ContainerStart(ctx, s.id, client.ContainerStartOptions{}); err != nil {
		s.att.Close()
		<-s.copyDone
		s.stopWait()
		return nil, fmt.Errorf("start container: %w", err)
	}
	return s, nil
}

// create creates a sandbox's container, of image (imageID when the engine
// named one), under a uid of its own: it claims one no sandbox of this
// executor holds, and when the engine refuses the name (another worker's
// sandbox or a leftover holds the uid) it frees the claim and tries
// another, up to uidTries. Each uid's user tables are written, from the
// image's (users), before its create.
func (e *Executor) create(ctx context.Context, image, imageID, jobID string, lim limits.Limits, att *egressnet.Attachment, users userTables) (client.ContainerCreateResult, uint32, error) {
	tried := map[uint32]bool{}
	for range uidTries {
		uid, err := e.uids.claim(tried)
		if err != nil {
			return client.ContainerCreateResult{}, 0, err
		}
		user, err := e.users.write(uid, users, e.imageEnv(image))
		if err != nil {
			e.uids.free(uid)
			return client.ContainerCreateResult{}, 0, err
		}
		spec := e.containerSpec(image, jobID, lim, uid, att, user)
		if imageID != "" {
			spec.Config.Image = imageID // exactly what the result will name
		}
		created, err := e.api.ContainerCreate(context.WithoutCancel(ctx), spec)
		switch {
		case err == nil:
			return created, uid, nil
		case cerrdefs.IsConflict(err):
			e.freeUID(uid)
			tried[uid] = true
			continue
		case cerrdefs.IsNotFound(err):
			e.freeUID(uid)
			return created, 0, fmt.Errorf("%w: %s (build it with sandbox-image/build.sh): %w", ErrImageMissing, image, err)
		case errors.Is(err, context.DeadlineExceeded):
			// The engine may make it after all, after we gave up on it:
			// it goes by our name, and is looked for until it shows. The
			// uid is held until then.
			_ = e.discard(ctx, spec.Name) // sweepLate looks again
			e.removing.Go(func() {
				e.sweepLate(spec.Name)
				e.freeUID(uid)
			})
		default:
			e.freeUID(uid)
		}
		return created, 0, fmt.Errorf("create container: %w", err)
	}
	return client.ContainerCreateResult{}, 0, fmt.Errorf("%w: %d uids of %s in a row are held by other containers on the engine (another worker's, or leftovers)",
		errNoUID, uidTries, e.cfg.UIDs)
}

// sweepLate removes the container named name if the engine makes it
// within as long again as the create's deadline (lateSweepMin at least): a create abandoned at its
// deadline goes on in the engine, and the client's canceled call never
// names what it made (so the deadline wrapper's clean-up of a late answer
// does not see it). It stops early when the executor closes.
func (e *Executor) sweepLate(name string) {
	end := time.Now().Add(max(e.createWait, lateSweepMin))
	tick := time.NewTicker(lateSweepEvery)
	defer tick.Stop()
	for time.Now().Before(end) {
		select {
		case <-tick.C:
		case <-e.closing:
			return
		}
		_, err := e.api.ContainerInspect(context.Background(), name, client.ContainerInspectOptions{})
		if err == nil {
			e.cfg.Logger.Warn("a container whose create was abandoned at its deadline was made after all; removing it", "name", name)
			if err := e.discard(context.Background(), name); err != nil {
				e.cfg.Logger.Error("removing a container made after its create's deadline failed; Reap removes it at the next start",
					"name", name, "worker", e.cfg.WorkerID, "error", err)
			}
			return
		}
		if !cerrdefs.IsNotFound(err) {
			return // the engine does not answer: Reap removes it at the next start
		}
	}
}

// How often, and for how long at least, sweepLate looks for a late
// container.
const (
	lateSweepEvery = 250 * time.Millisecond
	lateSweepMin   = 10 * time.Second
)

// discard removes the container of a failed launch (by ID, or by name when
// the create's answer never came) and checks that it is gone: a runtime
// that fails every start leaves a created container per attempt, and
// processes of the engine's behind it, unless they are removed. It
// returns why the container may still be there; the caller hands it to
// the background retries (stick) when it knows its ID.
func (e *Executor) discard(ctx context.Context, idOrName string) error {
	ctx = context.WithoutCancel(ctx)
	_, err := e.api.ContainerRemove(ctx, idOrName, client.ContainerRemoveOptions{Force: true})
	if err == nil || cerrdefs.IsNotFound(err) {
		if _, err = e.api.ContainerInspect(ctx, idOrName, client.ContainerInspectOptions{}); err == nil {
			err = errors.New("still there after it was removed")
		} else if cerrdefs.IsNotFound(err) {
			return nil
		}
	}
	return err
}

// release ends a sandbox's streams and goroutines and force-removes its
// container with a context of its own, whatever happened to its job. The
// removal runs in the background when a slot for it is free: the job's
// verdict is known and its container stopped or being killed, so the
// caller need not wait for the engine to unmount and delete it.
func (e *Executor) release(ctx context.Context, log *slog.Logger, s *sandbox) {
	s.att.Close()
	<-s.copyDone
	s.stopWait()
	removeLogged := func() {
		if err := e.remove(ctx, s); err != nil {
			log.Warn("removing the sandbox failed", "container", s.short, "error", err)
			return // retried in the background: its uid and network stay claimed until then
		}
		e.dropNet(ctx, s.net)
	}
	select {
	case e.removeSlots <- struct{}{}:
		e.removing.Go(func() {
			defer func() { <-e.removeSlots }()
			removeLogged()
		})
	default:
		removeLogged()
	}
	if s.pool != nil {
		s.pool.done()
	}
}

// remove force-removes a sandbox's container, even for a caller that gave
// up: its deadline is the engine call's own. Gone, its uid is free again;
// still there (the error), it is handed to the background retries, which
// hold its uid (the container keeps its name, the claim on the engine)
// and its network until it is gone.
func (e *Executor) remove(ctx context.Context, s *sandbox) error {
	if _, err := e.api.ContainerRemove(context.WithoutCancel(ctx), s.id, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		e.stick(s.id, s.uid, true, s.net, err)
		return err
	}
	e.freeUID(s.uid)
	return nil
}

// freeUID gives back a uid once its sandbox's container is gone, or was
// never made, and removes its user tables first: a launch that claims it
// next writes its own.
func (e *Executor) freeUID(uid uint32) {
	e.users.remove(uid)
	e.uids.free(uid)
}

// dropNet removes a sandbox's network, if it has one, once its container
// is gone; a failure leaves it to the gateway's next start.
func (e *Executor) dropNet(ctx context.Context, att *egressnet.Attachment) {
	if att == nil {
		return
	}
	if err := e.cfg.Egress.Drop(ctx, *att); err != nil {
		e.cfg.Logger.Error("removing a sandbox's network failed; the worker's next start removes it", "network", att.Network, "error", err)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails on Linux
	return hex.EncodeToString(b)
}

func shortID(id string) string { return id[:min(12, len(id))] }
