package scope

import (
	"errors"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

func TestScope(t *testing.T) {
	t.Parallel()
	tenant, err := jobs.NewTenantClient(nil, "team-a", jobs.Config{CancelWait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	operator, a := Of(&jobs.Client{}), Of(tenant)
	for _, tc := range []struct {
		s          Scope
		name, want string // want "": hidden
	}{
		{operator, "job-1", "job-1"},
		{operator, "team-a.job-1", ""},
		{a, "job-1", "team-a.job-1"},
		{a, "team-a.job-1", "team-a.job-1"},
		{a, "team-b.job-1", ""},
	} {
		for what, in := range map[string]func(string) (string, error){"Job": tc.s.Job, "Workspace": tc.s.Workspace} {
			got, err := in(tc.name)
			if tc.want == "" && !errors.Is(err, ErrHidden) || tc.want != "" && (err != nil || got != tc.want) {
				t.Errorf("%s scope: %s(%q) = %q, %v; want %q", tc.s.Tenant(), what, tc.name, got, err, tc.want)
			}
		}
		if shown := tc.s.Shows(tc.name); shown != (tc.want == tc.name) {
			t.Errorf("%s scope: Shows(%q) = %v", tc.s.Tenant(), tc.name, shown)
		}
	}
}
