package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// (s) sessions: time to interactive (create → the first command's
// result) and a command's round trip, through a worker's HTTP API, against
// the same hardened container by hand, in the same run: docker run -d,
// then docker exec.

type sessionFigures struct {
	n                     int
	tti, exec, code       []time.Duration // sandfleet: create+first exec, exec true, run_code 1+1
	dockerTTI, dockerExec []time.Duration // docker run -d + docker exec true, docker exec true
}

func sessionsPhase(ctx context.Context, o options) (*sessionFigures, error) {
	f := &sessionFigures{n: o.n}
	if err := dockerSessions(ctx, o, f); err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	w, err := startWorker(ctx, o, "sessions", "--http", httpAddr, "--slots", "1", "--pool", "2", "--sessions", "4")
	if err != nil {
		return nil, err
	}
	defer w.stop()
	base := "http://" + httpAddr
	call := func(method, path string, body any, out any) error {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequestWithContext(ctx, method, base+path, rd)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		data, _ := io.ReadAll(res.Body)
		if res.StatusCode >= 300 {
			return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, data)
		}
		if out != nil {
			return json.Unmarshal(data, out)
		}
		return nil
	}
	for deadline := time.Now().Add(30 * time.Second); call("GET", "/v1/sessions", nil, nil) != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return nil, w.fail(fmt.Errorf("the worker's HTTP API never answered"))
		}
	}
	var id string
	for i := range o.n + 1 {
		// The pool refills between creates: warm, as a fleet with a pool is.
		time.Sleep(1500 * time.Millisecond)
		var info struct{ ID string }
		t := time.Now()
		if err := call("POST", "/v1/sessions", map[string]any{"image": "python"}, &info); err != nil {
			return nil, w.fail(err)
		}
		var r struct {
			ExitCode *int `json:"exit_code"`
		}
		if err := call("POST", "/v1/sessions/"+info.ID+"/exec", map[string]any{"cmd": []string{"true"}}, &r); err != nil || r.ExitCode == nil || *r.ExitCode != 0 {
			return nil, w.fail(fmt.Errorf("first exec: %v %+v", err, r))
		}
		if i > 0 { // the first is a warm-up
			f.tti = append(f.tti, time.Since(t))
		}
		if i < o.n {
			_ = call("DELETE", "/v1/sessions/"+info.ID, nil, nil)
		} else {
			id = info.ID
		}
	}
	for range 5 * o.n {
		t := time.Now()
		if err := call("POST", "/v1/sessions/"+id+"/exec", map[string]any{"cmd": []string{"true"}}, nil); err != nil {
			return nil, err
		}
		f.exec = append(f.exec, time.Since(t))
		t = time.Now()
		var r struct{ Text string }
		if err := call("POST", "/v1/sessions/"+id+"/code", map[string]any{"code": "1+1"}, &r); err != nil || r.Text != "2" {
			return nil, fmt.Errorf("run_code: %v %q", err, r.Text)
		}
		f.code = append(f.code, time.Since(t))
	}
	_ = call("DELETE", "/v1/sessions/"+id, nil, nil)
	return f, nil
}

// dockerSessions is the baseline: the hardened container by hand.
func dockerSessions(ctx context.Context, o options, f *sessionFigures) error {
	ds, err := newDockerSession(ctx, o.image)
	if err != nil {
		return err
	}
	defer ds.close()
	var last string
	for i := range o.n + 1 {
		t := time.Now()
		id, err := ds.start(ctx)
		if err != nil {
			return err
		}
		if _, err := ds.docker(ctx, "exec", id, "true"); err != nil {
			return err
		}
		if i > 0 {
			f.dockerTTI = append(f.dockerTTI, time.Since(t))
		}
		if i < o.n {
			ds.remove(id)
		} else {
			last = id
		}
	}
	defer ds.remove(last)
	for range 5 * o.n {
		t := time.Now()
		if _, err := ds.docker(ctx, "exec", last, "true"); err != nil {
			return err
		}
		f.dockerExec = append(f.dockerExec, time.Since(t))
	}
	return nil
}

func (f *sessionFigures) print(w io.Writer) {
	if f == nil {
		return
	}
	ratio := func(a, b []time.Duration) string {
		return fmt.Sprintf("%.2f×", float64(pct(a, 0.5))/float64(pct(b, 0.5)))
	}
	fmt.Fprintf(w, "\n(s) sessions over HTTP vs the same hardened container by hand (%d creates, %d calls)\n", f.n, 5*f.n)
	fmt.Fprintf(w, "  %-44s %9s %9s %9s\n", "", "p50", "p99", "vs docker")
	row := func(name string, d, base []time.Duration) {
		r := ""
		if base != nil {
			r = ratio(d, base)
		}
		fmt.Fprintf(w, "  %-44s %9s %9s %9s\n", name, ms1(pct(d, 0.5)), ms1(pct(d, 0.99)), r)
	}
	row("docker run -d + docker exec true", f.dockerTTI, nil)
	row("sandfleet: create + first exec (pool warm)", f.tti, f.dockerTTI)
	row("docker exec true", f.dockerExec, nil)
	row("sandfleet: exec true", f.exec, f.dockerExec)
	row("sandfleet: run_code 1+1", f.code, nil)
	fmt.Fprintf(w, "  load average %s\n", loadAvg())
	_ = os.Stdout.Sync()
}

func ms1(d time.Duration) string { return fmt.Sprintf("%.1f ms", msf(d)) }
