package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/internal/jobindex"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/webauth"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// fleet: GET / — every worker, every queue, the dead letters.
type fleetPage struct {
	// Tenant is a tenant viewer's: the fleet's status is not its to read.
	Tenant      string
	Status      *jobs.FleetStatus
	Now         time.Time
	Dead        []*records.Summary
	DeadTotal   int
	NoIndex     bool
	StreamBytes uint64
}

func (fleetPage) frame() frame { return frame{"Fleet", "fleet", 3} }

func (c *Console) fleet(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx, cancel := pageCtx(r)
	defer cancel()
	st, err := s.client().Status(ctx)
	if errors.Is(err, jobs.ErrNotTenants) {
		c.render(w, http.StatusOK, "fleet", s, fleetPage{Tenant: s.viewer.Scope.Tenant(), Now: time.Now()})
		return nil
	}
	if err != nil {
		return err
	}
	p := fleetPage{Status: st, Now: time.Now()}
	idx, err := c.index(ctx, s)
	switch {
	case errors.Is(err, jobindex.ErrNoIndex):
		p.NoIndex = true
	case err != nil:
		return err
	default:
		if p.Dead, p.DeadTotal, err = idx.DeadLetters(ctx, 20); err != nil {
			return err
		}
		p.Dead = slices.DeleteFunc(p.Dead, func(j *records.Summary) bool { return !s.viewer.Scope.Shows(j.ID) })
	}
	c.render(w, http.StatusOK, "fleet", s, p)
	return nil
}

// known reports whether the fleet may know a job of this ID: a tenant's
// viewer, who cannot read the queue, may have one queued.
func (c *Console) known(r *http.Request, s *session, id string) bool {
	ctx, cancel := pageCtx(r)
	defer cancel()
	if _, err := s.client().Get(ctx, id); err == nil {
		return true
	}
	if _, err := s.client().Phase(ctx, id); err == nil || errors.Is(err, jobs.ErrNotTenants) {
		return true
	}
	if idx, err := c.index(ctx, s); err == nil {
		if _, err := idx.Summary(ctx, id); err == nil {
			return true
		}
	}
	return false
}

// job: GET /jobs/{id}.
type jobPage struct {
	ID        string
	Status    string
	Final     bool
	Result    *jobs.Result
	Summary   *records.Summary
	Spec      *records.Spec
	Queue     string
	Batch     string
	Labels    map[string]string
	Stdout    string
	Stderr    string
	StdoutCut bool
	StderrCut bool
	// Events is the gateway's stream of the job's events, which the
	// page follows while the job runs.
	Events    string
	Artifacts []artifactRow
	// Figures are the job's display outputs shown inline; FiguresLeft
	// counts those the page leaves out and those the job's bounds dropped.
	Figures     []figure
	FiguresLeft int
	CanCancel   bool
	CSRF        string
	Note        string
}

type artifactRow struct {
	jobs.Artifact
	URL string
}

func (p jobPage) frame() frame { return frame{"Job " + p.ID, "jobs", 0} }

func (c *Console) job(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx, cancel := pageCtx(r)
	defer cancel()
	id := r.PathValue("id")
	if !jobs.ValidID(id) {
		return notFound("no job with this ID (IDs match [A-Za-z0-9_-]{1,128})")
	}
	id, err := s.viewer.Scope.Job(id)
	if err != nil {
		return notFound("no such job (never submitted, or its result expired)")
	}
	client := s.client()
	p := jobPage{ID: id, Note: noteText(r.URL.Query().Get("note"))}
	res, err := client.Get(ctx, id)
	switch {
	case err == nil:
		p.Result, p.Status, p.Final, p.Labels = res, string(res.Status), true, res.Labels
	case !errors.Is(err, jobs.ErrNotFound):
		return err
	}
	idx, ierr := c.index(ctx, s)
	if ierr != nil && !errors.Is(ierr, jobindex.ErrNoIndex) && !errors.Is(ierr, jobs.ErrNotTenants) {
		return ierr
	}
	if idx != nil {
		if sum, err := idx.Summary(ctx, id); err == nil {
			p.Summary, p.Queue = sum, sum.Queue
			if p.Labels == nil {
				p.Labels = sum.Labels
			}
		}
		if spec, err := idx.Spec(ctx, id); err == nil {
			p.Spec = spec
		}
	}
	if !p.Final {
		job, phase, err := client.PendingJob(ctx, id)
		switch {
		case errors.Is(err, jobs.ErrNotTenants):
			// A tenant cannot read the queue: its job is followed until
			// its result, whether queued, running or not there at all.
			p.Status = "queued or running"
		case err == nil:
			p.Status, p.Queue = string(phase), job.Queue
			if p.Spec == nil {
				p.Spec = records.NewJobSpec(job)
			}
			if p.Labels == nil {
				p.Labels = job.Labels
			}
		case errors.Is(err, jobs.ErrNotFound):
			// Finished between the two looks, or unknown.
			if got, gerr := client.Get(ctx, id); gerr == nil {
				res = got // the output below is this result's
				p.Result, p.Status, p.Final, p.Labels = res, string(res.Status), true, res.Labels
			} else if p.Summary == nil {
				return err
			} else {
				p.Status = string(p.Summary.State)
			}
		default:
			return err
		}
	}
	if p.Queue == "" && p.Spec != nil {
		p.Queue = p.Spec.Queue
	}
	p.Batch = records.BatchOf(p.Labels)
	if p.Batch == records.NoBatch {
		p.Batch = ""
	}
	if p.Final {
		p.Stdout, p.StdoutCut = c.output(res.StdoutBytes(), res.StdoutTruncated)
		p.Stderr, p.StderrCut = c.output(res.StderrBytes(), res.StderrTruncated)
		for _, a := range res.Artifacts {
			p.Artifacts = append(p.Artifacts, artifactRow{Artifact: a, URL: artifactURL(id, a.Name)})
		}
		p.Figures, p.FiguresLeft = figures(res.Display)
		p.FiguresLeft += res.DisplayDropped
	} else {
		p.Events = "/v1/jobs/" + url.PathEscape(id) + "/events"
		p.CanCancel, p.CSRF = s.viewer.CanCancel, s.csrf
	}
	c.render(w, http.StatusOK, "job", s, p)
	return nil
}

// output is a stream as the page shows it: text, cut to MaxOutput.
func (c *Console) output(b []byte, truncated bool) (string, bool) {
	cut := truncated
	if len(b) > c.cfg.MaxOutput {
		b, cut = b[:c.cfg.MaxOutput], true
	}
	return strings.ToValidUTF8(string(b), "\uFFFD"), cut
}

// The notes a redirect may ask a job's page to show: fixed texts, so that
// a link cannot make the page say anything else.
var notes = map[string]string{
	"canceled":  "Canceled.",
	"canceling": "The cancel is recorded: the job ends as canceled when a worker takes it.",
	"finished":  "The job had already finished: nothing to cancel.",
}

func noteText(k string) string { return notes[k] }

// cancel: POST /jobs/{id}/cancel.
func (c *Console) cancel(w http.ResponseWriter, r *http.Request, s *session) error {
	id, err := s.viewer.Scope.Job(r.PathValue("id"))
	if !jobs.ValidID(r.PathValue("id")) || err != nil {
		return notFound("no job with this ID")
	}
	if !s.viewer.CanCancel {
		return &pageError{status: http.StatusForbidden, msg: "this token is read-only (role=read): it may not cancel jobs"}
	}
	ctx, cancel := pageCtx(r)
	defer cancel()
	note := "canceled"
	_, err = s.client().Cancel(ctx, id)
	switch {
	case err == nil:
	case errors.Is(err, jobs.ErrCancelPending):
		note = "canceling"
	case errors.Is(err, jobs.ErrFinished):
		note = "finished"
	default:
		return err
	}
	c.log.Info("job canceled from the console", "job_id", id, "token", s.viewer.Name, "outcome", note)
	http.Redirect(w, r, jobURL(id)+"?note="+note, http.StatusSeeOther)
	return nil
}

// batchList: GET /batches — the batches of the newest index records.
type batchListPage struct {
	Batches []batchRow
	Scanned uint64
	NoIndex bool
	Tenant  string // a tenant viewer's, whose credentials read no index
}

type batchRow struct {
	Name     string
	Jobs     int
	Running  int
	Passed   int
	Finished int
	Last     time.Time
}

func (batchListPage) frame() frame { return frame{"Batches", "batches", 0} }

func (c *Console) batchList(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx, cancel := pageCtx(r)
	defer cancel()
	idx, err := c.index(ctx, s)
	if errors.Is(err, jobindex.ErrNoIndex) || errors.Is(err, jobs.ErrNotTenants) {
		c.render(w, http.StatusOK, "batches", s, batchListPage{NoIndex: true, Tenant: s.viewer.Scope.Tenant()})
		return nil
	}
	if err != nil {
		return err
	}
	rows := map[string]*batchRow{}
	page, err := idx.List(ctx, jobindex.Query{MaxScan: c.cfg.MaxScan, Limit: 1 << 30, Contains: [][]byte{[]byte(`"` + jobs.BatchLabel + `":`)}, Match: func(j *records.Summary) bool {
		b := j.Batch()
		if b == "" || !s.viewer.Scope.Shows(j.ID) {
			return false
		}
		row := rows[b]
		if row == nil {
			row = &batchRow{Name: b}
			rows[b] = row
		}
		row.Jobs++
		if j.State == records.Running {
			row.Running++
		} else {
			row.Finished++
			if j.Status == jobs.StatusSucceeded {
				row.Passed++
			}
		}
		if t := j.FinishedAt; t != nil && t.After(row.Last) {
			row.Last = *t
		} else if t := j.StartedAt; t != nil && t.After(row.Last) {
			row.Last = *t
		}
		return false
	}})
	if err != nil {
		return err
	}
	p := batchListPage{Scanned: page.Scanned}
	for _, row := range rows {
		p.Batches = append(p.Batches, *row)
	}
	slices.SortFunc(p.Batches, func(a, b batchRow) int { return b.Last.Compare(a.Last) })
	c.render(w, http.StatusOK, "batches", s, p)
	return nil
}

// workspaceList: GET /workspaces.
type workspaceListPage struct {
	Heads []*jobs.WorkspaceHead
	None  bool
	Cut   int
}

func (workspaceListPage) frame() frame { return frame{"Workspaces", "workspaces", 0} }

// maxWorkspaces bounds the heads the list shows.
const maxWorkspaces = 500

func (c *Console) workspaceList(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx, cancel := pageCtx(r)
	defer cancel()
	heads, err := s.client().Workspaces(ctx)
	if errors.Is(err, jobs.ErrNoWorkspaces) {
		c.render(w, http.StatusOK, "workspaces", s, workspaceListPage{None: true})
		return nil
	}
	if err != nil {
		return err
	}
	heads = slices.DeleteFunc(heads, func(h *jobs.WorkspaceHead) bool { return !s.viewer.Scope.Shows(h.Name) })
	slices.SortFunc(heads, func(a, b *jobs.WorkspaceHead) int { return b.UpdatedAt.Compare(a.UpdatedAt) })
	p := workspaceListPage{Heads: heads}
	if len(heads) > maxWorkspaces {
		p.Heads, p.Cut = heads[:maxWorkspaces], len(heads)-maxWorkspaces
	}
	c.render(w, http.StatusOK, "workspaces", s, p)
	return nil
}

// workspace: GET /workspaces/{name}.
type workspacePage struct {
	Head      *jobs.WorkspaceHead
	Revisions []jobs.Revision
	Jobs      []*records.Summary
	Scanned   uint64
	Cut       bool
}

func (p workspacePage) frame() frame {
	return frame{"Workspace " + p.Head.Name, "workspaces", 0}
}

func (c *Console) workspace(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx, cancel := pageCtx(r)
	defer cancel()
	name, err := s.viewer.Scope.Workspace(r.PathValue("name"))
	if err != nil {
		return notFound("no workspace %q (never made, removed, or expired)", r.PathValue("name"))
	}
	client := s.client()
	h, err := client.Workspace(ctx, name)
	switch {
	case errors.Is(err, jobs.ErrInvalidJob), errors.Is(err, jobs.ErrNoWorkspace), errors.Is(err, jobs.ErrNoWorkspaces):
		return notFound("no workspace %q (never made, removed, or expired)", name)
	case err != nil:
		return err
	}
	p := workspacePage{Head: h}
	if p.Revisions, err = client.Revisions(ctx, h); err != nil {
		return err
	}
	if idx, err := c.index(ctx, s); err == nil {
		ws, _ := json.Marshal(name)
		page, err := idx.List(ctx, jobindex.Query{Limit: c.cfg.PageSize, MaxScan: c.cfg.MaxScan,
			Contains: [][]byte{append([]byte(`"workspace":`), ws...)},
			Match:    func(j *records.Summary) bool { return j.Workspace == name }})
		if err != nil {
			return err
		}
		p.Jobs, p.Scanned, p.Cut = page.Jobs, page.Scanned, page.Next != 0
	} else if !errors.Is(err, jobindex.ErrNoIndex) && !errors.Is(err, jobs.ErrNotTenants) {
		return err
	}
	c.render(w, http.StatusOK, "workspace", s, p)
	return nil
}

// loginPage: GET /login.
type loginPage struct {
	Next  string
	Error string
	Open  bool
}

func (loginPage) frame() frame { return frame{"Log in", "", 0} }

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	headers(w)
	c.render(w, http.StatusOK, "login", nil, loginPage{Next: safeNext(r.URL.Query().Get("next")), Open: c.cfg.Auth == nil})
}

// login: POST /login — the token opens a session, whose random ID goes
// into an HttpOnly, SameSite=Strict cookie; the token goes into neither
// the cookie nor a page.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	headers(w)
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	next := safeNext(r.PostFormValue("next"))
	if c.cfg.Auth == nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	if !webauth.SameOrigin(r) {
		c.render(w, http.StatusForbidden, "login", nil, loginPage{Next: next, Error: "the form was posted from another site"})
		return
	}
	secret := strings.TrimSpace(r.PostFormValue("token"))
	v := c.cfg.Auth(secret)
	if v == nil {
		c.render(w, http.StatusUnauthorized, "login", nil, loginPage{Next: next, Error: "this token is not valid"})
		return
	}
	id, err := c.logins.open(secret)
	if err != nil {
		c.fail(w, r, nil, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: webauth.Secure(r), MaxAge: int(c.cfg.SessionTTL.Seconds())})
	c.log.Info("console login", "token", v.Name)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout: POST /logout ends the session: its cookie, sent again, opens
// nothing.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *session) error {
	if s.loginID != "" {
		c.logins.close(s.loginID)
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: webauth.Secure(r), MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}

// safeNext keeps a redirect target on the console: a path of its own,
// never another host ("//evil", "/\evil").
func safeNext(next string) string {
	// A control byte too: browsers drop tabs and newlines from a URL, so
	// "/\t/evil.example" arrives as "//evil.example", another site.
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsRune(next, '\\') ||
		strings.ContainsFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "/"
	}
	return next
}
