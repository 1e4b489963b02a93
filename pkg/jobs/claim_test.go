package jobs_test

import (
	"errors"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// The digest covers what decides a run and nothing that only names,
// routes or tags the job; a tenant's qualified workspace names digest as
// its client named them.
func TestSpecDigest(t *testing.T) {
	t.Parallel()
	base := jobs.Job{Image: "python", Code: "print(1)", Workspace: "ws"}
	d := base.SpecDigest()
	for _, tc := range []struct {
		name string
		job  jobs.Job
		same bool
	}{
		{"id, queue, labels, reply_to, retry_of", jobs.Job{ID: "x", Queue: "q", Image: "python", Code: "print(1)", Workspace: "ws",
			Labels: map[string]string{"a": "b", jobs.TokenLabel: "t"}, ReplyTo: "_INBOX.x", RetryOf: "y"}, true},
		{"a tenant's qualified names", jobs.Job{ID: "team.x", Image: "python", Code: "print(1)", Workspace: "team.ws"}, true},
		{"code", jobs.Job{Image: "python", Code: "print(2)", Workspace: "ws"}, false},
		{"stdin", jobs.Job{Image: "python", Code: "print(1)", Workspace: "ws", Stdin: "1"}, false},
		{"image", jobs.Job{Image: "node", Code: "print(1)", Workspace: "ws"}, false},
		{"workspace", jobs.Job{Image: "python", Code: "print(1)", Workspace: "other"}, false},
		{"env", jobs.Job{Image: "python", Code: "print(1)", Workspace: "ws", Env: map[string]string{"A": "1"}}, false},
	} {
		if got := tc.job.SpecDigest() == d; got != tc.same {
			t.Errorf("%s: same digest %v, want %v", tc.name, got, tc.same)
		}
	}
}

func TestClaimCheck(t *testing.T) {
	t.Parallel()
	job := &jobs.Job{ID: "j", Image: "python", Code: "print(1)", Labels: map[string]string{jobs.TokenLabel: "alice"}}
	own := job.SpecDigest()
	other := (&jobs.Job{Image: "python", Code: "print('planted')"}).SpecDigest()
	for _, tc := range []struct {
		name     string
		res      jobs.Result
		conflict bool
	}{
		{"its own", jobs.Result{SpecDigest: own, Labels: map[string]string{jobs.TokenLabel: "alice"}}, false},
		{"another spec", jobs.Result{SpecDigest: other, Labels: map[string]string{jobs.TokenLabel: "alice"}}, true},
		{"another token's", jobs.Result{SpecDigest: own, Labels: map[string]string{jobs.TokenLabel: "mallory"}}, true},
		{"no token on it", jobs.Result{SpecDigest: own}, true},
		{"no digest (an older worker's, a cancel's)", jobs.Result{}, false},
	} {
		err := jobs.ClaimOf(job).Check(&tc.res)
		if (err != nil) != tc.conflict {
			t.Errorf("%s: %v, want conflict %v", tc.name, err, tc.conflict)
		}
		var ce *jobs.ConflictError
		if err != nil && (!errors.Is(err, jobs.ErrConflict) || !errors.As(err, &ce) || ce.ID != "j") {
			t.Errorf("%s: %v is no ConflictError naming j", tc.name, err)
		}
	}
	// A job of no token's accepts a result of any submitter with its spec.
	anon := &jobs.Job{ID: "j", Image: "python", Code: "print(1)"}
	if err := jobs.ClaimOf(anon).Check(&jobs.Result{SpecDigest: own, Labels: map[string]string{jobs.TokenLabel: "alice"}}); err != nil {
		t.Errorf("no submitter asked for: %v", err)
	}
}
