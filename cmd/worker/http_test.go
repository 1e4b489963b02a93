package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

func TestHTTPFlags(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--embedded"})
	if err != nil || o.http.addr != defaultHTTP || o.http.explicit {
		t.Errorf("--embedded: http %+v, %v; want %s by default", o.http, err, defaultHTTP)
	}
	if o, err := parseFlags(nil); err != nil || o.http.addr != "" {
		t.Errorf("no --embedded: http %+v, %v; want off", o.http, err)
	}
	if o, err := parseFlags([]string{"--embedded", "--http", ""}); err != nil || o.http.addr != "" {
		t.Errorf("--http \"\": http %+v, %v; want off", o.http, err)
	}
	for _, args := range [][]string{
		{"--embedded", "--http", "0.0.0.0:8080"}, // no tokens: loopback only
		{"--tokens", "f"},                        // no API
		{"--http", "127.0.0.1:1", "--tokens", "/nonexistent"},
		{"--embedded", "--http-max-streams-per-token", "0"},
	} {
		if _, err := parseFlags(args); !errors.Is(err, cmdline.ErrUsage) {
			t.Errorf("parseFlags(%q) = %v, want a usage error", args, err)
		}
	}
}

// worker --embedded --http ADDR is a one-process fleet with an HTTP API.
func TestEmbeddedServesHTTP(t *testing.T) {
	t.Parallel()
	addr := testutil.FreeAddr(t)
	s := startServe(t, []string{"--embedded", "--listen", "127.0.0.1:-1", "--data-dir", t.TempDir(), "--id", "h1", "--http", addr},
		&fakeexec.Executor{})
	defer s.Stop(t)
	var resp *http.Response
	// The API opens its client in the background.
	err := testutil.Poll(t.Context(), 5*time.Second, 50*time.Millisecond, func(context.Context) (err error) {
		resp, err = http.Post("http://"+addr+"/v1/jobs?wait=10s", "application/json", strings.NewReader(`{"image":"python","code":"print via http"}`))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var res jobs.Result
	if resp.StatusCode != 200 || json.Unmarshal(data, &res) != nil || res.Stdout != "via http\n" || res.Worker != "h1" {
		t.Errorf("%d %s", resp.StatusCode, data)
	}
}
