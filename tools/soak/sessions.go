package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandfleet/sandfleet/pkg/sessionapi"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// sessionLoop runs a session every sessionEvery, one at a time.
func (l *load) sessionLoop(ctx context.Context) {
	tick := time.NewTicker(l.o.sessionEvery)
	defer tick.Stop()
	for {
		if err := l.session(ctx); err != nil && ctx.Err() == nil {
			l.fail("session: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// session creates a session, writes a file, runs six cells that keep a
// counter (each must see the last one's state), reads the file back with a
// command, runs a background process and reads its output, types a
// command into a terminal, and deletes it.
func (l *load) session(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx) // a session begun is finished
	var info struct{ ID string }
	if err := l.call(ctx, "POST", "/v1/sessions", map[string]any{"image": "python"}, &info); err != nil {
		return err
	}
	defer func() { _ = l.call(ctx, "DELETE", "/v1/sessions/"+info.ID, nil, nil) }()
	base := "/v1/sessions/" + info.ID
	body := "soak " + info.ID
	if err := l.call(ctx, "PUT", base+"/files/note.txt", body, nil); err != nil {
		return err
	}
	for i := range 6 {
		code := "n = n + 1 if 'n' in globals() else 1\nn"
		t := time.Now()
		var r struct{ Text string }
		if err := l.call(ctx, "POST", base+"/code", map[string]any{"code": code}, &r); err != nil {
			return err
		}
		l.mu.Lock()
		l.execLat = append(l.execLat, time.Since(t))
		l.mu.Unlock()
		if r.Text != strconv.Itoa(i+1) {
			return fmt.Errorf("cell %d of %s = %q, want %d: the session lost its state", i+1, info.ID, r.Text, i+1)
		}
	}
	var r struct {
		Stdout string `json:"stdout"`
	}
	if err := l.call(ctx, "POST", base+"/exec", map[string]any{"cmd": []string{"cat", "note.txt"}}, &r); err != nil {
		return err
	}
	if r.Stdout != body {
		return fmt.Errorf("note.txt of %s = %q, want %q", info.ID, r.Stdout, body)
	}
	if err := l.background(ctx, base); err != nil {
		return fmt.Errorf("%s: background process: %w", info.ID, err)
	}
	if err := l.terminal(ctx, info.ID); err != nil {
		return fmt.Errorf("%s: terminal: %w", info.ID, err)
	}
	l.mu.Lock()
	l.sessions++
	l.mu.Unlock()
	return nil
}

// background starts a process in the background and reads its whole
// output once it has ended.
func (l *load) background(ctx context.Context, base string) error {
	var started struct {
		PID int `json:"pid"`
	}
	req := map[string]any{"shell": "for i in 1 2 3; do echo tick$i; sleep 0.2; done", "background": true}
	if err := l.call(ctx, "POST", base+"/exec", req, &started); err != nil {
		return err
	}
	if started.PID == 0 {
		return fmt.Errorf("no pid")
	}
	var out sessionapi.ProcessOutput
	if err := l.call(ctx, "GET", fmt.Sprintf("%s/processes/%d?wait=20s", base, started.PID), nil, &out); err != nil {
		return err
	}
	if out.Running || out.ExitCode == nil || *out.ExitCode != 0 || out.Output != "tick1\ntick2\ntick3\n" {
		return fmt.Errorf("running %v, exit %v, output %q; want it ended with 0 and three ticks", out.Running, out.ExitCode, out.Output)
	}
	return nil
}

// terminal opens a shell on a terminal (through the sessions client, as
// the gateway's WebSocket does), types a command and exit, and reads to
// the end.
func (l *load) terminal(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	t, err := l.w.sessions.OpenPTY(ctx, id, sessions.PTYRequest{})
	if err != nil {
		return err
	}
	defer t.Close()
	if _, err := t.Write([]byte("echo soak-$((6*7))\nexit 0\n")); err != nil {
		return err
	}
	var out strings.Builder
	for {
		b, err := t.Read(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w after %q", err, out.String())
		}
		out.Write(b)
	}
	e := t.Exit()
	if !strings.Contains(out.String(), "soak-42") || e == nil || e.ExitCode == nil || *e.ExitCode != 0 {
		return fmt.Errorf("output %q, end %+v; want soak-42 and exit 0", out.String(), e)
	}
	return nil
}

// call makes an HTTP API call; a string body is sent as it is.
func (l *load) call(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, l.w.httpBase+path, rd)
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
		return fmt.Errorf("%s %s: %d %.300s", method, path, res.StatusCode, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}
