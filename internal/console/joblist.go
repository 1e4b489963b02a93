package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/sandfleet/sandfleet/internal/jobindex"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/scope"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// jobList: GET /jobs?queue=&status=&label=K=V&q=ID&before=SEQ.
type jobListPage struct {
	Queue, Status, Label, Q string
	Statuses                []string
	Rows                    []jobRow
	Page                    *jobindex.Page
	Older, Newest           string
	NoIndex                 bool
	Tenant                  string // a tenant viewer's, whose credentials read no index
}

func (jobListPage) frame() frame { return frame{"Jobs", "jobs", 0} }

// jobRow is a listed job; Status is the stored result's when the index
// still says running but RESULTS has it.
type jobRow struct {
	*records.Summary
	Shown string
}

func (c *Console) jobList(w http.ResponseWriter, r *http.Request, s *session) error {
	ctx, cancel := pageCtx(r)
	defer cancel()
	p, f, err := parseJobList(r)
	if err != nil {
		return err
	}
	// An exact ID is the job's page.
	if p.Q != "" && f.before == 0 && jobs.ValidID(p.Q) {
		if id, err := s.viewer.Scope.Job(p.Q); err == nil && c.known(r, s, id) {
			http.Redirect(w, r, jobURL(id), http.StatusSeeOther)
			return nil
		}
	}
	idx, err := c.index(ctx, s)
	if errors.Is(err, jobindex.ErrNoIndex) || errors.Is(err, jobs.ErrNotTenants) {
		p.NoIndex, p.Tenant = true, s.viewer.Scope.Tenant()
		c.render(w, http.StatusOK, "jobs", s, p)
		return nil
	}
	if err != nil {
		return err
	}
	page, err := idx.List(ctx, jobindex.Query{Queue: p.Queue, Before: f.before, Limit: c.cfg.PageSize, MaxScan: c.cfg.MaxScan,
		Match: f.match(s.viewer.Scope), Contains: f.contains()})
	if err != nil {
		return err
	}
	p.Page, p.Rows = page, c.jobRows(ctx, s, page)
	p.Newest, p.Older = p.links(page)
	c.render(w, http.StatusOK, "jobs", s, p)
	return nil
}

// jobFilter is what the job list's query asks of each listed job.
type jobFilter struct {
	status, q          string
	label              bool
	labelKey, labelVal string
	before             uint64 // the page's start: the index's sequence, 0 for the newest
}

// parseJobList reads the job list's query: the page's fields and the
// filter, or a 400 naming the parameter that is wrong.
func parseJobList(r *http.Request) (jobListPage, jobFilter, error) {
	q := r.URL.Query()
	p := jobListPage{Queue: q.Get("queue"), Status: q.Get("status"), Label: q.Get("label"), Q: strings.TrimSpace(q.Get("q")),
		Statuses: []string{"running"}}
	for _, st := range jobs.Statuses {
		p.Statuses = append(p.Statuses, string(st))
	}
	f := jobFilter{status: p.Status, q: p.Q, label: p.Label != ""}
	if p.Queue != "" && !jobs.ValidQueue(p.Queue) {
		return p, f, badRequest("queue %q is not a queue name", p.Queue)
	}
	if p.Status != "" && !slices.Contains(p.Statuses, p.Status) {
		return p, f, badRequest("status %q is not one of %s", p.Status, strings.Join(p.Statuses, ", "))
	}
	var hasLabel bool
	f.labelKey, f.labelVal, hasLabel = strings.Cut(p.Label, "=")
	if p.Label != "" && (!hasLabel || f.labelKey == "") {
		return p, f, badRequest("label %q: write key=value", p.Label)
	}
	if v := q.Get("before"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return p, f, badRequest("before %q is not a sequence", v)
		}
		f.before = n
	}
	return p, f, nil
}

// match is the filter as the index's Match: a job the viewer's scope
// shows and the query asks for.
func (f jobFilter) match(sc scope.Scope) func(j *records.Summary) bool {
	return func(j *records.Summary) bool {
		switch {
		case !sc.Shows(j.ID):
			return false
		case f.status == "running" && j.State != records.Running:
			return false
		case f.status != "" && f.status != "running" && string(j.Status) != f.status:
			return false
		case f.label && j.Labels[f.labelKey] != f.labelVal:
			return false
		case f.q != "" && !strings.Contains(j.ID, f.q):
			return false
		}
		return true
	}
}

// contains is what match checks, as bytes the raw record must hold: most
// records of a rare filter are then skipped without being decoded.
func (f jobFilter) contains() [][]byte {
	var contains [][]byte
	switch f.status {
	case "":
	case "running":
		contains = append(contains, []byte(`"state":"running"`))
	default:
		contains = append(contains, []byte(`"status":"`+f.status+`"`))
	}
	if f.label {
		kv, _ := json.Marshal(map[string]string{f.labelKey: f.labelVal})
		contains = append(contains, kv[1:len(kv)-1])
	}
	if f.q != "" && jobs.ValidID(f.q) {
		contains = append(contains, []byte(f.q))
	}
	return contains
}

// jobRows are a page's jobs as listed: a job the index says runs shows
// the status RESULTS has, when it has one.
func (c *Console) jobRows(ctx context.Context, s *session, page *jobindex.Page) []jobRow {
	var rows []jobRow
	for _, j := range page.Jobs {
		row := jobRow{Summary: j, Shown: string(j.Status)}
		if j.State == records.Running {
			row.Shown = "running"
			// The index may be behind (a record dropped, a cancel stored
			// by a client): RESULTS is the authority, one get per row.
			if res, err := s.client().Get(ctx, j.ID); err == nil {
				row.Shown = string(res.Status)
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// links are the list's newest page and, when there is one, its next
// older page, with the same query.
func (p jobListPage) links(page *jobindex.Page) (newest, older string) {
	link := url.Values{}
	for k, v := range map[string]string{"queue": p.Queue, "status": p.Status, "label": p.Label, "q": p.Q} {
		if v != "" {
			link.Set(k, v)
		}
	}
	newest = "/jobs?" + link.Encode()
	if page.Next != 0 {
		link.Set("before", strconv.FormatUint(page.Next, 10))
		older = "/jobs?" + link.Encode()
	}
	return newest, older
}
