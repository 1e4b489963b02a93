// Package worker is the pull loop of a sandfleet worker: N slots over the
// durable JetStream consumers of one or more queues (priority lanes with
// weights, lanes.go), a slot taken before every fetch, lease
// heartbeats while a job runs, the result stored once (first writer wins)
// and published to the job's reply subject, drain on shutdown, and back-off
// instead of burnt deliveries when the executor's infrastructure is down.
// While a job runs, its output and lifecycle are published as events for
// watchers (events.go), never holding the job up.
//
// Outcomes are decided once per message (a decision) and mapped to ack,
// term or nak in one place (settle).
//
// # Priority lanes
//
// A worker serves one or more queues, each a lane with a
// weight (worker --queue interactive:10 --queue batch:1). The heaviest
// lane has the highest priority. Who gets a free slot:
//
//   - Only a lane with work. A slot never waits on an empty lane while
//     another lane has work for it: slots that wait for work hold a pull
//     on an empty lane, and are called back (the pull withdrawn) as soon
//     as a fetch finds more work than there are free slots. With fewer
//     free slots than lanes, the lanes without a pull are looked at every
//     lanePoll (1 s): the waiting slots are called back to fetch from
//     every lane, then wait again.
//   - Among the lanes with work, the one that would finish its next slot
//     first in virtual time, each slot costing a lane 1/weight (weighted
//     fair queueing); the heavier lane on a tie. With 10:1 and both lanes
//     full the slots go ten to interactive, one to batch, and so on: a
//     lower lane is never starved, it gets weight/total of the slots (one
//     in eleven here) whatever arrives above it.
//   - A lane coming back from idle starts at the current virtual time:
//     idleness earns no credit, so it cannot take a run of slots from the
//     others, and the heavier lane's first job after idle goes first.
//
// So an interactive job submitted while batch work saturates the fleet
// starts at the next slot that frees on any worker, or, when that slot
// is batch's one in eleven on its worker, the one after.
//
// The fetching keeps the single-queue guarantees: a slot is taken before
// every fetch, a fetch asks for at most as many messages as slots are
// held for it (FetchNoWait, answered at once), a pull left waiting at the
// server (one message, one slot held for it) exists only on a lane found
// empty, and a stop or the executor going down withdraws every pull
// before the worker goes on (see pullWhileUp).
//
// # Workspaces
//
// A job's workspace and outputs, around its run. The head's states, its
// commit, the owner rule and the spools are package workspace's, which a
// session's checkpoints use too. Snapshots pass through the worker as
// bytes (workspace.Spool: memory, or unlinked temporary files when
// large), never unpacked: the sandbox's launcher restores and archives
// them. The order of writes is what makes a step exactly once:
//
//  1. hold the head: running(J) under lease L (a fresh name), by
//     compare-and-swap;
//  2. run J against the base snapshot; the launcher archives the result;
//  3. put the archive as SNAPSHOTS "<ws>/<rev+1>.<L>", then move the head
//     to saved(J) at rev+1, naming that object (compare-and-swap, only
//     while the head is still running(J) under L): the commit;
//  4. store J's result (first writer wins), then release the head.
//
// A death before 3's swap leaves running(J): the redelivery holds it anew
// under a lease of its own and starts again from the same base (the dead
// lease's object is never named, and expires). A death between 3 and 4
// leaves saved(J): the redelivery runs J again against the base, saves
// nothing and reports rev+1. A death after 4 leaves J's result, which ends
// any later delivery before it runs, and makes J's holding of the head
// "gone" for the next job. A delivery whose message lease ran out while
// it still ran, its step held anew meanwhile, finds at 3 that it no longer
// holds the head: it deletes its own object, and the new holder's is
// untouched.
//
// # Dead letters
//
// When a job's deliveries run out (MaxDeliver), the server
// stops delivering it but, with WorkQueue retention, keeps its message in
// the stream forever, and nobody stores a result: a client waiting on it
// would wait forever. Two mechanisms close that gap:
//
//   - every worker subscribes to the server's MAX_DELIVERIES advisory of its
//     queue's consumer and finalizes the job the advisory names;
//   - a sweep (at start and every SweepInterval) finalizes the messages the
//     consumer has delivered but no longer tracks, for advisories nobody got.
//
// The server gives a job up lazily, when a pull request arrives after its
// last lease expired or it was naked; a worker subscribes before its first
// pull, so the advisory of a job given up while no worker was running goes
// to the worker whose pull triggers it. Advisories are core NATS messages,
// though (at most once): the sweep covers a worker that dies or disconnects
// between the advisory and its handling.
//
// Finalizing is idempotent across workers, so all of them handle every
// advisory: read the message by sequence (gone: another worker finished it),
// store an `error` result with Create (first writer wins: a result stored
// by the last delivery's worker, or a cancel, stays), delete the message,
// and, only for the worker whose delete removed it, publish the stored
// result to reply_to.
package worker
