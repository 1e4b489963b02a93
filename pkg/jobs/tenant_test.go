package jobs

import (
	"errors"
	"testing"
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
		if err := ReplyToFor(tc.id, tc.replyTo); (err == nil) != tc.ok {
			t.Errorf("ReplyToFor(%q, %q) = %v", tc.id, tc.replyTo, err)
		}
		j := Job{ID: tc.id, Queue: "q", Image: "python", ReplyTo: tc.replyTo}
		if err := j.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate of %q replying on %q: %v", tc.id, tc.replyTo, err)
		}
	}
}

func TestTenantQualifies(t *testing.T) {
	t.Parallel()
	c, err := NewTenantClient(nil, "team-a", Topology{})
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
	if _, err := NewTenantClient(nil, "Team A", Topology{}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("a bad tenant name: %v", err)
	}
}
