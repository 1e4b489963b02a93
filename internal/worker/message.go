package worker

import (
	"fmt"
	"regexp"
	"time"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/shorten"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// message is a job's message as it was checked, once, on arrival: its
// subject and delivery, the job it decodes to and why that job is
// refused, if it is. The steps after (events, the index, the run, the
// store, the reply) read these instead of checking the ID, the queue or
// the tenant again.
type message struct {
	queue, id string // the subject's: authoritative
	attempt   int
	queuedAt  *time.Time
	job       *jobs.Job // nil when the message did not decode
	bad       error     // why the job is rejected; nil for a valid job
	// named: id is a valid job ID, which events take (so is every valid
	// job's); indexed: the queue is valid too, and the index takes both;
	// keyed: id is a key RESULTS takes.
	named, indexed, keyed bool
	tenant                string // id's tenant, "" for none
	replyTo               string // the job's reply_to when a reply may go there, else ""
}

// check reads a job's message: its subject (jobs.<queue>.<id>), the job,
// reconciled with the subject, and validated. A job may leave out id and
// queue; when present they must match the subject.
func (w *Worker) check(subject string, data []byte, attempt int, queuedAt *time.Time) *message {
	m := &message{attempt: attempt, queuedAt: queuedAt}
	var subjErr error
	m.queue, m.id, subjErr = fleet.ParseSubject(subject)
	m.job, m.bad = w.decode(data, m.queue, m.id, subjErr)
	m.named = m.bad == nil || fleet.ValidID(m.id)
	m.indexed = m.bad == nil || (m.named && fleet.ValidQueue(m.queue))
	m.keyed = subjErr == nil && (m.named || kvKeyPattern.MatchString(m.id))
	m.tenant = fleet.TenantOf(m.id)
	if m.job != nil && m.job.ReplyTo != "" && (m.bad == nil || fleet.ReplyToFor(m.id, m.job.ReplyTo) == nil) {
		m.replyTo = m.job.ReplyTo // a valid job's was checked by Validate
	}
	return m
}

// decode reads the job and reconciles it with its subject's queue and id.
func (w *Worker) decode(data []byte, queue, id string, subjErr error) (*jobs.Job, error) {
	if subjErr != nil {
		return nil, fmt.Errorf("%w: %w", jobs.ErrInvalidJob, subjErr)
	}
	j, err := jobs.Decode(data, w.cfg.Topology.MaxJobBytes)
	if err != nil {
		return nil, err
	}
	if j.ID == "" {
		j.ID = id
	} else if j.ID != id {
		return j, fmt.Errorf("%w: id %q does not match the subject's %q", jobs.ErrInvalidJob, shorten.Text(j.ID, 140), shorten.Text(id, 140))
	}
	if j.Queue == "" {
		j.Queue = queue
	} else if j.Queue != queue {
		return j, fmt.Errorf("%w: queue %q does not match the subject's %q", jobs.ErrInvalidJob, shorten.Text(j.Queue, 140), shorten.Text(queue, 140))
	}
	if err := j.Validate(); err != nil {
		return j, err
	}
	return j, nil
}

// kvKeyPattern matches what a KV bucket accepts as a key (a tenant's job
// ID is two subject tokens): a valid job ID always is one (check asks
// this only of others).
var kvKeyPattern = regexp.MustCompile(`^[-/_=a-zA-Z0-9]+(\.[-/_=a-zA-Z0-9]+)?$`)

// fill sets what a result of m's job says of its delivery and its job.
func (w *Worker) fill(res *jobs.Result, m *message) {
	res.ID = m.id
	res.Worker = w.cfg.ID
	res.Attempt = m.attempt
	res.QueuedAt = m.queuedAt
	if m.job != nil {
		res.SpecDigest = m.job.SpecDigest()
		if res.Labels == nil {
			res.Labels = m.job.Labels
		}
	}
}
