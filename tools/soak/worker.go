package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/natsembed"
	"github.com/sandfleet/sandfleet/internal/natsurl"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/sessions"
)

// workerProc is the bin/worker --embedded subprocess under soak.
type workerProc struct {
	id          string
	dir, data   string
	httpBase    string
	metricsAddr string
	url         string // the NATS URL the worker and the soak use
	cmd         *exec.Cmd
	nc          *nats.Conn
	js          jetstream.JetStream
	cli         *jobs.Client
	sessions    *sessions.Client // the operator's: the HTTP API's sessions without a token
	exited      chan error
	exitErr     error // the worker's exit, once stop waited for it
	stopOnce    sync.Once
}

// startWorker starts the worker: with --embedded in a directory of its
// own, or against o.natsURL; extra are more of its flags.
func startWorker(ctx context.Context, o options, extra ...string) (*workerProc, error) {
	dir, err := os.MkdirTemp("", "sandfleet-soak-")
	if err != nil {
		return nil, err
	}
	addrs := make([]string, 3)
	for i := range addrs {
		if addrs[i], err = freeAddr(); err != nil {
			return nil, err
		}
	}
	w := &workerProc{id: fmt.Sprintf("soak-%d-%d", os.Getpid(), time.Now().UnixMilli()%1e6), dir: dir,
		httpBase: "http://" + addrs[1], metricsAddr: addrs[2], exited: make(chan error, 1), url: o.natsURL}
	args := []string{"--nats", o.natsURL}
	if o.natsURL == "" {
		w.data = filepath.Join(dir, "data")
		_, user, password, err := natsembed.Credentials(w.data)
		if err != nil {
			return nil, err
		}
		w.url = "nats://" + user + ":" + password + "@" + addrs[0]
		args = []string{"--embedded", "--listen", addrs[0], "--data-dir", w.data}
	}
	logf, err := os.Create(filepath.Join(dir, "worker.log"))
	if err != nil {
		return nil, err
	}
	args = append(args, "--id", w.id, "--http", addrs[1], "--metrics", addrs[2], "--pprof",
		"--slots", strconv.Itoa(o.slots), "--log-level", "warn")
	w.cmd = exec.Command(o.workerBin, append(args, extra...)...)
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, err
	}
	w.cmd.Env = append(os.Environ(), "TMPDIR="+filepath.Join(dir, "tmp"))
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { w.exited <- w.cmd.Wait(); logf.Close() }()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) || w.cmd.ProcessState != nil {
			w.stop()
			return nil, fmt.Errorf("the worker never answered; its log: %s", filepath.Join(dir, "worker.log"))
		}
		if code, _ := httpGet(w.httpBase + "/v1/sessions"); code != 200 {
			continue
		}
		nc, js, err := natsconn.JetStream(natsconn.Config{URL: w.url, Name: "sandfleet-soak"})
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cli, err := jobs.NewClient(cctx, js, jobs.Config{})
		var sc *sessions.Client
		if err == nil {
			sc, err = sessions.NewClient(cctx, js, "")
		}
		cancel()
		if err != nil {
			nc.Close()
			continue
		}
		w.nc, w.js, w.cli, w.sessions = nc, js, cli, sc
		return w, nil
	}
}

// natsMode says which JetStream the worker is on.
func (w *workerProc) natsMode() string {
	if w.data != "" {
		return "its embedded JetStream"
	}
	return natsurl.Redact(w.url)
}

// settle polls the worker until it is at rest, and returns that sample.
// With base nil, at rest is its containers unchanged for 10 s (the warm
// pools filled); else it is goroutines, fds, containers and networks back
// at base's (idleChecks), or four minutes gone: a pool grown under the
// load shrinks back after two minutes of calm, one sandbox an image every
// two seconds.
func (w *workerProc) settle(ctx context.Context, base *sample) (sample, error) {
	start := time.Now()
	var last sample
	same := 0
	for deadline := time.Now().Add(4 * time.Minute); ; {
		s := w.sample(time.Since(start), nil)
		if base == nil {
			if states(s.containers) == states(last.containers) && s.goroutines > 0 {
				same++
			} else {
				same = 0
			}
			if same >= 5 {
				return s, nil
			}
		} else if len(idleMisses(*base, s)) == 0 {
			return s, nil
		}
		last = s
		if time.Now().After(deadline) {
			return s, fmt.Errorf("the worker did not settle in 4 minutes")
		}
		select {
		case <-ctx.Done():
			return s, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// stop interrupts the worker (a drain), waits for it, and keeps its
// directory only when it did not exit cleanly.
func (w *workerProc) stop() {
	w.stopOnce.Do(func() {
		if w.nc != nil {
			w.nc.Close()
		}
		_ = w.cmd.Process.Signal(os.Interrupt)
		select {
		case w.exitErr = <-w.exited:
		case <-time.After(60 * time.Second):
			_ = w.cmd.Process.Kill()
			w.exitErr = fmt.Errorf("killed after 60 s of drain: %v", <-w.exited)
		}
	})
}

// metrics scrapes the worker's /metrics: name{labels} → value.
func (w *workerProc) metrics() map[string]float64 {
	out := map[string]float64{}
	res, err := http.Get("http://" + w.metricsAddr + "/metrics")
	if err != nil {
		return out
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

func (w *workerProc) heapProfile(path string) error {
	return w.profile("heap?gc=1", path)
}

// profile saves one of the worker's /debug/pprof/ answers.
func (w *workerProc) profile(which, path string) error {
	res, err := http.Get("http://" + w.metricsAddr + "/debug/pprof/" + which)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, res.Body)
	return err
}

// containers counts the worker's containers by state.
func (w *workerProc) containers() map[string]int {
	m := map[string]int{}
	for _, s := range w.containersList() {
		m[s]++
	}
	return m
}

// containersList is the states of the worker's containers, one each.
func (w *workerProc) containersList() []string {
	out, _ := exec.Command("docker", "ps", "-a", "--filter", "label="+executor.LabelWorker+"="+w.id, "--format", "{{.State}}").Output()
	return strings.Fields(string(out))
}

// egressLabel marks the worker's egress networks and its proxy (the
// gateway's name, as cmd/worker makes it from the worker's ID).
func (w *workerProc) egressLabel() string {
	return egressnet.Label + "=sandfleet-egress-" + w.id
}

// networks counts the worker's egress networks: the proxy's, and one per
// sandbox with a network while it runs.
func (w *workerProc) networks() int {
	out, _ := exec.Command("docker", "network", "ls", "-q", "--filter", "label="+w.egressLabel()).Output()
	return len(strings.Fields(string(out)))
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if i, err := d.Info(); err == nil {
				n += i.Size()
			}
		}
		return nil
	})
	return n
}

// leftovers says what the stopped worker left: containers (which hold
// their uids' names), its data directory's temporary files.
func (w *workerProc) leftovers() []string {
	var p []string
	if c := w.containers(); len(c) > 0 {
		p = append(p, fmt.Sprintf("containers left after the worker stopped: %v", c))
	}
	out, _ := exec.Command("docker", "ps", "-a", "--filter", "label="+executor.LabelWorker+"="+w.id, "--format", "{{.Names}}").Output()
	if n := strings.Count(string(out), "sandfleet-uid-"); n > 0 {
		p = append(p, fmt.Sprintf("%d uid claims (sandfleet-uid-* containers) left", n))
	}
	if n := w.networks(); n > 0 {
		p = append(p, fmt.Sprintf("%d egress networks left after the worker stopped", n))
	}
	if out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label="+w.egressLabel()).Output(); len(out) > 0 {
		p = append(p, "the egress proxy's container left after the worker stopped")
	}
	if tmp := w.tempFiles(); len(tmp) > 0 {
		p = append(p, fmt.Sprintf("temporary files left in the data directory: %v", tmp))
	}
	if w.exitErr != nil {
		p = append(p, fmt.Sprintf("the worker exited with %v; its log: %s", w.exitErr, filepath.Join(w.dir, "worker.log")))
	} else {
		os.RemoveAll(w.dir)
	}
	return p
}

// tempFiles lists what the stopped worker left in its temporary
// directory (TMPDIR, its own), but the seccomp profiles it keeps by their
// hash on purpose.
func (w *workerProc) tempFiles() []string {
	var out []string
	_ = filepath.WalkDir(filepath.Join(w.dir, "tmp"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), "sandfleet-seccomp-") {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// deletedFiles counts the worker's open fds of files already unlinked (a
// spilled snapshot is one while its step runs; none should be at idle).
func (w *workerProc) deletedFiles() int {
	if w.cmd.Process == nil {
		return 0
	}
	dir := fmt.Sprintf("/proc/%d/fd", w.cmd.Process.Pid)
	ents, _ := os.ReadDir(dir)
	n := 0
	for _, e := range ents {
		if t, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasSuffix(t, " (deleted)") {
			n++
		}
	}
	return n
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func httpGet(url string) (int, string) {
	res, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
