package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/internal/shorten"
)

// Tenants. Several teams share a fleet (one JetStream account, one JOBS
// stream, the same lanes and workers) without seeing each other's jobs.
// What belongs to tenant t is named by a subject token t, so that NATS
// permissions, which match whole tokens, can confine t's credentials to it
// (deploy/compose/tenants.sh writes them):
//
//	job ID         t.<id>                     (ValidID)
//	job subject    jobs.<queue>.t.<id>        t may publish jobs.*.t.*
//	result         RESULTS key t.<id>         t may direct-get $KV.RESULTS.t.*, watch only that filter
//	cancel         CANCELS key t.<id>         t may put $KV.CANCELS.t.*
//	inbox          _INBOX.t.<...>             t alone may subscribe _INBOX.t.> and results.t.>
//	reply_to       _INBOX.t.> or results.t.>  checked by Validate: a tenant's job replies only to it
//
// A tenant reads nothing else: no stream or consumer info (it would list
// other tenants' keys through a subjects filter), no message of JOBS.
// So a TenantClient works without them: Get is a direct get, a watch an
// ordered consumer filtered to one key, and Cancel cannot tell a queued
// job from an unknown ID (ErrCancelPending for both, until a worker
// answers). Workers serve every tenant; nothing in a worker knows the
// tenants.

// tenantPattern is a tenant's name: lower-case, so that it can also name
// users and environment variables.
var tenantPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// ValidTenant reports whether s may name a tenant: [a-z0-9][a-z0-9-]{0,31}.
func ValidTenant(s string) bool { return tenantPattern.MatchString(s) }

// TenantOf returns the tenant of a job ID, "" for a job of no tenant.
func TenantOf(id string) string {
	t, _, ok := strings.Cut(id, ".")
	if !ok {
		return ""
	}
	return t
}

// TenantInboxPrefix is the inbox prefix of tenant t's connections
// (nats.CustomInboxPrefix): the only inboxes t may subscribe to.
func TenantInboxPrefix(t string) string { return "_INBOX." + t }

// tenantReplyTo checks that a job of tenant t replies only where t alone
// may listen.
func tenantReplyTo(t, replyTo string) error {
	if t == "" {
		return nil
	}
	if strings.HasPrefix(replyTo, TenantInboxPrefix(t)+".") || strings.HasPrefix(replyTo, "results."+t+".") {
		return nil
	}
	return &field.Error{Field: "reply_to", Reason: fmt.Sprintf("%s: a job of tenant %s replies only on %s.> or results.%s.>",
		field.Quote(replyTo), t, TenantInboxPrefix(t), t)}
}

// ReplyToFor reports why replyTo may not be the reply subject of the job
// with this ID (the subject's, which is authoritative), or nil: it must be
// a valid reply subject (ValidReplyTo) and, for a tenant's job, one only
// that tenant may listen on.
func ReplyToFor(id, replyTo string) error {
	if err := validReplyTo(replyTo); err != nil {
		return err
	}
	return tenantReplyTo(TenantOf(id), replyTo)
}

// TenantOptions are the NATS options a tenant's connection needs: its own
// inbox prefix.
func TenantOptions(t string) []nats.Option {
	return []nats.Option{nats.CustomInboxPrefix(TenantInboxPrefix(t))}
}

// NewTenantClient returns a client for tenant t, over a connection made
// with TenantOptions(t) and t's credentials. It opens nothing (a tenant
// may not read the topology); topo's MaxJobBytes and CancelWait apply.
// Submit qualifies job IDs (id → t.id; a new ID is t.<UUIDv7>) and
// returns the qualified ID, which Get, Wait and Cancel take. Status and
// Stores are not a tenant's.
func NewTenantClient(js jetstream.JetStream, t string, topo Topology) (*Client, error) {
	if !ValidTenant(t) {
		return nil, fmt.Errorf("%w: tenant %q must match [a-z0-9][a-z0-9-]{0,31}", ErrInvalidConfig, t)
	}
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	return &Client{js: js, topo: topo.WithDefaults(), tenant: t}, nil
}

// ErrNotTenants is returned by what a tenant's client cannot do.
var ErrNotTenants = errors.New("not available to a tenant's client")

// QualifyID returns id as this client submits it: unchanged for a client of
// no tenant; for a tenant's, qualified by the tenant (a new ID when id is
// empty), or an error wrapping ErrInvalidJob when it is another tenant's.
func (c *Client) QualifyID(id string) (string, error) {
	switch t := TenantOf(id); {
	case c.tenant == "":
		return id, nil
	case id == "":
		return c.tenant + "." + NewID(), nil
	case t == "":
		return c.tenant + "." + id, nil
	case t != c.tenant:
		return "", invalid("id %q is tenant %s's, not %s's", shorten.Text(id, 170), t, c.tenant)
	}
	return id, nil
}

// kvSubject is the subject of key in bucket.
func kvSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// tenantGet reads RESULTS[id] by a direct get of its subject: the one
// form of read a tenant's permissions name by key.
func (c *Client) tenantGet(ctx context.Context, id string) (*Result, error) {
	subj := "$JS.API.DIRECT.GET.KV_" + ResultsBucket + "." + kvSubject(ResultsBucket, id)
	// As a JetStream API call: a request the permissions refuse gets no
	// answer, only this deadline.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // the JetStream API's default
	defer cancel()
	m, err := c.js.Conn().RequestWithContext(ctx, subj, nil)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	switch m.Header.Get("Status") {
	case "":
	case "404":
		return nil, fmt.Errorf("%w: %s", ErrNotFound, shorten.Text(id, 170))
	default:
		return nil, fmt.Errorf("get %s: status %s %s", id, m.Header.Get("Status"), m.Header.Get("Description"))
	}
	if isKVDelete(m.Header) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, shorten.Text(id, 170))
	}
	return DecodeStoredResult(id, m.Data)
}

func isKVDelete(h nats.Header) bool {
	op := h.Get("KV-Operation")
	return op == "DEL" || op == "PURGE"
}

// tenantWatch watches RESULTS[id] with an ordered consumer filtered to
// its subject: the one form of watch a tenant's permissions allow.
func (c *Client) tenantWatch(ctx context.Context, id string) (*ResultWatch, error) {
	oc, err := c.js.OrderedConsumer(ctx, "KV_"+ResultsBucket, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{kvSubject(ResultsBucket, id)},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", id, err)
	}
	it, err := oc.Messages()
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", id, err)
	}
	return &ResultWatch{it: it, id: id}, nil
}

// nextMsg is ResultWatch.Next over an ordered consumer.
func (rw *ResultWatch) nextMsg(ctx context.Context) (*Result, error) {
	for {
		m, err := rw.it.Next(jetstream.NextContext(ctx))
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("watch %s: %w", rw.id, err)
		}
		if isKVDelete(m.Headers()) {
			continue
		}
		return DecodeStoredResult(rw.id, m.Data())
	}
}

// tenantCancel is Cancel for a tenant: it records the request under the
// job's key in CANCELS and waits CancelWait for the canceled result.
func (c *Client) tenantCancel(ctx context.Context, id string) (*Result, error) {
	if r, err := c.tenantGet(ctx, id); err == nil {
		return r, fmt.Errorf("cancel %s: %w (%s)", id, ErrFinished, r.Status)
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	rw, err := c.tenantWatch(ctx, id)
	if err != nil {
		return nil, err
	}
	defer rw.Stop()
	req, _ := json.Marshal(CancelRequest{RequestedAt: time.Now().UTC()})
	if _, err := c.js.Publish(ctx, kvSubject(CancelsBucket, id), req); err != nil {
		return nil, fmt.Errorf("cancel %s: %w", id, err)
	}
	wctx, cancel := context.WithTimeout(ctx, c.topo.CancelWait)
	defer cancel()
	r, err := rw.Next(wctx)
	switch {
	case err == nil && r.Status != StatusCanceled:
		return r, fmt.Errorf("cancel %s: %w (%s)", id, ErrFinished, r.Status)
	case err == nil:
		return r, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	return nil, fmt.Errorf("cancel %s: %w (or no job has this ID)", id, ErrCancelPending)
}

// Tenant returns the tenant of a tenant's client, "" for another.
func (c *Client) Tenant() string { return c.tenant }
