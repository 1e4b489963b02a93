package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandfleet/sandfleet/internal/executor"
)

// (q) MCP: the job of (b) (print(1)) as run_code over MCP stdio (a
// `submit mcp --url` subprocess) and over MCP's streamable HTTP (the
// gateway's /mcp), beside the same job over REST (POST /v1/jobs?wait=),
// interleaved against one worker in the same run (-submit names the
// binary, perf.go's flag); and (q') each code
// context language's first cell (its interpreter's start) and next cell,
// over REST, in one session of the languages' image.

type mcpOptions struct {
	mcp        bool
	mcpOnly    bool
	langsImage string
	ctxRounds  int
}

func defineMCPFlags(fs *flag.FlagSet, o *mcpOptions) {
	fs.BoolVar(&o.mcp, "mcp", true, "run (q), MCP stdio and HTTP beside REST, and (q'), the code contexts' first and next cells")
	fs.BoolVar(&o.mcpOnly, "mcp-only", false, "run (q) and (q') alone")
	fs.StringVar(&o.langsImage, "langs-image", "", "the node preset's `IMAGE` for (q') (default "+executor.LangsImage+")")
	fs.IntVar(&o.ctxRounds, "context-rounds", 10, "fresh contexts per language in (q')")
}

type mcpFigures struct {
	n                int
	code             string
	rest, http, stdi []time.Duration
	langs            []string
	first, next      map[string][]time.Duration
}

func mcpPhase(ctx context.Context, o options) (*mcpFigures, error) {
	if _, err := os.Stat(o.submitBin); err != nil {
		return nil, fmt.Errorf("-submit %s: %w (make build)", o.submitBin, err)
	}
	cfg, err := benchPresets(o)
	if err != nil {
		return nil, err
	}
	defer os.Remove(cfg)
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	w, err := startWorker(ctx, o, "mcp", "--http", addr, "--slots", "3", "--pool", "3", "--sessions", "2", "--config", cfg)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	base := "http://" + addr
	f := &mcpFigures{n: o.n, code: o.code, first: map[string][]time.Duration{}, next: map[string][]time.Duration{}}
	if err := f.jobs(ctx, o, base); err != nil {
		return nil, w.fail(err)
	}
	if o.ctxRounds > 0 {
		if err := f.contexts(ctx, o, base); err != nil {
			return nil, w.fail(fmt.Errorf("contexts: %w", err))
		}
	}
	return f, nil
}

// benchPresets writes the worker's --config: the presets, with -image
// for python and -langs-image for node when given.
func benchPresets(o options) (string, error) {
	ps := executor.DefaultPresets()
	for name, img := range map[string]string{"python": o.image, "node": o.langsImage} {
		if p, ok := ps[name]; ok && img != "" {
			p.Image = img
			ps[name] = p
		}
	}
	data, err := json.Marshal(map[string]any{"presets": ps})
	if err != nil {
		return "", err
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("sandfleet-bench-mcp-%d.json", os.Getpid()))
	return path, os.WriteFile(path, data, 0o600)
}

// jobs runs the job each of the three ways in turn, n times after one
// warm-up round.
func (f *mcpFigures) jobs(ctx context.Context, o options, base string) error {
	client := mcp.NewClient(&mcp.Implementation{Name: "sandfleet-bench", Version: "1"}, nil)
	var hs *mcp.ClientSession
	err := pollFor(ctx, 30*time.Second, func() (err error) {
		hs, err = client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: base + "/mcp", MaxRetries: -1}, nil)
		return err
	})
	if err != nil {
		return fmt.Errorf("MCP over HTTP: %w", err)
	}
	defer hs.Close()
	ss, err := client.Connect(ctx, &mcp.CommandTransport{Command: exec.CommandContext(ctx, o.submitBin, "mcp", "--url", base)}, nil)
	if err != nil {
		return fmt.Errorf("MCP over stdio: %w", err)
	}
	defer ss.Close()
	args := map[string]any{"language": "python", "code": f.code}
	tool := func(s *mcp.ClientSession) error {
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: args})
		if err == nil && res.IsError {
			err = fmt.Errorf("run_code: an error result: %+v", res.Content)
		}
		return err
	}
	rest := func() error {
		var res struct{ Status string }
		if err := restCall(ctx, "POST", base+"/v1/jobs?wait=30s", map[string]any{"image": "python", "code": f.code}, &res); err != nil {
			return err
		}
		if res.Status != "succeeded" {
			return fmt.Errorf("REST: the job %s", res.Status)
		}
		return nil
	}
	ways := []struct {
		into *[]time.Duration
		call func() error
	}{{&f.rest, rest}, {&f.http, func() error { return tool(hs) }}, {&f.stdi, func() error { return tool(ss) }}}
	for i := range f.n + 1 {
		// The pool refills between rounds: warm, as a fleet with a pool
		// is, so that the ways differ by their protocol alone.
		time.Sleep(time.Second)
		// Each round starts with another way, so that none always finds
		// the pool the others left.
		for k := range ways {
			way := ways[(i+k)%len(ways)]
			t := time.Now()
			if err := way.call(); err != nil {
				return err
			}
			if i > 0 { // the first round is a warm-up
				*way.into = append(*way.into, time.Since(t))
			}
		}
	}
	return nil
}

// contexts starts a fresh context of each language ctxRounds times in
// one session: its first cell, its next, then its end.
func (f *mcpFigures) contexts(ctx context.Context, o options, base string) error {
	var info struct{ ID string }
	if err := restCall(ctx, "POST", base+"/v1/sessions", map[string]any{"image": "node"}, &info); err != nil {
		return err
	}
	defer restCall(context.WithoutCancel(ctx), "DELETE", base+"/v1/sessions/"+info.ID, nil, nil)
	cells := []struct{ lang, code string }{{"python", "1"}, {"javascript", "1"}, {"typescript", "(1 as number)"}, {"bash", "true"}}
	for r := range o.ctxRounds {
		for _, c := range cells {
			name := fmt.Sprintf("%s-%d", c.lang, r)
			for k, into := range []map[string][]time.Duration{f.first, f.next} {
				var res struct {
					Reset bool
					Error *struct{ Name, Value string }
				}
				t := time.Now()
				err := restCall(ctx, "POST", base+"/v1/sessions/"+info.ID+"/code", map[string]any{"context": name, "language": c.lang, "code": c.code}, &res)
				d := time.Since(t)
				switch {
				case err != nil:
					return err
				case res.Error != nil:
					return fmt.Errorf("%s: %s: %s", c.lang, res.Error.Name, res.Error.Value)
				case res.Reset != (k == 0):
					return fmt.Errorf("%s: cell %d says reset %v", c.lang, k+1, res.Reset)
				}
				into[c.lang] = append(into[c.lang], d)
			}
			if err := restCall(ctx, "DELETE", base+"/v1/sessions/"+info.ID+"/contexts/"+name, nil, nil); err != nil {
				return err
			}
		}
	}
	for _, c := range cells {
		f.langs = append(f.langs, c.lang)
	}
	return nil
}

// restCall sends body as JSON and decodes the answer into out; a status
// of 300 or more is an error.
func restCall(ctx context.Context, method, url string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	data, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		return fmt.Errorf("%s %s: %d %s", method, url, res.StatusCode, data)
	}
	if out != nil && len(data) > 0 {
		return json.Unmarshal(data, out)
	}
	return nil
}

// pollFor calls f until it succeeds or d has passed.
func pollFor(ctx context.Context, d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return errors.Join(err, ctx.Err())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (f *mcpFigures) print(w io.Writer) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "\n(q) python %q over MCP beside REST, one worker (--pool 3, refilled between rounds), interleaved, %d runs each\n", f.code, f.n)
	fmt.Fprintf(w, "  %-44s %9s %9s %9s\n", "", "p50", "p95", "vs REST")
	row := func(name string, d []time.Duration) {
		fmt.Fprintf(w, "  %-44s %9s %9s %8.2f×\n", name, ms1(pct(d, .5)), ms1(pct(d, .95)), float64(pct(d, .5))/float64(pct(f.rest, .5)))
	}
	row("REST: POST /v1/jobs?wait=30s", f.rest)
	row("MCP streamable HTTP: /mcp run_code", f.http)
	row("MCP stdio: submit mcp --url, run_code", f.stdi)
	for _, way := range []struct {
		name string
		d    []time.Duration
	}{{"MCP HTTP", f.http}, {"MCP stdio", f.stdi}} {
		r := float64(pct(way.d, .5)) / float64(pct(f.rest, .5))
		v := "MISSED"
		if r <= 1.1 {
			v = "met"
		}
		fmt.Fprintf(w, "  %-44s %9s %9s %9s\n", way.name+"/REST p50 (goal ≤ 1.10×)", fmt.Sprintf("%.2f×", r), "", v)
	}
	if len(f.langs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n(q') code contexts over REST: a fresh context's first cell (its interpreter's start) and next cell, %d each\n", len(f.first[f.langs[0]]))
	fmt.Fprintf(w, "  %-12s %11s %11s %11s %11s\n", "language", "first p50", "first p95", "next p50", "next p95")
	for _, l := range f.langs {
		fmt.Fprintf(w, "  %-12s %11s %11s %11s %11s\n", l, ms1(pct(f.first[l], .5)), ms1(pct(f.first[l], .95)), ms1(pct(f.next[l], .5)), ms1(pct(f.next[l], .95)))
	}
	fmt.Fprintf(w, "  load average %s\n", loadAvg())
}
