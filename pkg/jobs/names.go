package jobs

import "github.com/sandfleet/sandfleet/internal/fleet"

// ValidID reports whether s may be used as a job ID: [A-Za-z0-9_-]{1,128},
// qualified by a tenant's name and a dot for a tenant's job
// (`^(?:[a-z0-9][a-z0-9-]{0,31}\.)?[A-Za-z0-9_-]{1,128}$`).
func ValidID(s string) bool { return fleet.ValidID(s) }

// ValidQueue reports whether s may be used as a queue name:
// [A-Za-z0-9_-]{1,64}.
func ValidQueue(s string) bool { return fleet.ValidQueue(s) }

// ValidTenant reports whether s may name a tenant: [a-z0-9][a-z0-9-]{0,31},
// lower-case, so that it can also name users and environment variables.
func ValidTenant(s string) bool { return fleet.ValidTenant(s) }

// TenantOf returns the tenant of a job ID or of a workspace's name, ""
// for one of no tenant.
func TenantOf(id string) string { return fleet.TenantOf(id) }

// ErrInvalidConfig is wrapped by every configuration error.
var ErrInvalidConfig = fleet.ErrInvalidConfig

// ErrNoWorkspaces: the fleet keeps no workspaces (its workers predate
// them, or none ever started).
var ErrNoWorkspaces = fleet.ErrNoWorkspaces
