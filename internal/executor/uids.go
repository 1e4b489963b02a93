package executor

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
)

// UIDRange is the host uids sandboxes run as, First to Last inclusive: each
// sandbox gets one of its own, which is also its gid. The kernel counts
// some allowances per user, not per container: the pipe pages of
// fs.pipe-user-pages-soft, the inotify instances of
// fs.inotify.max_user_instances, the queued signals of RLIMIT_SIGPENDING.
// Sandboxes that shared a uid shared them, so that one job could spend them
// for every other. The range must hold every sandbox of every worker on the
// engine at once (running and warm), and no uid that anything else on the
// host uses: not a user's, not a rootless container's /etc/subuid range.
type UIDRange struct {
	First, Last uint32
}

// DefaultUIDs is the range a Config without one uses: 65,536 uids above
// the host's users.
var DefaultUIDs = UIDRange{First: 100000, Last: 165535}

// maxUID is the largest uid a container may run as: 2^32-1 is "no uid"
// to the kernel, and 2^31 and above trip older tools that take uids as
// signed.
const maxUID = 1<<31 - 1

// ParseUIDRange parses "FIRST-LAST", as the worker's --sandbox-uids takes it.
func ParseUIDRange(s string) (UIDRange, error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return UIDRange{}, fmt.Errorf("uid range %q: want FIRST-LAST, e.g. %s", s, DefaultUIDs)
	}
	first, err1 := strconv.ParseUint(a, 10, 32)
	last, err2 := strconv.ParseUint(b, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return UIDRange{}, fmt.Errorf("uid range %q: want FIRST-LAST, two numbers, e.g. %s", s, DefaultUIDs)
	}
	r := UIDRange{First: uint32(first), Last: uint32(last)}
	return r, r.validate()
}

func (r UIDRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

func (r UIDRange) validate() error {
	switch {
	case r.First == 0:
		return fmt.Errorf("uid range %s: uid 0 is root, which the sandbox never runs as", r)
	case r.Last < r.First:
		return fmt.Errorf("uid range %s: the last uid is below the first", r)
	case r.Last > maxUID:
		return fmt.Errorf("uid range %s: uids above %d are refused", r, maxUID)
	}
	return nil
}

// size is how many uids the range holds.
func (r UIDRange) size() uint32 { return r.Last - r.First + 1 }

// errNoUID: every uid of the range is held by a sandbox of this executor,
// or the ones tried were taken by other containers on the engine. It says
// nothing about whether sandboxes start.
var errNoUID = fmt.Errorf("%w: no free sandbox uid", ErrInfrastructure)

// uidClaims hands out the uids of a range to this executor's sandboxes,
// one each, never one another of its sandboxes holds. Which uids other
// containers on the engine hold (another worker's, or what a previous run
// left before the reaper removed it) it does not know: the engine does.
// A sandbox's container name is its uid's (uidName), and the engine
// refuses a second container of a name, so a create of a uid that is in
// use fails with a conflict, and the launch claims another it has not
// tried. The pick is random, so that workers sharing a range and an
// engine seldom try the same uid, and a uid just freed is seldom the next
// one out.
type uidClaims struct {
	r    UIDRange
	mu   sync.Mutex
	held map[uint32]bool
}

func newUIDClaims(r UIDRange) *uidClaims {
	return &uidClaims{r: r, held: map[uint32]bool{}}
}

// claim returns a uid that no sandbox of this executor holds and that is
// not in tried (those the engine said are another container's), or
// errNoUID.
func (c *uidClaims) claim(tried map[uint32]bool) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.r.size()
	if uint64(len(c.held)) >= uint64(n) {
		return 0, fmt.Errorf("%w: all %d uids of %s are this executor's sandboxes'", errNoUID, n, c.r)
	}
	start := rand.Uint32N(n)
	for i := range n {
		uid := c.r.First + (start+i)%n
		if !c.held[uid] && !tried[uid] {
			c.held[uid] = true
			return uid, nil
		}
	}
	return 0, fmt.Errorf("%w: the %d uids of %s are held by this executor's sandboxes and %d other containers on the engine (another worker's, or leftovers)",
		errNoUID, n, c.r, len(tried))
}

// free gives back a uid once its container is gone, or never made.
func (c *uidClaims) free(uid uint32) {
	c.mu.Lock()
	delete(c.held, uid)
	c.mu.Unlock()
}

// uidName is the name of the container of the sandbox that runs as uid: the
// claim of the uid on the engine, held as long as the container exists,
// whichever worker or run made it.
func uidName(uid uint32) string { return "sandfleet-uid-" + strconv.FormatUint(uint64(uid), 10) }

// uidTries is how many uids a launch tries before it gives up with
// errNoUID: a conflict means another worker's sandbox, or a leftover, holds
// the uid, which in a range much larger than the sandboxes on the engine
// is rare, so that many in a row mean the range is too small for them.
const uidTries = 16
