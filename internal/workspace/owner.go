package workspace

import (
	"errors"
	"fmt"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// ErrOwner: the head is another owner's.
var ErrOwner = errors.New("another owner's")

// Allows says whether owner may use head h of workspace name: restore
// it, start from it, save into it or hold a step on it. Every user of a
// head asks it: a job's workspace and workspace_from with owner "" (a
// job acts for its whole tenant), a session's with its owner.
//
// A head with an owner is that owner's alone. A session's own workspace
// (fleet.SessionWorkspace) is its owner's even when its head names none
// (a head written by hand): no other caller of the tenant restores it.
// Any other head, a workspace of jobs, is every caller's of its tenant
// (the tenant is in the name, checked where the name is validated).
func Allows(name string, h *jobs.WorkspaceHead, owner string) error {
	if h == nil {
		return nil
	}
	if (h.Owner != "" || fleet.IsSessionWorkspace(name)) && h.Owner != owner {
		return fmt.Errorf("workspace %s is %w", name, ErrOwner)
	}
	return nil
}
