package jobs

import (
	"errors"
	"testing"

	"github.com/sandfleet/sandfleet/internal/field"
	"github.com/sandfleet/sandfleet/internal/fleet"
)

func TestTenantIDsAndReplies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id     string
		valid  bool
		tenant string
	}{
		{"abc", true, ""},
		{"team-a.abc", true, "team-a"},
		{"team-a.", false, ""},
		{".abc", false, ""},
		{"Team.abc", false, ""}, // tenants are lower-case
		{"a.b.c", false, ""},
		{"-a.b", false, ""},
		{"abcdefghijklmnopqrstuvwxyz0123456.x", false, ""}, // a 33-byte tenant
	} {
		if ValidID(tc.id) != tc.valid || (tc.valid && TenantOf(tc.id) != tc.tenant) {
			t.Errorf("%q: valid %v tenant %q, want %v %q", tc.id, ValidID(tc.id), TenantOf(tc.id), tc.valid, tc.tenant)
		}
	}
	for _, tc := range []struct {
		id, replyTo string
		ok          bool
	}{
		{"x", "results.anything", true},
		{"t.x", "results.t.x", true},
		{"t.x", "_INBOX.t.abc.1", true},
		{"t.x", "results.u.x", false},
		{"t.x", "_INBOX.abc", false},
		{"t.x", "results.t", false},
		{"t.x", "agent.7", false},
		{"t.x", "$KV.RESULTS.t.y", false},
	} {
		if err := fleet.ReplyToFor(tc.id, tc.replyTo); (err == nil) != tc.ok {
			t.Errorf("fleet.ReplyToFor(%q, %q) = %v", tc.id, tc.replyTo, err)
		}
		j := Job{ID: tc.id, Queue: "q", Image: "python", ReplyTo: tc.replyTo}
		if err := j.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate of %q replying on %q: %v", tc.id, tc.replyTo, err)
		}
	}
}

func TestTenantQualifies(t *testing.T) {
	t.Parallel()
	c, err := NewTenantClient(nil, "team-a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{"x": "team-a.x", "team-a.x": "team-a.x"} {
		if got, err := c.QualifyID(in); err != nil || got != want {
			t.Errorf("qualify(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if got, _ := c.QualifyID(""); TenantOf(got) != "team-a" || !ValidID(got) {
		t.Errorf("a new ID %q", got)
	}
	if _, err := c.QualifyID("team-b.x"); !errors.Is(err, ErrInvalidJob) {
		t.Errorf("another tenant's ID: %v", err)
	}
	if _, err := NewTenantClient(nil, "Team A", Config{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("a bad tenant name: %v", err)
	}
}

// A workspace is its tenant's: a job names only its own tenant's, in
// workspace and workspace_from, whoever sent it; a tenant's client
// qualifies bare names and refuses another tenant's.
func TestTenantWorkspaces(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		id, workspace, from string
		field               string // the field a rejection names; "" when valid
	}{
		{"x", "agent", "", ""},
		{"x", "", "base", ""},
		{"t.x", "t.agent", "t.base", ""},
		{"t.x", "t.agent", "", ""},
		{"t.x", "u.agent", "", "workspace"},
		{"t.x", "agent", "", "workspace"},
		{"t.x", "t.agent", "u.base", "workspace_from.name"},
		{"t.x", "", "base", "workspace_from.name"},
		{"x", "t.agent", "", "workspace"},
		{"x", "", "t.base", "workspace_from.name"},
		{"t.x", "T.agent", "", "workspace"},
		{"t.x", "t.a.b", "", "workspace"},
	} {
		j := Job{ID: tc.id, Queue: "q", Image: "python", Workspace: tc.workspace}
		if tc.from != "" {
			j.WorkspaceFrom = &WorkspaceRef{Name: tc.from}
		}
		err := j.Validate()
		var fe *field.Error
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%+v: %v", tc, err)
		case tc.field != "" && (!errors.Is(err, ErrInvalidJob) || !errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("%+v: %v, want an invalid %s", tc, err, tc.field)
		}
	}

	c, err := NewTenantClient(nil, "team-a", Config{})
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{"agent": "team-a.agent", "team-a.agent": "team-a.agent"} {
		if got, err := c.QualifyWorkspace(in); err != nil || got != want {
			t.Errorf("qualify(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := c.QualifyWorkspace("team-b.agent"); !errors.Is(err, ErrInvalidJob) {
		t.Errorf("another tenant's workspace: %v", err)
	}
	q, err := c.qualifyJob(&Job{ID: "j", Workspace: "agent", WorkspaceFrom: &WorkspaceRef{Name: "base", Revision: 2}})
	if err != nil || q.ID != "team-a.j" || q.Workspace != "team-a.agent" || *q.WorkspaceFrom != (WorkspaceRef{Name: "team-a.base", Revision: 2}) {
		t.Errorf("qualified job %+v, %v", q, err)
	}
	for key, want := range map[string]string{"team-a.j/plot.png": "team-a", "j/a.b/c.png": "", "j/plot.png": ""} {
		if got := fleet.ArtifactTenant(key); got != want {
			t.Errorf("ArtifactTenant(%q) = %q, want %q", key, got, want)
		}
	}
	if fleet.SnapshotsBucketOf("") != fleet.SnapshotsBucket || fleet.ArtifactsBucketOf("team-a") != "ARTIFACTS_team-a" {
		t.Error("bucket names")
	}
}
