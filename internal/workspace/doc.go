// Package workspace is the one home of a workspace's head (a key of
// WORKSPACES, jobs.WorkspaceHead) for every writer of it: a job's step
// (internal/worker) and a persistent session's checkpoint
// (internal/sessionhost) alike.
//
// It owns the head's states and the one function that moves between them
// (Transition), the compare-and-swap that writes a move (Heads, Commit),
// who may use a head (Allows, the owner rule), the revision a start names
// (Resolve), fetching a snapshot with its digest (Fetch), and the spool a
// snapshot or an archive waits in (Spool, TempFile, Cache).
//
// A step holds the head under a lease: a name it draws for each hold, so
// that of two live deliveries of one job only the later holder saves.
package workspace
