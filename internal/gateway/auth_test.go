package gateway_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/gateway"
)

func TestTokens(t *testing.T) {
	t.Parallel()
	secret, line, err := gateway.NewToken("ci-bot", []string{"evals", "default"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, gateway.TokenPrefix) || strings.Contains(line, secret) {
		t.Fatalf("secret %q, line %q: the line must hold the hash, not the secret", secret, line)
	}
	other, line2, _ := gateway.NewToken("alice", nil)
	ts, err := gateway.ParseTokens(strings.NewReader("# tokens\n\n" + line + "\n" + line2 + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	tok := ts.Lookup(secret)
	if tok == nil || tok.Name != "ci-bot" || !tok.Allows("evals") || tok.Allows("gpu") {
		t.Errorf("ci-bot: %+v", tok)
	}
	if a := ts.Lookup(other); a == nil || a.Name != "alice" || !a.Allows("anything") {
		t.Errorf("alice: %+v", a)
	}
	for _, s := range []string{"", secret + "x", strings.TrimPrefix(line, "ci-bot ")} {
		if ts.Lookup(s) != nil {
			t.Errorf("Lookup(%q) found a token", s)
		}
	}
	// One line of an environment variable holds several, split by ";".
	if ts, err := gateway.ParseTokens(strings.NewReader(line + "; " + line2)); err != nil || ts.Len() != 2 {
		t.Errorf("; separated: %v, %d tokens", err, ts.Len())
	}

	// role=read: read-only, in either order with queues.
	reader, rline, err := gateway.NewTokenRole("viewer", []string{"default"}, gateway.RoleRead)
	if err != nil || !strings.HasSuffix(rline, " queues=default role=read") {
		t.Fatalf("read token line %q: %v", rline, err)
	}
	h := strings.Fields(rline)[1]
	for _, l := range []string{rline, "viewer " + h + " role=read queues=default"} {
		ts, err := gateway.ParseTokens(strings.NewReader(l))
		if err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if tok := ts.Lookup(reader); tok == nil || tok.CanWrite() || tok.Role != gateway.RoleRead || !tok.Allows("default") {
			t.Errorf("%q: %+v", l, tok)
		}
	}
	if tok := ts.Lookup(secret); !tok.CanWrite() || !(*gateway.Token)(nil).CanWrite() {
		t.Error("a token without a role, or an open gateway's caller, may not write")
	}

	// tenant=T: the tenant's token, with any of the others.
	ten, tline, err := gateway.NewTokenWith("team-a-ci", gateway.TokenOptions{Queues: []string{"evals"}, Role: gateway.RoleRead, Tenant: "team-a"})
	if err != nil || !strings.HasSuffix(tline, " queues=evals role=read tenant=team-a") {
		t.Fatalf("tenant token line %q: %v", tline, err)
	}
	tts, err := gateway.ParseTokens(strings.NewReader(tline + "\n" + line))
	if err != nil {
		t.Fatal(err)
	}
	if tok := tts.Lookup(ten); tok == nil || tok.Tenant != "team-a" || tok.CanWrite() || !tok.Allows("evals") {
		t.Errorf("%q: %+v", tline, tok)
	}
	if got := tts.Tenants(); len(got) != 1 || got[0] != "team-a" || !tts.Operators() {
		t.Errorf("Tenants %v, Operators %v", got, tts.Operators())
	}
	if _, _, err := gateway.NewTokenWith("x", gateway.TokenOptions{Tenant: "Team_A"}); err == nil {
		t.Error("NewTokenWith took tenant Team_A")
	}

	for _, bad := range []string{
		"viewer " + h + " tenant=Team-A",
		"viewer " + h + " tenant=",
		"viewer " + h + " tenant=a tenant=b",
		"viewer " + h + " role=admin",
		"viewer " + h + " role=read role=read",
		"viewer " + h + " queues=a queues=b",
		"viewer " + h + " queues=a role=read extra=1",
		"alice",             // no hash
		"alice " + secret,   // the secret where its hash goes
		"alice sha256:abcd", // short
		"al ice sha256:" + strings.Repeat("a", 64), // three fields, the third not queues=
		"alice sha256:" + strings.Repeat("a", 64) + " queues=a.b",
		"a/b sha256:" + strings.Repeat("a", 64),
		line + "\n" + strings.Replace(line, "ci-bot", "ci-bot2", 1), // same hash twice
		line2 + "\n" + line2,
	} {
		if _, err := gateway.ParseTokens(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseTokens(%q) took it", bad)
		}
	}
}

func TestCheckOpen(t *testing.T) {
	t.Parallel()
	_, line, _ := gateway.NewToken("a", nil)
	ts, _ := gateway.ParseTokens(strings.NewReader(line))
	for addr, open := range map[string]bool{"127.0.0.1:8080": true, "[::1]:80": true, "localhost:1": true,
		":8080": false, "0.0.0.0:8080": false, "10.0.0.1:80": false} {
		err := gateway.CheckOpen(addr, nil)
		if (err == nil) != open || (err != nil && !errors.Is(err, gateway.ErrOpenNotLoopback)) {
			t.Errorf("CheckOpen(%s, no tokens) = %v", addr, err)
		}
		if err := gateway.CheckOpen(addr, ts); err != nil {
			t.Errorf("CheckOpen(%s, tokens) = %v", addr, err)
		}
	}
}
