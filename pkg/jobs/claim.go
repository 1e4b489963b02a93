package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/sandfleet/sandfleet/internal/shorten"
)

// TokenLabel is the label the HTTP gateway gives a job with the name of
// the token that submitted it; nobody else may set it.
const TokenLabel = "sandfleet.token"

// ErrConflict: the result stored at a job's ID is another job's: it ran
// another spec, or was submitted by another token. A caller that chose
// its own ID (a batch line's derived one, a retried submit) gets this
// instead of someone else's verdict.
var ErrConflict = errors.New("another job's result is stored at this id")

// ConflictError is ErrConflict with both sides named.
type ConflictError struct {
	ID string
	// Want and Got are the spec digests of the job asked for and of the
	// job whose result is stored.
	Want, Got string
	// WantBy and GotBy are their submitters (TokenLabel), when the
	// caller's job names one and the two differ.
	WantBy, GotBy string
}

func (e *ConflictError) Error() string {
	id := shorten.Text(e.ID, 140)
	if e.WantBy != e.GotBy {
		return fmt.Sprintf("%s %s: submitted by %q, not by %q (choose another id)", ErrConflict, id, e.GotBy, e.WantBy)
	}
	return fmt.Sprintf("%s %s: it ran spec %s, not this job's %s (choose another id)", ErrConflict, id, short(e.Got), short(e.Want))
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

func short(digest string) string {
	if len(digest) > len("sha256:")+12 {
		return digest[:len("sha256:")+12]
	}
	return digest
}

// SpecDigest is "sha256:<hex>" of what decides how a job runs: the job as
// JSON without the fields that only name, route or tag it (id, queue,
// reply_to, labels, retry_of), and with its workspaces named as its
// submitter named them (without the tenant a tenant's client prefixes).
// The worker puts it on every result, so that a client that finds a
// result at an ID it chose can tell whether it is its own job's.
func (j *Job) SpecDigest() string {
	s := *j
	tenant := TenantOf(j.ID)
	s.ID, s.Queue, s.ReplyTo, s.Labels, s.RetryOf = "", "", "", nil, ""
	if tenant != "" {
		s.Workspace = strings.TrimPrefix(s.Workspace, tenant+".")
		if f := s.WorkspaceFrom; f != nil {
			from := *f
			from.Name = strings.TrimPrefix(from.Name, tenant+".")
			s.WorkspaceFrom = &from
		}
	}
	data, err := json.Marshal(&s)
	if err != nil { // a Job always marshals; keep the digest unmatchable if not
		return "sha256:?"
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Claim is what a submitter keeps of a job it submitted to tell its own
// result from another's stored at the same ID (Check).
type Claim struct {
	ID        string
	Digest    string // SpecDigest
	Submitter string // TokenLabel, if the job names one
}

// ClaimOf is job's claim.
func ClaimOf(job *Job) Claim {
	return Claim{ID: job.ID, Digest: job.SpecDigest(), Submitter: job.Labels[TokenLabel]}
}

// Check returns a *ConflictError when res, stored at the claim's ID, is
// the result of another job: another spec, or another submitter when the
// claim names one. A result without a digest (stored by a worker older
// than the digest, or a cancel no worker carried out) cannot be told
// apart and is taken as the job's.
func (c Claim) Check(res *Result) error {
	if res.SpecDigest == "" {
		return nil
	}
	if c.Submitter != "" && res.Labels[TokenLabel] != c.Submitter {
		return &ConflictError{ID: c.ID, Want: c.Digest, Got: res.SpecDigest, WantBy: c.Submitter, GotBy: res.Labels[TokenLabel]}
	}
	if res.SpecDigest != c.Digest {
		return &ConflictError{ID: c.ID, Want: c.Digest, Got: res.SpecDigest}
	}
	return nil
}
