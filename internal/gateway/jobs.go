package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/internal/shorten"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// Pending is the answer (202) for a job without a result yet.
type Pending struct {
	ID string `json:"id"`
	// Status is "queued", "running" (see jobs.Phase) or, after a cancel
	// that no worker has carried out yet, "canceling".
	Status string `json:"status"`
}

// statusCanceling: a cancel is recorded; the job finishes as canceled
// when a worker takes it (jobs.ErrCancelPending).
const statusCanceling = "canceling"

// submit: POST /v1/jobs[?wait=D]. The job is queued; with wait, the answer
// is its result when it comes within D, else 202 as without.
func (g *Gateway) submit(w http.ResponseWriter, r *http.Request, tok *Token) error {
	wait, err := g.waitParam(r)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	job, err := decodeJob(data)
	if err != nil {
		return err
	}
	if err := ownLabels(job); err != nil {
		return err
	}
	v := g.views.of(tok)
	fresh := job.ID == "" // a UUIDv7 of ours: it cannot have run before
	if err := g.admit(job, tok, v); err != nil {
		return err
	}
	job.Normalize() // the ID is needed before the publish, for the reply
	ctx := r.Context()
	client := v.Client()
	if wait == 0 {
		if _, err := client.Submit(ctx, job); err != nil {
			return err
		}
		g.log.Info("job queued", "job_id", job.ID, "queue", job.Queue, "token", tokenName(tok))
		accepted(w, job.ID, string(jobs.PhaseQueued))
		return nil
	}
	release, err := g.take(g.waiting, tok)
	if err != nil {
		return err
	}
	defer release()
	// An ID of the caller's (the clients send their own) may have run: a
	// retry after a lost answer gets the stored result at once, without a
	// trip through the queue.
	claim := jobs.ClaimOf(job)
	if !fresh {
		switch res, err := client.Get(ctx, job.ID); {
		case err == nil:
			return writeOwn(w, claim, res)
		case !errors.Is(err, jobs.ErrNotFound):
			return err
		}
	}
	// Expect the reply before the publish, so a fast result is not missed.
	replies, done := v.replies.expect(job.ID)
	defer done()
	job.ReplyTo = v.replies.subject(job.ID)
	_, queued, err := client.Enqueue(ctx, job)
	if err != nil {
		return err
	}
	g.log.Info("job queued", "job_id", job.ID, "queue", job.Queue, "token", tokenName(tok))
	if !queued {
		// Queued or running already (a retry while it runs): its reply
		// goes to its first publisher. Its result is watched for instead
		// (a result stored in between is the watch's first value).
		rw, err := client.Watch(ctx, job.ID)
		if err != nil {
			return err
		}
		defer rw.Stop()
		return g.await(w, ctx, client, rw, job.ID, &claim, wait)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	select {
	case res := <-replies:
		return writeOwn(w, claim, res)
	case <-wctx.Done():
		if ctx.Err() != nil {
			return ctx.Err() // the client left
		}
		return g.lookup(w, ctx, client, job.ID, &claim)
	}
}

// writeOwn answers with res when it is the result of the claim's job, and
// with 409 id_conflict when another job's result is stored at its ID: a
// caller that chose an ID someone else used never gets their verdict.
func writeOwn(w http.ResponseWriter, claim jobs.Claim, res *jobs.Result) error {
	if err := claim.Check(res); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// get: GET /v1/jobs/{id}[?wait=D]: 200 with the result, 202 while the job
// is queued or running (after waiting up to D for it to finish), 404 for
// an ID the fleet does not know.
func (g *Gateway) get(w http.ResponseWriter, r *http.Request, tok *Token) error {
	client := g.views.of(tok).Client()
	id, err := g.pathJob(r, tok)
	if err != nil {
		return err
	}
	wait, err := g.waitParam(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	if wait == 0 {
		return g.lookup(w, ctx, client, id, nil)
	}
	release, err := g.take(g.waiting, tok)
	if err != nil {
		return err
	}
	defer release()
	rw, err := client.Watch(ctx, id)
	if err != nil {
		return err
	}
	defer rw.Stop()
	// Wait only for a job that exists: an unknown ID is 404 at once. A
	// tenant cannot read the queue, and waits for what may be unknown.
	switch _, err := client.Phase(ctx, id); {
	case errors.Is(err, jobs.ErrNotFound):
		return g.lookup(w, ctx, client, id, nil)
	case err != nil && !errors.Is(err, jobs.ErrNotTenants):
		return err
	}
	return g.await(w, ctx, client, rw, id, nil, wait)
}

// await answers with the result rw delivers within wait, or as lookup
// does when none comes.
func (g *Gateway) await(w http.ResponseWriter, ctx context.Context, client *jobs.Client, rw *jobs.ResultWatch, id string, claim *jobs.Claim, wait time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	res, err := rw.Next(wctx)
	switch {
	case err == nil:
		return writeResult(w, claim, res)
	case ctx.Err() != nil:
		return ctx.Err() // the client left
	case errors.Is(err, context.DeadlineExceeded):
		return g.lookup(w, ctx, client, id, claim)
	}
	return err
}

// writeResult is writeOwn for a submit (claim set), and a plain answer
// for a read of the job (claim nil).
func writeResult(w http.ResponseWriter, claim *jobs.Claim, res *jobs.Result) error {
	if claim != nil {
		return writeOwn(w, *claim, res)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// lookup answers with the job's result, or 202 with its phase. claim is
// the submitted job's on a submit's path, nil on a read's. A tenant's
// client cannot read the queue, so tells a queued job neither from a
// running nor from an unknown one: 202 queued for all three.
func (g *Gateway) lookup(w http.ResponseWriter, ctx context.Context, client *jobs.Client, id string, claim *jobs.Claim) error {
	res, err := client.Get(ctx, id)
	if err == nil {
		return writeResult(w, claim, res)
	}
	if !errors.Is(err, jobs.ErrNotFound) {
		return err
	}
	phase, err := client.Phase(ctx, id)
	if errors.Is(err, jobs.ErrNotTenants) {
		phase, err = jobs.PhaseQueued, nil
	}
	if errors.Is(err, jobs.ErrNotFound) {
		// It may have finished between the two looks.
		if res, err := client.Get(ctx, id); err == nil {
			return writeResult(w, claim, res)
		}
	}
	if err != nil {
		return err
	}
	accepted(w, id, string(phase))
	return nil
}

// cancel: POST /v1/jobs/{id}/cancel: 200 with the canceled result, 202
// when the cancel is recorded but no worker has carried it out yet, 409
// when the job had already finished, 404 for an unknown ID.
func (g *Gateway) cancel(w http.ResponseWriter, r *http.Request, tok *Token) error {
	id, err := g.pathJob(r, tok)
	if err != nil {
		return err
	}
	res, err := g.views.of(tok).Client().Cancel(r.Context(), id)
	switch {
	case err == nil:
		g.log.Info("job canceled", "job_id", id, "token", tokenName(tok))
		writeJSON(w, http.StatusOK, res)
		return nil
	case errors.Is(err, jobs.ErrCancelPending):
		g.log.Info("job cancel requested", "job_id", id, "token", tokenName(tok))
		writeJSON(w, http.StatusAccepted, Pending{ID: id, Status: statusCanceling})
		return nil
	case errors.Is(err, jobs.ErrFinished) && res != nil:
		return apiErr(http.StatusConflict, CodeAlreadyFinished, "the job already finished: %s", res.Status)
	}
	return err
}

// accepted answers 202 for a job without a result, pointing at where it
// will be.
func accepted(w http.ResponseWriter, id, status string) {
	w.Header().Set("Location", "/v1/jobs/"+id)
	writeJSON(w, http.StatusAccepted, Pending{ID: id, Status: status})
}

// waitParam reads ?wait= (a duration such as 30s, or seconds), shortened
// to MaxWait. Absent or 0 means no wait.
func (g *Gateway) waitParam(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	d, err := limits.ParseDuration(v)
	if err != nil {
		return 0, apiErr(http.StatusBadRequest, CodeInvalidRequest, "wait: %v", err)
	}
	return min(d.D(), g.cfg.MaxWait), nil
}

// jobFields are the JSON names of jobs.Job's fields.
var jobFields = func() map[string]bool {
	m := map[string]bool{}
	t := reflect.TypeFor[jobs.Job]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			m[name] = true
		}
	}
	return m
}()

// decodeJob parses a job from a request body, telling apart a body that
// is not JSON, a field the API does not know, and a job that is invalid.
func decodeJob(data []byte) (*jobs.Job, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil || top == nil {
		return nil, apiErr(http.StatusBadRequest, CodeInvalidJSON, "the body must be one JSON object (a job)")
	}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		if !jobFields[k] {
			return nil, apiErr(http.StatusBadRequest, CodeUnknownField, "unknown field %q", k)
		}
	}
	return jobs.Decode(data, len(data))
}

// admit applies the gateway's rules to a job a token submits: its ID and
// workspaces are named in the token's scope (qualified for a tenant's,
// refused when another's), the token may use the queue, its name goes on
// the job, and reply_to is refused.
func (g *Gateway) admit(job *jobs.Job, tok *Token, v *view) error {
	if job.ReplyTo != "" {
		// A reply subject makes the worker publish into NATS with its own
		// permissions: not something to hand to every HTTP caller.
		return apiErr(http.StatusBadRequest, CodeInvalidJob, "reply_to: not accepted over HTTP (GET /v1/jobs/{id} returns the result)")
	}
	// A job whose ID or workspace is <tenant>.<name> is run by the worker
	// as that tenant's, in its workspaces: a token names only its own
	// scope's.
	var err error
	if job.ID, err = scoped(v, "id", job.ID, v.Job); err != nil {
		return err
	}
	if job.Workspace != "" {
		if job.Workspace, err = scoped(v, "workspace", job.Workspace, v.Workspace); err != nil {
			return err
		}
	}
	if f := job.WorkspaceFrom; f != nil {
		from := *f
		if from.Name, err = scoped(v, "workspace_from", f.Name, v.Workspace); err != nil {
			return err
		}
		job.WorkspaceFrom = &from
	}
	queue := job.Queue
	if queue == "" {
		queue = jobs.DefaultQueue
	}
	if tok != nil && !tok.Allows(queue) {
		return apiErr(http.StatusForbidden, CodeForbidden, "token %q may not submit to queue %q", tok.Name, queue)
	}
	_, given := job.Labels[TokenLabel]
	if tok == nil && !given {
		return nil
	}
	labels := maps.Clone(job.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	delete(labels, TokenLabel) // only the gateway says who submitted a job
	if tok != nil {
		labels[TokenLabel] = tok.Name
	}
	job.Labels = labels
	return nil
}

// ownLabels refuses a submitted job's sandfleet.* labels but the token's
// (which admit replaces): they are the fleet's, and a job labelled
// sandfleet.batch=B would count in batch B's report.
func ownLabels(job *jobs.Job) error {
	for _, k := range slices.Sorted(maps.Keys(job.Labels)) {
		if strings.HasPrefix(k, field.ReservedLabels) && k != TokenLabel {
			return apiErr(http.StatusBadRequest, CodeInvalidJob, "labels: %q: labels named %s* are the fleet's own", shorten.Text(k, 70), field.ReservedLabels)
		}
	}
	return nil
}

func tokenName(tok *Token) string {
	if tok == nil {
		return ""
	}
	return tok.Name
}

// scoped names a job's field as the token's scope does, or refuses it.
func scoped(v *view, field, name string, in func(string) (string, error)) (string, error) {
	q, err := in(name)
	if err == nil {
		return q, nil
	}
	whose := "a tenant's: the jobs and workspaces of tenant T are reached with a token of T (tenant=T)"
	if v.Tenant() != "" {
		whose = fmt.Sprintf("not tenant %s's: this token's are %s.<name>", v.Tenant(), v.Tenant())
	}
	return "", apiErr(http.StatusBadRequest, CodeInvalidJob, "%s: %q is %s", field, shorten.Text(name, 140), whose)
}

// pathJob is the job ID the path names, as the token's scope names it: 404
// for one that is no ID, or that is outside the scope (another tenant's;
// a tenant's for a token of none), whether it exists or not.
func (g *Gateway) pathJob(r *http.Request, tok *Token) (string, error) {
	id := r.PathValue("id")
	if !jobs.ValidID(id) {
		return "", apiErr(http.StatusNotFound, CodeNotFound, "no job with this id (ids match [A-Za-z0-9_-]{1,128})")
	}
	q, err := g.views.of(tok).Job(id)
	if err != nil {
		return "", apiErr(http.StatusNotFound, CodeNotFound, "no job with this id")
	}
	return q, nil
}
