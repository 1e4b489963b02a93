package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/natsembed"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A worker process for the phases that run bin/worker, and what they read
// of the machine.

// workerProc is a bin/worker --embedded subprocess, and a client of its
// server.
type workerProc struct {
	id   string
	cmd  *exec.Cmd
	nc   *nats.Conn
	cli  *jobs.Client
	logf string
	stop func() // signals it, waits for it and removes its files
}

// startWorker starts o.workerBin --embedded with args, named after name,
// and connects to it.
func startWorker(ctx context.Context, o options, name string, args ...string) (*workerProc, error) {
	w, url, exited, err := launchWorker(o.workerBin, name, args...)
	if err != nil {
		return nil, err
	}
	// The worker goes when stop is called, and this goroutine with it.
	exitErr := make(chan error, 1)
	go func() { <-exited; exitErr <- errors.New(w.cmd.ProcessState.String()) }()
	if w.nc, w.cli, err = connect(ctx, url, exitErr); err != nil {
		err = w.fail(err)
		w.stop()
		return nil, err
	}
	return w, nil
}

// launchWorker starts bin --embedded with args, named after name, and
// returns its server's URL and a channel that says when it exits; the
// caller waits for what it needs of it.
func launchWorker(bin, name string, args ...string) (_ *workerProc, url string, exited <-chan struct{}, err error) {
	dir, err := os.MkdirTemp("", "sandfleet-bench-")
	if err != nil {
		return nil, "", nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	w := &workerProc{id: "bench-" + strconv.Itoa(os.Getpid()) + "-" + name, logf: filepath.Join(dir, "worker.log")}
	logf, err := os.Create(w.logf)
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	// The server's credentials, made here for the worker to use as they are.
	_, user, password, err := natsembed.Credentials(filepath.Join(dir, "data"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	w.cmd = exec.Command(bin, append([]string{"--embedded", "--listen", addr, "--data-dir", filepath.Join(dir, "data"),
		"--id", w.id, "--log-level", "warn"}, args...)...)
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	if err := w.cmd.Start(); err != nil {
		logf.Close()
		os.RemoveAll(dir)
		return nil, "", nil, err
	}
	// Closed when it has exited, so that any number may wait for it.
	done := make(chan struct{})
	go func() { _ = w.cmd.Wait(); close(done) }()
	w.stop = func() {
		if w.nc != nil {
			w.nc.Close()
		}
		_ = w.cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = w.cmd.Process.Kill()
			<-done
		}
		logf.Close()
		os.RemoveAll(dir)
	}
	return w, "nats://" + user + ":" + password + "@" + addr, done, nil
}

// fail adds the tail of the worker's log to err.
func (w *workerProc) fail(err error) error {
	log, _ := os.ReadFile(w.logf)
	if len(log) > 2000 {
		log = log[len(log)-2000:]
	}
	return fmt.Errorf("%w\nworker log (tail):\n%s", err, log)
}

// connect waits for the worker's embedded server and its topology.
func connect(ctx context.Context, url string, exited <-chan error) (*nats.Conn, *jobs.Client, error) {
	deadline := time.Now().Add(30 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			return nil, nil, fmt.Errorf("the worker exited: %v", err)
		default:
		}
		nc, js, err := natsconn.JetStream(natsconn.Config{URL: url, Name: "sandfleet-bench", Extra: []nats.Option{nats.Timeout(time.Second)}})
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			cli, err := jobs.NewClient(cctx, js, jobs.Config{})
			cancel()
			if err == nil {
				return nc, cli, nil
			}
			nc.Close()
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return nil, nil, fmt.Errorf("the worker's NATS at %s never answered: %v", url, last)
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
