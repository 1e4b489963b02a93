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

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/natsembed"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// workerProc is the bin/worker --embedded subprocess under soak.
type workerProc struct {
	id          string
	dir, data   string
	httpBase    string
	metricsAddr string
	cmd         *exec.Cmd
	nc          *nats.Conn
	cli         *jobs.Client
	exited      chan error
	exitErr     error // the worker's exit, once stop waited for it
	stopOnce    sync.Once
}

func startWorker(ctx context.Context, o options) (*workerProc, error) {
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
	w := &workerProc{id: fmt.Sprintf("soak-%d", os.Getpid()), dir: dir, data: filepath.Join(dir, "data"),
		httpBase: "http://" + addrs[1], metricsAddr: addrs[2], exited: make(chan error, 1)}
	_, user, password, err := natsembed.Credentials(w.data)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "worker.log"))
	if err != nil {
		return nil, err
	}
	w.cmd = exec.Command(o.workerBin, "--embedded", "--listen", addrs[0], "--data-dir", w.data, "--id", w.id,
		"--http", addrs[1], "--metrics", addrs[2], "--pprof", "--slots", strconv.Itoa(o.slots), "--sessions", "2",
		"--log-level", "warn")
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	if err := w.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { w.exited <- w.cmd.Wait(); logf.Close() }()
	url := "nats://" + user + ":" + password + "@" + addrs[0]
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			w.stop()
			return nil, fmt.Errorf("the worker never answered; its log: %s", filepath.Join(dir, "worker.log"))
		}
		nc, js, err := natsconn.JetStream(natsconn.Config{URL: url, Name: "sandfleet-soak"})
		if err != nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cli, err := jobs.NewClient(cctx, js, jobs.Config{})
		cancel()
		if err != nil {
			nc.Close()
			continue
		}
		w.nc, w.cli = nc, cli
		if code, _ := httpGet(w.httpBase + "/v1/sessions"); code == 200 {
			return w, nil
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
	res, err := http.Get("http://" + w.metricsAddr + "/debug/pprof/heap?gc=1")
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
	out, _ := exec.Command("docker", "ps", "-a", "--filter", "label="+executor.LabelWorker+"="+w.id, "--format", "{{.State}}").Output()
	m := map[string]int{}
	for _, s := range strings.Fields(string(out)) {
		m[s]++
	}
	return m
}

func networks() int {
	out, _ := exec.Command("docker", "network", "ls", "-q").Output()
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
	if w.exitErr != nil {
		p = append(p, fmt.Sprintf("the worker exited with %v; its log: %s", w.exitErr, filepath.Join(w.dir, "worker.log")))
	} else {
		os.RemoveAll(w.dir)
	}
	return p
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
