package workspace

import (
	"errors"
	"os"
	"testing"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// One rule for who may use a head, asked by jobs (owner "") and sessions
// (their owner) alike.
func TestAllows(t *testing.T) {
	t.Parallel()
	own := fleet.SessionWorkspace("acme", "s1")
	cases := []struct {
		name, ws string
		h        *jobs.WorkspaceHead
		owner    string
		ok       bool
	}{
		{"no head yet", "acme.ws", nil, "", true},
		{"a workspace of jobs, a job", "acme.ws", &jobs.WorkspaceHead{}, "", true},
		{"a workspace of jobs, a session", "acme.ws", &jobs.WorkspaceHead{}, "alice", true},
		{"a session's own, its owner", own, &jobs.WorkspaceHead{Owner: "alice"}, "alice", true},
		{"a session's own, another owner", own, &jobs.WorkspaceHead{Owner: "alice"}, "bob", false},
		{"a session's own, a job", own, &jobs.WorkspaceHead{Owner: "alice"}, "", false},
		{"a session's own naming no owner", own, &jobs.WorkspaceHead{}, "bob", false},
		{"any head with an owner, a job", "acme.ws", &jobs.WorkspaceHead{Owner: "alice"}, "", false},
	}
	for _, tc := range cases {
		err := Allows(tc.ws, tc.h, tc.owner)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrOwner)) {
			t.Errorf("%s: %v, want allowed %v", tc.name, err, tc.ok)
		}
	}
}

// The revision a start names: the latest for 0, a kept one, never one
// the head no longer keeps; an empty workspace is an empty start (0).
func TestResolve(t *testing.T) {
	t.Parallel()
	h := &jobs.WorkspaceHead{Name: "ws", Revision: 5, Kept: []int64{4, 5}}
	cases := []struct {
		name string
		h    *jobs.WorkspaceHead
		rev  int64
		want int64
		err  error
	}{
		{"latest", h, 0, 5, nil},
		{"kept", h, 4, 4, nil},
		{"not kept", h, 3, 0, ErrNotKept},
		{"no workspace", nil, 0, 0, ErrNoWorkspace},
		{"empty", &jobs.WorkspaceHead{Name: "ws"}, 0, 0, nil},
		{"another owner's", &jobs.WorkspaceHead{Name: "ws", Revision: 1, Owner: "alice"}, 0, 0, ErrOwner},
	}
	for _, tc := range cases {
		got, err := Resolve("ws", tc.h, tc.rev, "")
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%s: %d, %v; want %d, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
	if _, err := Resolve("ws", h, 3, ""); err.Error() != "ws does not keep revision 3 (it keeps [4 5])" {
		t.Errorf("not kept says %q", err)
	}
}

// A temporary file is unlinked before it is used: nothing is left in its
// directory, written or not (the session's copy made them under another
// name and kept one it failed to unlink).
func TestTempFileUnlinked(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f, err := TempFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("data"); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left in the directory: %v", left)
	}
}
