package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/shorten"
)

// access is what a client reaches and how, chosen once when the client is
// made: the fleet's stream and buckets, bound by NewClient (fleetAccess),
// or one tenant's keys, read by subject because a tenant may bind nothing
// (tenantAccess, NewTenantClient). The client's calls ask it where the two
// differ; none of them checks a tenant itself.
type access interface {
	// tenant is the client's tenant, "" for the fleet's.
	tenant() string
	// reaches reports whether the client reaches the jobs, workspaces
	// and artifacts of tenant t ("" for those of no tenant).
	reaches(t string) bool
	// qualifyID and qualifyWorkspace are QualifyID and QualifyWorkspace.
	qualifyID(id string) (string, error)
	qualifyWorkspace(name string) (string, error)
	// stores returns the fleet's stream and buckets, or ErrNotTenants.
	stores() (*fleet.Stores, error)

	get(ctx context.Context, id string) (*Result, error)
	cancel(ctx context.Context, id string) (*Result, error)
	watchResults(ctx context.Context, ids []string) (*ResultsWatch, error)
	// watchResult is follower.watchResult.
	watchResult(ctx context.Context, f *follower) (initial *Result, later <-chan resultUpdate, stop func(), err error)
	// queued fills in the queued event of a job that had no result
	// (follower.queued), and returns its result when it finished since.
	queued(ctx context.Context, f *follower, ev *Event) (*Result, error)
	// openEvents and lastSeq are follower's.
	openEvents(ctx context.Context, f *follower) error
	lastSeq(ctx context.Context, f *follower) (uint64, error)

	head(ctx context.Context, name string) (*WorkspaceHead, error)
	heads(ctx context.Context) ([]*WorkspaceHead, error)
	purgeHead(ctx context.Context, name string) error
	objectStore(ctx context.Context, bucket string) (jetstream.ObjectStore, error)
}

var (
	_ access = (*fleetAccess)(nil)
	_ access = (*tenantAccess)(nil)
)

// fleetAccess is a client's of no tenant: the fleet's stream and buckets,
// bound when the client was made, and the workspaces' on first use.
type fleetAccess struct {
	c  *Client
	st *fleet.Stores
}

func (a *fleetAccess) tenant() string                               { return "" }
func (a *fleetAccess) reaches(string) bool                          { return true }
func (a *fleetAccess) stores() (*fleet.Stores, error)               { return a.st, nil }
func (a *fleetAccess) qualifyID(id string) (string, error)          { return id, nil }
func (a *fleetAccess) qualifyWorkspace(name string) (string, error) { return name, nil }

func (a *fleetAccess) get(ctx context.Context, id string) (*Result, error) {
	e, err := a.st.Results.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) || errors.Is(err, jetstream.ErrInvalidKey) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, shorten.Text(id, 140))
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	return DecodeStoredResult(id, e.Value())
}

// objectStore for the fleet's client: the fleet's own with the workspace
// buckets, a tenant's bound on first use.
func (a *fleetAccess) objectStore(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	if bucket != fleet.SnapshotsBucket && bucket != fleet.ArtifactsBucket {
		return a.c.bindObjectStore(ctx, bucket)
	}
	ws, err := a.c.workspaceStores(ctx)
	if err != nil {
		return nil, err
	}
	if bucket == fleet.SnapshotsBucket {
		return ws.Snapshots, nil
	}
	return ws.Artifacts, nil
}

// objectStore for a tenant's client: its own, bound on first use.
func (a *tenantAccess) objectStore(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	return a.c.bindObjectStore(ctx, bucket)
}
