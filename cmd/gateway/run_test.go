package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/pkg/gateway"
)

func TestToken(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := Run(t.Context(), []string{"token", "ci", "--queues", "evals"}, &out); err != nil {
		t.Fatal(err)
	}
	var secret, line string
	for l := range strings.SplitSeq(out.String(), "\n") {
		if v, ok := strings.CutPrefix(l, "token:"); ok {
			secret = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(l, "tokens file:"); ok {
			line = strings.TrimSpace(v)
		}
	}
	ts, err := gateway.ParseTokens(strings.NewReader(line))
	if err != nil {
		t.Fatal(err)
	}
	if tok := ts.Lookup(secret); tok == nil || tok.Name != "ci" || tok.Allows("default") {
		t.Errorf("%s: token %+v", out.String(), tok)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--listen", "0.0.0.0:8080"}, // no tokens
		{"--tokens", "/nonexistent"},
		{"token"},
		{"token", "bad/name"},
		{"--queues", "a"},
		{"serve"},
		{"--log-level", "loud"},
	} {
		if err := Run(t.Context(), args, &bytes.Buffer{}); !errors.Is(err, cmdline.ErrUsage) {
			t.Errorf("Run(%q) = %v, want a usage error", args, err)
		}
	}
	var out bytes.Buffer
	if err := Run(t.Context(), []string{"--help"}, &out); err != nil || !strings.Contains(out.String(), "--tokens FILE") {
		t.Errorf("--help: %v\n%s", err, out.String())
	}
}
