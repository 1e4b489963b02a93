package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/sessionwire"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// Client calls sessions for one owner.
type Client struct {
	nc     *nats.Conn
	rec    *records
	owner  string
	tenant string
	// CallTimeout bounds a call's wait beyond the operation's own
	// timeout. Default 30 s.
	CallTimeout time.Duration
}

// NewClient returns a client of the fleet's sessions, as owner. It opens
// the SESSIONS bucket when first needed (making it if it may).
func NewClient(ctx context.Context, js jetstream.JetStream, owner string) (*Client, error) {
	c := &Client{nc: js.Conn(), rec: &records{js: js}, owner: owner, CallTimeout: 30 * time.Second}
	_, _ = c.rec.open(ctx) // now if it can; else at the first call
	return c, nil
}

// As returns a client of the same fleet for another owner, of no
// tenant.
func (c *Client) As(owner string) *Client { return c.For("", owner) }

// For returns a client of the same fleet for owner of tenant: its
// sessions name the tenant's workspaces, count against the tenant's caps
// and are listed to that owner alone.
func (c *Client) For(tenant, owner string) *Client {
	d := *c
	d.owner, d.tenant = owner, tenant
	return &d
}

// call is what a request of the client carries.
func (c *Client) call(key string, body json.RawMessage) ([]byte, error) {
	return json.Marshal(sessionwire.Call{Owner: c.owner, Tenant: c.tenant, Key: key, Body: body})
}

// maxCreateTries is how many workers a create asks before it reports
// that none has room: a worker that filled up while the create was on its
// way answers ErrFull, and the next try may reach another.
const maxCreateTries = 3

// Create starts a session on a worker with room.
func (c *Client) Create(ctx context.Context, spec Spec) (*Info, error) {
	if spec.From != nil {
		return nil, sessionapi.Errorf(sessionapi.ErrInvalid, "from: use Resume or Fork")
	}
	return c.create(ctx, spec)
}

func (c *Client) create(ctx context.Context, spec Spec) (*Info, error) {
	if c.tenant != "" {
		spec.Tenant = c.tenant // a tenant's session names its tenant's workspaces
	}
	body, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	data, err := c.call(uuid.NewString(), body)
	if err != nil {
		return nil, err
	}
	var info Info
	for try := 1; ; try++ {
		err = c.request(ctx, SubjectCreate, data, 2*time.Minute, &info)
		if errors.Is(err, nats.ErrNoResponders) {
			err = sessionapi.Errorf(sessionapi.ErrFull, "no worker has room for another session")
		}
		if !errors.Is(err, sessionapi.ErrFull) || try == maxCreateTries {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return &info, nil
}

// Do calls op on session id with body (marshalled to JSON) and decodes
// the result into out. key, if not empty, makes a retried call run once.
// A call to a session whose worker does not answer resumes it on another
// worker when it persists (and is then made), else is ErrGone.
func (c *Client) Do(ctx context.Context, id, op, key string, body, out any, wait time.Duration) error {
	if !ValidID(id) {
		return sessionapi.Errorf(sessionapi.ErrNotFound, "no session %q", id)
	}
	var raw json.RawMessage
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		raw = b
	}
	data, err := c.call(key, raw)
	if err != nil {
		return err
	}
	// A call nobody answered reached no sandbox: trying it again after a
	// resume runs it once.
	for try := 1; ; try++ {
		err = c.request(ctx, Subject(id, op), data, wait, out)
		if !errors.Is(err, nats.ErrNoResponders) {
			return err
		}
		if try == 3 {
			return sessionapi.Errorf(sessionapi.ErrGone, "session %s: no worker answers for it", id)
		}
		again, err := c.notLive(ctx, id, op, out)
		if !again {
			return err
		}
	}
}

// notLive says what becomes of a call to a session nobody answers for:
// unknown (or another owner's), ended, or paused, it is an error; lost
// with its worker, a persistent one is resumed (again: call it again), or
// paused or deleted as asked, and another is recorded lost.
func (c *Client) notLive(ctx context.Context, id, op string, out any) (again bool, _ error) {
	kv, err := c.rec.open(ctx)
	if err != nil {
		return false, sessionapi.Errorf(sessionapi.ErrNotFound, "no session %q", id)
	}
	rec, e, err := ReadRecord(ctx, kv, c.tenant, c.owner, id)
	if err != nil {
		return false, sessionapi.Errorf(sessionapi.ErrNotFound, "no session %q", id)
	}
	info := *rec
	now := time.Now().UTC()
	// settle writes what op makes of a session without a sandbox, unless
	// another wrote first: then the call is tried again.
	settle := func(status, reason string) (bool, error) {
		info.Status, info.EndReason = status, reason
		if status == StatusEnded {
			info.EndedAt = &now
		} else {
			info.PausedAt = &now
		}
		b, err := json.Marshal(info)
		if err == nil {
			_, err = kv.Update(ctx, e.Key(), b, e.Revision())
		}
		if err != nil {
			return true, nil
		}
		return false, fill(out, &info)
	}
	switch {
	case info.Status == StatusEnded:
		return false, sessionapi.Errorf(sessionapi.ErrGone, "session %s has ended: %s", id, info.EndReason)
	case info.Status == StatusPaused:
		switch op {
		case sessionapi.OpPause, sessionapi.OpInfo, sessionapi.OpCheckpoint, sessionapi.OpKeepalive:
			return false, fill(out, &info)
		case sessionapi.OpDelete:
			return settle(StatusEnded, EndDeleted)
		}
		return false, sessionapi.Errorf(sessionapi.ErrPaused, "session %s is paused: resume it first", id)
	case !info.Persist:
		info.Status, info.EndReason, info.EndedAt = StatusEnded, EndLost, &now
		if b, err := json.Marshal(info); err == nil {
			_, _ = kv.Update(ctx, e.Key(), b, e.Revision()) // another caller may have said so first
		}
		return false, sessionapi.Errorf(sessionapi.ErrGone, "session %s has ended: %s", id, info.EndReason)
	case op == sessionapi.OpPause:
		return settle(StatusPaused, "") // its last checkpoint is what a resume restores
	case op == sessionapi.OpDelete:
		return settle(StatusEnded, EndDeleted)
	}
	if _, err := c.resume(ctx, id); err != nil {
		return false, err
	}
	return true, nil
}

// fill decodes info into out, as an answer's result would be.
func fill(out any, info *Info) error {
	if out == nil {
		return nil
	}
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// resume asks a worker with room to start session id again from its
// checkpoint. Two resumers of one session agree on one sandbox: the
// worker that wins the record's compare-and-swap starts it, and the
// other's worker answers with its record once it runs.
func (c *Client) resume(ctx context.Context, id string) (*Info, error) {
	return c.create(ctx, Spec{From: &From{Session: id, Resume: true}})
}

// Resume starts a paused session again, or one whose worker was lost, on
// any worker with room, from its last checkpoint; a running one is
// returned as it is.
func (c *Client) Resume(ctx context.Context, id string) (*Info, error) {
	info, err := c.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	switch info.Status {
	case StatusEnded:
		return nil, sessionapi.Errorf(sessionapi.ErrGone, "session %s has ended: %s", id, info.EndReason)
	case StatusRunning:
		var live Info
		data, err := c.call("", nil)
		if err != nil {
			return nil, err
		}
		err = c.request(ctx, Subject(id, sessionapi.OpInfo), data, 0, &live)
		if !errors.Is(err, nats.ErrNoResponders) {
			return &live, err
		}
		if !info.Persist {
			_, err := c.notLive(ctx, id, sessionapi.OpInfo, nil)
			return nil, err
		}
	}
	return c.resume(ctx, id)
}

// Pause checkpoints a persistent session and frees its sandbox: its
// status is then paused, until Resume.
func (c *Client) Pause(ctx context.Context, id string) (*Info, error) {
	var info Info
	return &info, c.Do(ctx, id, sessionapi.OpPause, "", nil, &info, 0)
}

// Fork starts a new session from the latest checkpoint of session id
// (made now when it runs): its files, on a fresh sandbox, while id goes
// on unchanged.
func (c *Client) Fork(ctx context.Context, id string, req ForkRequest) (*Info, error) {
	var src Info
	if err := c.Do(ctx, id, sessionapi.OpCheckpoint, "", nil, &src, 0); err != nil && !errors.Is(err, sessionapi.ErrGone) {
		return nil, err
	}
	return c.create(ctx, Spec{Labels: req.Labels, From: &From{Session: id, Persist: req.Persist}})
}

func (c *Client) request(ctx context.Context, subject string, data []byte, wait time.Duration, out any) error {
	ctx, cancel := context.WithTimeout(ctx, wait+c.CallTimeout)
	defer cancel()
	msg, err := c.nc.RequestWithContext(ctx, subject, data)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return err
		}
		return fmt.Errorf("sessions: %s: %w", subject, err)
	}
	var a sessionwire.Answer
	if err := json.Unmarshal(msg.Data, &a); err != nil {
		return fmt.Errorf("sessions: %s: not an answer: %w", subject, err)
	}
	if a.Error != nil {
		return a.Error
	}
	if out != nil && len(a.Result) > 0 {
		if err := json.Unmarshal(a.Result, out); err != nil {
			return fmt.Errorf("sessions: %s: %w", subject, err)
		}
	}
	return nil
}

// Delete ends a session.
func (c *Client) Delete(ctx context.Context, id string) (*Info, error) {
	var info Info
	return &info, c.Do(ctx, id, sessionapi.OpDelete, "", nil, &info, 0)
}

// Keepalive counts as a call: the idle timeout starts again.
func (c *Client) Keepalive(ctx context.Context, id string) (*Info, error) {
	var info Info
	return &info, c.Do(ctx, id, sessionapi.OpKeepalive, "", nil, &info, 0)
}

// SetNetwork replaces the running session's egress policy (nil or a
// policy that grants nothing: "none", the lock after the installs),
// within the worker's caps.
func (c *Client) SetNetwork(ctx context.Context, id string, n *limits.Network) (*Info, error) {
	if n == nil {
		n = &limits.Network{}
	}
	var info Info
	return &info, c.Do(ctx, id, sessionapi.OpNetwork, "", n, &info, 0)
}

// Exec runs a command in the session.
func (c *Client) Exec(ctx context.Context, id, key string, req sessionapi.ExecRequest) (*sessionapi.ExecResult, error) {
	var r sessionapi.ExecResult
	return &r, c.Do(ctx, id, sessionapi.OpExec, key, req, &r, req.Timeout.D())
}

// RunCode runs a cell in one of the session's contexts.
func (c *Client) RunCode(ctx context.Context, id, key string, req sessionapi.CodeRequest) (*CodeResult, error) {
	var r CodeResult
	return &r, c.Do(ctx, id, sessionapi.OpCode, key, req, &r, req.Timeout.D())
}

// Processes lists the session's background processes.
func (c *Client) Processes(ctx context.Context, id string) ([]sessionapi.Process, error) {
	var ps []sessionapi.Process
	return ps, c.Do(ctx, id, sessionapi.OpProcesses, "", nil, &ps, 0)
}

// ReadFile reads a whole file of the session, chunk by chunk, into w.
func (c *Client) ReadFile(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	var off int64
	for {
		var r sessionapi.FileResult
		if err := c.Do(ctx, id, sessionapi.OpRead, "", sessionapi.FileRequest{Path: path, Offset: off, Length: sessionapi.MaxFileChunk}, &r, 0); err != nil {
			return off, err
		}
		n, err := w.Write(r.Data)
		off += int64(n)
		if err != nil || r.EOF || len(r.Data) == 0 {
			return off, err
		}
	}
}

// WriteFile writes r to a file of the session, chunk by chunk: the first
// replaces what was there, the rest append.
func (c *Client) WriteFile(ctx context.Context, id, key, path string, mode uint32, r io.Reader) (*sessionapi.Entry, error) {
	buf := make([]byte, sessionapi.MaxFileChunk)
	var entry *sessionapi.Entry
	for n := 0; ; n++ {
		got, err := io.ReadFull(r, buf)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, err
		}
		if got == 0 && n > 0 {
			return entry, nil
		}
		var res sessionapi.FileResult
		k := ""
		if key != "" {
			k = fmt.Sprintf("%s/%d", key, n)
		}
		if err := c.Do(ctx, id, sessionapi.OpWrite, k, sessionapi.FileRequest{Path: path, Data: buf[:got], Append: n > 0, Mode: mode}, &res, 0); err != nil {
			return nil, err
		}
		entry = res.Entry
		if got < len(buf) {
			return entry, nil
		}
	}
}

// File calls op (OpList, OpStat, OpRemove, OpMkdir, OpRename) with req.
func (c *Client) File(ctx context.Context, id, op string, req sessionapi.FileRequest) (*sessionapi.FileResult, error) {
	var r sessionapi.FileResult
	return &r, c.Do(ctx, id, op, "", req, &r, 0)
}

// String names the owner, for logs.
func (c *Client) String() string { return "sessions of " + strings.TrimSpace(c.owner) }
