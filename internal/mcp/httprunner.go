package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/internal/shorten"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// HTTPRunner runs jobs through a gateway's HTTP API: POST /v1/jobs with a
// wait, then GET /v1/jobs/{id} with a wait until the result is there.
type HTTPRunner struct {
	URL   string // the gateway, e.g. http://127.0.0.1:8080
	Token string // its bearer token; "" for an open gateway
	// Client default: one without a timeout of its own (each request is
	// bounded by its wait and the call's context).
	Client *http.Client
}

var _ Runner = (*HTTPRunner)(nil)

// pollWait is the ?wait= of each request; the gateway shortens it to its
// own bound.
const pollWait = "50s"

// APIError is an error answer of the gateway.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("gateway: %d %s: %s", e.Status, e.Code, e.Message)
}

// Run submits job and polls for its result; when ctx ends first, it asks
// the gateway to cancel the job.
func (r *HTTPRunner) Run(ctx context.Context, job *jobs.Job) (*jobs.Result, error) {
	job.Normalize() // an ID of ours: a retried POST cannot run it twice
	body, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	res, err := r.result(ctx, http.MethodPost, "/v1/jobs?wait="+pollWait, body)
	for err == nil && res == nil {
		res, err = r.result(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(job.ID)+"?wait="+pollWait, nil)
	}
	if err != nil && ctx.Err() != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelGrace)
		defer cancel()
		if resp, cerr := r.do(cctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(job.ID)+"/cancel", nil); cerr == nil {
			resp.Body.Close()
		}
	}
	return res, err
}

// result makes one request: the result on 200, nil on 202 (not yet).
func (r *HTTPRunner) result(ctx context.Context, method, path string, body []byte) (*jobs.Result, error) {
	resp, err := r.do(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 2*jobs.MaxJobBytes))
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return jobs.DecodeResult(data)
	case http.StatusAccepted:
		return nil, nil
	}
	return nil, apiError(resp.StatusCode, data)
}

// Result reads GET /v1/jobs/{id}: jobs.ErrNotFound for 404, and for a job
// still queued or running (it has no artifacts yet).
func (r *HTTPRunner) Result(ctx context.Context, id string) (*jobs.Result, error) {
	res, err := r.result(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil)
	var ae *APIError
	if (err == nil && res == nil) || (errors.As(err, &ae) && ae.Status == http.StatusNotFound) {
		return nil, jobs.ErrNotFound
	}
	return res, err
}

// WriteArtifact downloads the artifact from GET /v1/jobs/{id}/artifacts/{name}.
func (r *HTTPRunner) WriteArtifact(ctx context.Context, res *jobs.Result, a jobs.Artifact, w io.Writer) error {
	var p strings.Builder
	for seg := range strings.SplitSeq(a.Name, "/") {
		p.WriteString("/" + url.PathEscape(seg))
	}
	resp, err := r.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(res.ID)+"/artifacts"+p.String(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return apiError(resp.StatusCode, data)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

func (r *HTTPRunner) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(r.URL, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	c := r.Client
	if c == nil {
		c = http.DefaultClient
	}
	return c.Do(req)
}

// apiError decodes the gateway's JSON error body.
func apiError(status int, data []byte) error {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(data, &e) != nil || e.Error.Code == "" {
		return &APIError{Status: status, Code: "unknown", Message: shorten.Text(string(data), 200)}
	}
	return &APIError{Status: status, Code: e.Error.Code, Message: e.Error.Message}
}

// Check asks the gateway for /v1/tools with the token: a wrong URL or
// token is found at start, not at the first call.
func (r *HTTPRunner) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := r.do(ctx, http.MethodGet, "/v1/tools?format=mcp", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return apiError(resp.StatusCode, data)
	}
	return nil
}

// ErrUnauthorized is what a 401 of the gateway is (errors.Is).
var ErrUnauthorized = errors.New("the gateway refused the token")

// Is lets errors.Is(err, ErrUnauthorized) see a 401.
func (e *APIError) Is(target error) bool {
	return target == ErrUnauthorized && e.Status == http.StatusUnauthorized
}
