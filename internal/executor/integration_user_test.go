package executor

// Every sandbox's uid is a user that exists: its /etc/passwd and
// /etc/group (the image's, with the sandbox's entry) name it, so that
// whoami, getpass, pwd, ~user and git work, in jobs, warm sandboxes,
// sessions and templates, under runc and runsc; and no process of the
// sandbox can change those files.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// whoProbe prints what the sandbox's processes know of their user, one
// key=value a line, then tries every way a process of the sandbox has to
// change its user tables and says which worked.
const whoProbe = `
echo "whoami=$(whoami 2>&1)"
echo "id-un=$(id -un 2>&1)"
echo "id-gn=$(id -gn 2>&1)"
echo "uid=$(id -u)"
echo "gid=$(id -g)"
echo "tilde=$(echo ~)"
echo "tilde-user=$(echo ~sandbox)"
echo "env=${USER-} ${LOGNAME-} ${HOME-}"
python3 - <<'EOF'
import getpass, grp, os, pwd
p = pwd.getpwuid(os.getuid())
print("getuser=" + getpass.getuser())
print("pwd=%s:%d:%d:%s" % (p.pw_name, p.pw_uid, p.pw_gid, p.pw_dir))
print("grp=" + grp.getgrgid(os.getgid()).gr_name)
EOF
echo "root=$(getent passwd root | cut -d: -f1,3)"
echo "entries=$(grep -c '^sandbox:' /etc/passwd)"
for f in /etc/passwd /etc/group; do
	echo 'evil:x:0:0::/:/bin/sh' >>"$f" 2>/dev/null && echo "appended to $f"
	cp "$f" /tmp/t && mv -f /tmp/t "$f" 2>/dev/null && echo "replaced $f"
	chmod 0666 "$f" 2>/dev/null && echo "chmod $f"
	rm -f "$f" 2>/dev/null; [ -e "$f" ] || echo "removed $f"
	ln -sf /tmp/t "$f" 2>/dev/null && [ -L "$f" ] && echo "linked $f"
done
python3 - <<'EOF'
import os
for f in ("/etc/passwd", "/etc/group"):
    try:
        os.open(f, os.O_WRONLY)
        print("opened " + f + " for writing")
    except OSError:
        pass
EOF
grep -q '^evil:' /etc/passwd /etc/group && echo "evil entry present"
echo done
`

// checkWho checks whoProbe's output: every lookup names the sandbox's
// own uid, and no write reached the tables.
func checkWho(t *testing.T, where, out string) {
	t.Helper()
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		} else if line != "done" {
			t.Errorf("%s: %s", where, line) // a write that worked
		}
	}
	uid, err := strconv.ParseUint(got["uid"], 10, 32)
	if err != nil || uid < uint64(DefaultUIDs.First) || uid > uint64(DefaultUIDs.Last) || got["gid"] != got["uid"] {
		t.Fatalf("%s: uid %q gid %q, want one of %s, the same\n%s", where, got["uid"], got["gid"], DefaultUIDs, out)
	}
	want := map[string]string{
		"whoami": "sandbox", "id-un": "sandbox", "id-gn": "sandbox", "getuser": "sandbox", "grp": "sandbox",
		"tilde": "/workspace", "tilde-user": "/workspace", "env": "sandbox sandbox /workspace",
		"pwd":  "sandbox:" + got["uid"] + ":" + got["uid"] + ":/workspace",
		"root": "root:0", "entries": "1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s = %q, want %q", where, k, got[k], v)
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(out), "done") {
		t.Errorf("%s: the probe did not finish:\n%s", where, out)
	}
}

// sandboxRuntimes are the runtimes the engine has of runc and runsc;
// runsc is required under SANDFLEET_REQUIRE_RUNSC=1.
func sandboxRuntimes(t *testing.T, cli *client.Client) []string {
	t.Helper()
	runtimes := []string{"runc"}
	switch {
	case hasRuntime(t, cli, "runsc"):
		runtimes = append(runtimes, "runsc")
	case os.Getenv("SANDFLEET_REQUIRE_RUNSC") == "1":
		t.Fatal("SANDFLEET_REQUIRE_RUNSC=1 but the engine has no runsc runtime (make runsc registers it)")
	}
	return runtimes
}

// A job (fresh and from the warm pool) and a session see their uid as
// the user sandbox, under runc and runsc, and cannot change who that is.
func TestIntegrationSandboxUser(t *testing.T) {
	t.Parallel()
	cli := requireDocker(t)
	for _, rt := range sandboxRuntimes(t, cli) {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			// Pids well above the default, as the egress tests': under runsc
			// the sandbox's pids cgroup also counts gVisor's own threads
			// (its file mounts', the user tables' among them), and the
			// probe's processes take the default's last.
			e := setup(t, func(c *Config) { c.Runtime, c.Pool, c.Defaults.Pids = rt, 1, 512 })
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			// The pool's sandbox was made before any job: wait for it, so
			// that the first job is a warm one's and the second a fresh one's.
			if err := testutil.Poll(ctx, 90*time.Second, 100*time.Millisecond, func(context.Context) error {
				if e.PoolStats().Idle < 1 {
					return context.DeadlineExceeded
				}
				return nil
			}); err != nil {
				t.Fatalf("the warm pool never filled: %v", err)
			}
			res := run(t, e, job(whoProbe, func(j *jobs.Job) { j.Image = "shell" }))
			want(t, res, jobs.StatusSucceeded)
			checkWho(t, "warm job", res.Stdout)
			if st := e.PoolStats(); st.Hits != 1 {
				t.Errorf("pool hits %d, want the job's", st.Hits)
			}
			// Limits other than the defaults: a sandbox of its own.
			res = run(t, e, job(whoProbe, func(j *jobs.Job) { j.Image = "shell"; j.Limits.Memory = 256 * limits.MiB }))
			want(t, res, jobs.StatusSucceeded)
			checkWho(t, "fresh job", res.Stdout)
			s := startSession(t, e, SessionSpec{})
			r := okReply(t, do(t, s, ask{Op: sessionapi.OpExec, Cmd: []string{"bash", "-c", whoProbe}}))
			if r.Exit == nil || *r.Exit != 0 {
				t.Fatalf("session: exit %v, stderr %q", r.Exit, r.Stderr)
			}
			checkWho(t, "session", string(r.Stdout))
		})
	}
}

// A template that brings git commits without any configuration: git finds
// the sandbox's name in /etc/passwd and its address in EMAIL. The
// template's own users stay.
func TestIntegrationSandboxUserGitTemplate(t *testing.T) {
	t.Parallel()
	cli := requireDocker(t)
	git, err := exec.LookPath("git")
	if err != nil {
		testutil.Unavailable(t, "the test copies the host's git into a template: %v", err)
	}
	bin, err := os.ReadFile(git)
	if err != nil {
		t.Fatal(err)
	}
	tag := "sandfleet/template-git-test:" + randHex(4)
	// The host's git runs in the image when both are the same Debian
	// (CI's are); the job says so when not.
	_, stderr, err := buildTemplate(t, cli, tag, `FROM BASE
COPY git /usr/bin/git
USER 0
RUN chmod 0755 /usr/bin/git && useradd --uid 2000 --no-create-home builder
USER 10001:10001
`, map[string]string{"git": string(bin)})
	if err != nil {
		t.Fatalf("build.sh template: %v\n%s", err, stderr)
	}
	for _, rt := range sandboxRuntimes(t, cli) {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			e := setup(t, func(c *Config) {
				c.Runtime, c.Defaults.Pids = rt, 512 // as above
				c.Presets = map[string]Preset{"git": {Image: tag, MainFile: "main.sh", Argv: []string{"bash", "main.sh"}}}
			})
			res := run(t, e, job(`set -e
git --version >/dev/null
git init -q repo && cd repo
echo hello >f && git add f
git commit -q -m first
git log --format='author=%an <%ae>'
echo "builder=$(getent passwd builder | cut -d: -f1,3)"
echo "whoami=$(whoami)"
`, func(j *jobs.Job) { j.Image = "git" }))
			want(t, res, jobs.StatusSucceeded)
			for _, w := range []string{"author=sandbox <" + sandboxEmail + ">", "builder=builder:2000", "whoami=sandbox"} {
				if !strings.Contains(res.Stdout, w+"\n") {
					t.Errorf("stdout %q, stderr %q: want %q", res.Stdout, res.Stderr, w)
				}
			}
		})
	}
}

// The user tables an executor writes are gone once its sandboxes are, and
// Reap removes what an earlier executor of the worker left.
func TestIntegrationSandboxUserFilesRemoved(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	res := run(t, e, job("print('hi')"))
	want(t, res, jobs.StatusSucceeded)
	dir := e.users.dir
	testutil.Eventually(t, 30*time.Second, "the job's user tables removed with its sandbox", func() bool {
		left, _ := filepath.Glob(filepath.Join(dir, "[0-9]*"))
		return len(left) == 0
	})

	// A predecessor that died: its directory, with a sandbox's tables.
	old := newUserFiles(e.cfg.WorkerID, randHex(8))
	if _, err := old.write(DefaultUIDs.First, userTables{}, nil); err != nil {
		t.Fatal(err)
	}
	// While it lives (the same worker ID twice on the host), its tables
	// stay: its sandboxes start with them.
	if _, err := e.Reap(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old.dir); err != nil {
		t.Errorf("Reap removed a live executor's %s: %v", old.dir, err)
	}
	old.release() // it died
	if _, err := e.Reap(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old.dir); !os.IsNotExist(err) {
		t.Errorf("Reap left %s: %v", old.dir, err)
	}
}
