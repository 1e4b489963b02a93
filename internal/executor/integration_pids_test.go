package executor

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// limits.pids means the same under every runtime: a job that forks until
// it is refused is held at its limit (less the launcher's own threads,
// which count as the job's under both), gets EAGAIN and its verdict, and
// so does one that starts threads. Under runsc the host's pids cgroup also
// holds gVisor's own threads: a sandbox there once ended at the limit
// (exit 2, no verdict) instead.
func TestIntegrationPidsSameUnderEveryRuntime(t *testing.T) {
	t.Parallel()
	const pids = 64
	// The launcher's threads (about ten) and the job's python3 are
	// counted too.
	const launcher = 24
	code := `import os, sys, threading, time
if os.environ["WHAT"] == "fork":
    n = 0
    try:
        while True:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            n += 1
    except OSError as err:
        print("held", n, err.errno, flush=True)
else:
    n, stop = 0, threading.Event()
    try:
        while True:
            threading.Thread(target=stop.wait, daemon=True).start()
            n += 1
    except RuntimeError:
        print("held", n, 11, flush=True)
    stop.set()
`
	var mu sync.Mutex
	held := map[string]int{}
	t.Run("runtimes", func(t *testing.T) {
		for _, rt := range attackRuntimes(t) {
			t.Run(rt, func(t *testing.T) {
				t.Parallel()
				e := setup(t, func(c *Config) { c.Runtime = rt })
				for _, what := range []string{"fork", "thread"} {
					j := job(code, withLimits(limits.Limits{Pids: pids, Timeout: limits.Duration(30 * time.Second)}))
					j.Env = map[string]string{"WHAT": what}
					res := run(t, e, j)
					want(t, res, jobs.StatusSucceeded)
					var n, errno int
					if _, err := fmt.Sscanf(res.Stdout, "held %d %d", &n, &errno); err != nil || errno != 11 || n >= pids || n < pids-launcher {
						t.Fatalf("%s: stdout %q, want held at %d..%d with EAGAIN", what, res.Stdout, pids-launcher, pids-1)
					}
					t.Logf("%s: %d held at pids %d", what, n, pids)
					mu.Lock()
					held[rt+" "+what] = n
					mu.Unlock()
				}
			})
		}
	})
	for _, what := range []string{"fork", "thread"} {
		runc, runsc := held["runc "+what], held["runsc "+what]
		if runc > 0 && runsc > 0 && max(runc-runsc, runsc-runc) > launcher/2 {
			t.Errorf("%s: runc held at %d, runsc at %d: the limit means different things", what, runc, runsc)
		}
	}
}
