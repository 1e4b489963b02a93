package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/shorten"
)

// TenantOptions are the NATS options a tenant's connection needs: its own
// inbox prefix.
func TenantOptions(t string) []nats.Option {
	return []nats.Option{nats.CustomInboxPrefix(fleet.TenantInboxPrefix(t))}
}

// NewTenantClient returns a client for tenant t, over a connection made
// with TenantOptions(t) and t's credentials. It opens nothing (a tenant
// may not read the topology); cfg applies as to NewClient.
// Submit qualifies job IDs (id → t.id; a new ID is t.<UUIDv7>) and
// workspace names (agent → t.agent) and returns the qualified ID, which
// Get, Wait, Cancel and Follow take; the workspace calls take a name with
// or without its tenant, and read only t's. Status, Pending and Phase are
// not a tenant's.
func NewTenantClient(js jetstream.JetStream, t string, cfg Config) (*Client, error) {
	if !ValidTenant(t) {
		return nil, fmt.Errorf("%w: tenant %q must match [a-z0-9][a-z0-9-]{0,31}", ErrInvalidConfig, t)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Client{js: js, cfg: cfg.withDefaults()}
	c.acc = &tenantAccess{c: c, name: t}
	return c, nil
}

// ErrNotTenants is returned by what a tenant's client cannot do.
var ErrNotTenants = errors.New("not available to a tenant's client")

// tenantAccess is a tenant's client's: the tenant's own keys, read and
// written by subject, where the server's permissions see them (see
// directGet).
type tenantAccess struct {
	c    *Client
	name string
}

func (a *tenantAccess) tenant() string                 { return a.name }
func (a *tenantAccess) reaches(t string) bool          { return t == a.name }
func (a *tenantAccess) stores() (*fleet.Stores, error) { return nil, ErrNotTenants }

func (a *tenantAccess) qualifyID(id string) (string, error) {
	if id == "" {
		return a.name + "." + NewID(), nil
	}
	return a.qualifyName("id", id)
}

func (a *tenantAccess) qualifyWorkspace(name string) (string, error) {
	return a.qualifyName("workspace", name)
}

// qualifyName returns name qualified by the tenant, or an error wrapping
// ErrInvalidJob when it is another tenant's.
func (a *tenantAccess) qualifyName(what, name string) (string, error) {
	switch t := TenantOf(name); t {
	case "":
		return a.name + "." + name, nil
	case a.name:
		return name, nil
	default:
		return "", invalid("%s %q is tenant %s's, not %s's", what, shorten.Text(name, 170), t, a.name)
	}
}

// QualifyID returns id as this client submits it: unchanged for a client of
// no tenant; for a tenant's, qualified by the tenant (a new ID when id is
// empty), or an error wrapping ErrInvalidJob when it is another tenant's.
func (c *Client) QualifyID(id string) (string, error) { return c.acc.qualifyID(id) }

// QualifyWorkspace returns a workspace's name as this client's jobs name it:
// unchanged for a client of no tenant; for a tenant's, qualified by the
// tenant, or an error wrapping ErrInvalidJob when it is another tenant's.
func (c *Client) QualifyWorkspace(name string) (string, error) { return c.acc.qualifyWorkspace(name) }

// qualifyJob returns job as this client submits it: its ID, workspace and
// workspace_from qualified by the client's tenant. job itself is not
// modified.
func (c *Client) qualifyJob(job *Job) (*Job, error) {
	q := *job
	var err error
	if q.ID, err = c.QualifyID(job.ID); err != nil {
		return nil, err
	}
	if q.Workspace != "" {
		if q.Workspace, err = c.QualifyWorkspace(q.Workspace); err != nil {
			return nil, err
		}
	}
	if f := q.WorkspaceFrom; f != nil {
		from := *f
		if from.Name, err = c.QualifyWorkspace(f.Name); err != nil {
			return nil, err
		}
		q.WorkspaceFrom = &from
	}
	return &q, nil
}

// ownWorkspace reports why the job with this ID may not name workspace
// name in field at, or nil: a workspace is its tenant's, and a job names
// only its own tenant's.
func ownWorkspace(jobID, at, name string) error {
	jt, wt := TenantOf(jobID), TenantOf(name)
	var reason string
	switch {
	case jt == wt:
		return nil
	case jt == "":
		reason = fmt.Sprintf("%s is tenant %s's: a job of no tenant names no tenant's workspace", field.Quote(name), wt)
	case wt == "":
		reason = fmt.Sprintf("%s: a job of tenant %s names its own workspaces, %s.<name>", field.Quote(name), jt, jt)
	default:
		reason = fmt.Sprintf("%s is tenant %s's: a job of tenant %s names only its own workspaces, %s.<name>", field.Quote(name), wt, jt, jt)
	}
	return &field.Error{Field: at, Reason: reason}
}

// kvSubject is the subject of key in bucket.
func kvSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// errNoMessage: a direct get found no message on the subject.
var errNoMessage = errors.New("no message")

// directGet reads the last message on subject of stream by a direct get
// of the subject's form ($JS.API.DIRECT.GET.<stream>.<subject>): the one
// form of read a tenant's permissions can name by key (the other carries
// the subject in its body). It returns errNoMessage when there is none,
// and the KV deletes and purges as such.
func (c *Client) directGet(ctx context.Context, stream, subject string) (*nats.Msg, error) {
	// As a JetStream API call: a request the permissions refuse gets no
	// answer, only this deadline.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // the JetStream API's default
	defer cancel()
	m, err := c.js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
	if err != nil {
		return nil, err
	}
	switch m.Header.Get("Status") {
	case "":
	case "404":
		return nil, errNoMessage
	default:
		return nil, fmt.Errorf("status %s %s", m.Header.Get("Status"), m.Header.Get("Description"))
	}
	if isKVDelete(m.Header) {
		return nil, errNoMessage
	}
	return m, nil
}

// get reads RESULTS[id] by a direct get of its subject.
func (a *tenantAccess) get(ctx context.Context, id string) (*Result, error) {
	m, err := a.c.directGet(ctx, "KV_"+fleet.ResultsBucket, kvSubject(fleet.ResultsBucket, id))
	switch {
	case errors.Is(err, errNoMessage):
		return nil, fmt.Errorf("%w: %s", ErrNotFound, shorten.Text(id, 170))
	case err != nil:
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	return DecodeStoredResult(id, m.Data)
}

// kvOperation is the header of a KV delete or purge.
const kvOperation = "KV-Operation"

func isKVDelete(h nats.Header) bool {
	op := h.Get(kvOperation)
	return op == "DEL" || op == "PURGE"
}

// head reads WORKSPACES[name] by a direct get of its subject.
func (a *tenantAccess) head(ctx context.Context, name string) (*WorkspaceHead, error) {
	m, err := a.c.directGet(ctx, "KV_"+fleet.WorkspacesBucket, kvSubject(fleet.WorkspacesBucket, name))
	switch {
	case errors.Is(err, errNoMessage):
		return nil, fmt.Errorf("%w: %s", ErrNoWorkspace, name)
	case errors.Is(err, nats.ErrNoResponders):
		return nil, ErrNoWorkspaces
	case err != nil:
		return nil, fmt.Errorf("workspace %s: %w", name, err)
	}
	return DecodeWorkspaceHead(name, m.Data)
}

// heads lists the tenant's workspaces: an ephemeral consumer on
// WORKSPACES filtered to its keys ($KV.WORKSPACES.<tenant>.*), the last
// value of each; the filter is in the API subject, where the permissions
// see it.
func (a *tenantAccess) heads(ctx context.Context) ([]*WorkspaceHead, error) {
	c := a.c
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	prefix := kvSubject(fleet.WorkspacesBucket, a.name+".")
	cons, err := c.js.CreateConsumer(ctx, "KV_"+fleet.WorkspacesBucket, jetstream.ConsumerConfig{
		FilterSubject:     prefix + "*",
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: time.Minute, // removed by the server if the delete below is lost
		MemoryStorage:     true,
		Replicas:          1,
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, ErrNoWorkspaces
	}
	if err != nil {
		return nil, fmt.Errorf("list workspaces: %w", err)
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer dcancel()
		_ = c.js.DeleteConsumer(dctx, "KV_"+fleet.WorkspacesBucket, cons.CachedInfo().Name)
	}()
	var heads []*WorkspaceHead
	for left := cons.CachedInfo().NumPending; left > 0; {
		batch, err := cons.Fetch(int(min(left, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("list workspaces: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if isKVDelete(m.Headers()) {
				continue
			}
			name := strings.TrimPrefix(m.Subject(), kvSubject(fleet.WorkspacesBucket, ""))
			if fleet.IsSessionWorkspace(name) {
				continue // a session's checkpoints: its owner's alone
			}
			h, err := DecodeWorkspaceHead(name, m.Data())
			if err != nil {
				return nil, err
			}
			heads = append(heads, h)
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("list workspaces: %w", err)
		}
		if n == 0 {
			break // what was pending expired meanwhile
		}
		left -= uint64(n)
	}
	slices.SortFunc(heads, func(a, b *WorkspaceHead) int { return strings.Compare(a.Name, b.Name) })
	return heads, nil
}

// purgeHead removes a workspace's head as KeyValue.Delete does (see
// fleetAccess.purgeHead), without binding the bucket.
func (a *tenantAccess) purgeHead(ctx context.Context, name string) error {
	m := nats.NewMsg(kvSubject(fleet.WorkspacesBucket, name))
	m.Header.Set(kvOperation, "DEL")
	_, err := a.c.js.PublishMsg(ctx, m)
	return err
}

// cancel is Cancel for a tenant: it records the request under the
// job's key in CANCELS and waits CancelWait for the canceled result.
func (a *tenantAccess) cancel(ctx context.Context, id string) (*Result, error) {
	c := a.c
	if r, err := a.get(ctx, id); err == nil {
		return r, &FinishedError{Result: r}
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	rw, err := c.Watch(ctx, id)
	if err != nil {
		return nil, err
	}
	defer rw.Stop()
	req, _ := json.Marshal(fleet.CancelRequest{RequestedAt: time.Now().UTC()})
	if _, err := c.js.Publish(ctx, kvSubject(fleet.CancelsBucket, id), req); err != nil {
		return nil, fmt.Errorf("cancel %s: %w", id, err)
	}
	wctx, cancel := context.WithTimeout(ctx, c.cfg.CancelWait)
	defer cancel()
	r, err := rw.Next(wctx)
	switch {
	case err == nil && r.Status != StatusCanceled:
		return r, &FinishedError{Result: r}
	case err == nil:
		return r, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("cancel %s: %w (or no job has this ID)", id, ErrCancelPending)
}

// Tenant returns the tenant of a tenant's client, "" for another (and for
// the zero Client, which reaches nothing).
func (c *Client) Tenant() string {
	if c.acc == nil {
		return ""
	}
	return c.acc.tenant()
}
