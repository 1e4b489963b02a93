package main

import (
	"context"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/internal/testutil"
)

// A worker whose jobs may have a network starts its egress proxy in the
// engine; an engine that answers only after the worker started (a pod's
// engine sidecar, a dockerd restarting) is waited for, within
// --engine-wait, rather than the worker exiting at once. Here the
// engine's socket appears once the worker says it waits: a forwarder to
// this host's dockerd, which the worker then uses. (Whether the proxy
// then starts is the egress tests' business.)
func TestWorkerWaitsForItsEngine(t *testing.T) {
	testutil.NeedDocker(t, func(ctx context.Context) error {
		return exec.CommandContext(ctx, "docker", "image", "inspect", egressnet.DefaultImage).Run()
	})
	t.Parallel()
	url, _, _ := natsServer(t)
	sock := filepath.Join(t.TempDir(), "docker.sock")
	const id = "engine-wait"
	w := startProc(t, id, []string{"--nats", url, "--id", id, "--log-format", "json", "--slots", "1", "--pool", "0",
		"--config", defaultImageOnly(t), "--egress-allow", "example.org", "--engine-wait", "2m"}, "DOCKER_HOST=unix://"+sock)
	testutil.Eventually(t, 30*time.Second, "the worker waiting for its engine", func() bool {
		return strings.Contains(w.logs.String(), "waiting for the Docker engine")
	})
	select {
	case <-w.done:
		t.Fatal("the worker exited while waiting for its engine")
	default:
	}
	conns := forward(t, sock, "/var/run/docker.sock")
	testutil.Eventually(t, 30*time.Second, "the worker using the engine that came", func() bool { return conns.Load() > 0 })
	if strings.Contains(w.logs.String(), "did not answer within --engine-wait") {
		t.Errorf("the worker gave up on its engine within --engine-wait 2m:\n%s", w.logs.String())
	}
}

// forward listens on the unix socket at path and forwards each connection
// to the one at to, until the test ends. It counts the connections.
func forward(t *testing.T, path, to string) *atomic.Int64 {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer c.Close()
				d, err := net.Dial("unix", to)
				if err != nil {
					return
				}
				defer d.Close()
				go func() { _, _ = io.Copy(d, c); d.(*net.UnixConn).CloseWrite() }()
				_, _ = io.Copy(c, d)
			}()
		}
	}()
	return &n
}
