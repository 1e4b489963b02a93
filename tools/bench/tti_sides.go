package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// The sides of (t): a worker's HTTP API as a client calls it, and the same
// hardened container by hand.

// httpWorker is a worker process with its HTTP API, reached over HTTP only
// (so that another build's worker, whose topology may differ, is measured
// the same way).
type httpWorker struct {
	w    *workerProc
	base string
	nats string // its embedded server's URL, with the credentials
	hc   *http.Client
}

// startHTTPWorker starts bin --embedded --http on a free port with its
// defaults and the space-separated extra flags, and waits for its API.
func startHTTPWorker(ctx context.Context, rg *rig, bin, name, extra string) (*httpWorker, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	w, url, exited, err := launchWorker(bin, name, slices.Concat([]string{"--http", addr}, strings.Fields(extra), rg.image)...)
	if err != nil {
		return nil, err
	}
	rg.undo = append(rg.undo, w.stop)
	h := &httpWorker{w: w, base: "http://" + addr, nats: url, hc: &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0},
		Timeout:   3 * time.Minute,
	}}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		select {
		case <-exited:
			return nil, w.fail(errors.New("the worker exited"))
		default:
		}
		// An unknown job's 404 says the API and the queue behind it answer.
		status, _, err := h.call(ctx, "GET", "/v1/jobs/bench-none", nil, nil)
		if status == http.StatusNotFound {
			return h, nil
		}
		if time.Now().After(deadline) {
			return nil, w.fail(fmt.Errorf("the worker's HTTP API never answered: %d %v", status, err))
		}
	}
}

// call sends body as JSON and decodes a 2xx answer into out; any other
// status is an error that carries the answer's body.
func (h *httpWorker) call(ctx context.Context, method, path string, body, out any) (int, http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	res, err := h.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return res.StatusCode, res.Header, err
	}
	if res.StatusCode >= 300 {
		return res.StatusCode, res.Header, fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, bytes.TrimSpace(data))
	}
	if out != nil {
		return res.StatusCode, res.Header, json.Unmarshal(data, out)
	}
	return res.StatusCode, res.Header, nil
}

// job submits code with a long poll and wants its result: print(1)'s
// stdout, succeeded. A 202 (no result within the wait) waits on.
func (h *httpWorker) job(code string) func(context.Context) (func(), error) {
	return func(ctx context.Context) (func(), error) {
		var res jobs.Result
		status, _, err := h.call(ctx, "POST", "/v1/jobs?wait=60s", map[string]any{"image": "python", "code": code}, &res)
		for err == nil && status == http.StatusAccepted {
			status, _, err = h.call(ctx, "GET", "/v1/jobs/"+res.ID+"?wait=60s", nil, &res)
		}
		if err != nil {
			return nil, err
		}
		if res.Status != jobs.StatusSucceeded || res.Stdout == "" {
			return nil, fmt.Errorf("job %s: %s %q %q", res.ID, res.Status, res.Stdout, res.Error)
		}
		return nil, nil
	}
}

// session creates a session and runs its first command; the delete comes
// after the clock stops.
func (h *httpWorker) session(ctx context.Context) (func(), error) {
	var info struct{ ID string }
	if status, hdr, err := h.call(ctx, "POST", "/v1/sessions", map[string]any{"image": "python"}, &info); err != nil {
		if ra := hdr.Get("Retry-After"); status == http.StatusTooManyRequests && ra != "" {
			err = fmt.Errorf("%w, Retry-After: %s", err, ra)
		}
		return nil, err
	}
	del := func() { _, _, _ = h.call(context.Background(), "DELETE", "/v1/sessions/"+info.ID, nil, nil) }
	var r struct {
		ExitCode *int `json:"exit_code"`
	}
	if _, _, err := h.call(ctx, "POST", "/v1/sessions/"+info.ID+"/exec", map[string]any{"cmd": []string{"true"}}, &r); err != nil {
		return del, err
	}
	if r.ExitCode == nil || *r.ExitCode != 0 {
		return del, fmt.Errorf("first exec: exit %v", r.ExitCode)
	}
	return del, nil
}

// dockerSession is a session's baseline: the hardened container of a job,
// detached with sleep as its command, then docker exec.
type dockerSession struct {
	e    *executor.Executor
	args []string // docker run -d ... IMAGE sleep infinity
}

func newDockerSession(ctx context.Context, image string) (*dockerSession, error) {
	e, err := executor.New(executor.Config{WorkerID: "bench-docker-session", Presets: presetsFor(image)})
	if err != nil {
		return nil, err
	}
	args, err := e.DockerRunArgs("python")
	if err != nil {
		e.Close()
		return nil, err
	}
	// --rm -i off (a detached container), sleep as its command.
	args = args[2:]
	img := args[len(args)-1]
	args = append(append([]string{"run", "-d", "--entrypoint", "sleep"}, args[:len(args)-1]...), img, "infinity")
	return &dockerSession{e: e, args: args}, nil
}

func (d *dockerSession) close() { d.e.Close() }

// docker runs the docker CLI and returns its trimmed stdout.
func (d *dockerSession) docker(ctx context.Context, a ...string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", a...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("docker %s: %w: %s", a[0], err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// start runs the detached container and returns its ID.
func (d *dockerSession) start(ctx context.Context) (string, error) { return d.docker(ctx, d.args...) }

// remove removes a container start made.
func (d *dockerSession) remove(id string) { _, _ = d.docker(context.Background(), "rm", "-f", id) }

// ready is (t)'s side: docker run -d, then docker exec true; removed after
// the clock stops.
func (d *dockerSession) ready(ctx context.Context) (func(), error) {
	id, err := d.start(ctx)
	if err != nil {
		return nil, err
	}
	rm := func() { d.remove(id) }
	if _, err := d.docker(ctx, "exec", id, "true"); err != nil {
		return rm, err
	}
	return rm, nil
}
