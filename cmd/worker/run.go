package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/internal/metrics"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/natscreds"
	"github.com/sandfleet/sandfleet/internal/natsembed"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/internal/worker"
)

// version is set at build time with -ldflags "-X main.version=..."; when
// it is not, cmdline.Version reads what the Go toolchain recorded.
var version string

// Run runs the worker until stop is canceled, then drains; force (or the
// end of --grace after stop) cancels the jobs in flight. --help and
// --version print on stdout and return nil; errors of the command line
// and of the configuration match cmdline.ErrUsage.
func Run(stop, force context.Context, args []string, stdout io.Writer) error {
	if len(args) == 1 && args[0] == "metrics" {
		return metrics.WriteList(stdout, metricDescs())
	}
	o, err := parseFlags(args)
	if errors.Is(err, cmdline.ErrHelp) {
		writeHelp(stdout)
		return nil
	}
	if err != nil {
		return err
	}
	if o.version {
		fmt.Fprintln(stdout, "worker", cmdline.Version(version))
		return nil
	}
	log, err := newLogger(o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	slog.SetDefault(log)

	if fake, closeFake, err := fakeExecutorFromEnv(log); err != nil {
		return err
	} else if fake != nil {
		defer closeFake()
		return serve(stop, force, o, log, fake)
	}

	execCfg, err := executorConfig(o)
	if err != nil {
		return err
	}
	if execCfg.Caps.Network != nil {
		gw, err := startEgress(stop, o, log)
		if err != nil {
			return err
		}
		defer gw.Close(context.Background())
		execCfg.Egress = gw
	}
	exec, err := newExecutor(execCfg)
	if err != nil {
		return err
	}
	defer exec.Close()
	return serve(stop, force, o, log, exec)
}

// serve connects (or starts the embedded server) and runs the worker on
// exec. It is Run without the executor, so tests can pass a fake one.
func serve(stop, force context.Context, o *options, log *slog.Logger, exec worker.Executor) error {
	force, forceNow := forceAfterGrace(stop, force, o.grace, log)
	defer forceNow()

	url := natsconn.ServerURL(o.natsURL)
	if o.embedded {
		u, shutdown, err := startEmbedded(o, log)
		if err != nil {
			return err
		}
		defer shutdown()
		url = u
	}
	nc, js, err := natsconn.JetStream(natsconn.Config{URL: url, Name: "sandfleet-worker", Persistent: true, Log: log})
	if err != nil {
		return err
	}
	defer nc.Close()
	if o.ready != nil {
		o.ready(url)
	}

	var m *jobMetrics
	var obs worker.Observer
	if o.metrics != "" {
		var presets []string
		if pl, ok := exec.(presetLister); ok {
			presets = pl.Presets()
		}
		m = newMetrics(metrics.NewRegistry(), presets)
		obs = m
	}
	w, err := worker.New(js, exec, worker.Config{
		ID:       o.id,
		Queues:   o.lanes,
		Slots:    o.slots,
		Version:  cmdline.Version(version),
		Topology: o.topology(),
		Logger:   log,
		Observer: obs,
		NoEvents: !o.events,
	})
	if err != nil {
		return cmdline.Usagef("%w", err)
	}

	stopHTTP, err := startHTTP(&o.http, js, nc.IsConnected, log)
	if err != nil {
		return err
	}
	defer stopHTTP()

	var wg sync.WaitGroup
	defer wg.Wait()
	if o.metrics != "" {
		ln, err := net.Listen("tcp", o.metrics)
		if err != nil {
			return fmt.Errorf("--metrics: %w", err)
		}
		m.watch(w, nc.IsConnected, exec)
		h := statusHandler(w, nc.IsConnected, unremovable(exec), m.handler())
		if o.pprof {
			h = withPprof(h)
		}
		hs := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		wg.Go(func() { _ = hs.Serve(ln) })
		defer hs.Close()
		log.Info("serving /metrics, /healthz, /readyz and /status", "addr", ln.Addr().String())
	}
	// Ended with Run (deferred after wg.Wait, so it runs first): a Run
	// that gives up before the worker was ready (refused credentials)
	// returns at once, not after releaseStartMemory's minute.
	running, ran := context.WithCancel(stop)
	defer ran()
	wg.Go(func() { releaseStartMemory(running, w) })
	if sd, ok := exec.(storageDriverer); ok {
		wg.Go(func() { logStorageDriver(running, log, sd) })
	}
	if ts, ok := exec.(templateSetter); ok {
		wg.Go(func() { serveTemplates(running, js, o.replicas, ts, log) })
	}
	if ss, ok := exec.(sessionStarter); ok && o.sessions > 0 {
		// Beside the jobs: a fleet whose sessions cannot be set up (a
		// bucket its credentials may not make) still runs jobs, and a stop
		// during the set-up is no failure.
		wg.Go(func() { serveSessions(stop, js, ss, o, m, log) })
	}
	return w.Run(stop, force)
}

// forceAfterGrace returns force canceled also at the end of the grace
// period after the first signal (stop). The returned func cancels it and
// lets the timer go.
func forceAfterGrace(stop, force context.Context, grace time.Duration, log *slog.Logger) (context.Context, func()) {
	force, forceNow := context.WithCancel(force)
	unwatch := context.AfterFunc(stop, func() {
		t := time.AfterFunc(grace, func() {
			log.Warn("grace period over; stopping the jobs in flight", "grace", grace)
			forceNow()
		})
		context.AfterFunc(force, func() { t.Stop() })
	})
	return force, func() {
		unwatch()
		forceNow()
	}
}

// startEmbedded starts the embedded NATS server (--embedded) in
// --data-dir, with the credentials kept there unless --no-credentials,
// and returns the URL its client connects to.
func startEmbedded(o *options, log *slog.Logger) (url string, shutdown func(), err error) {
	if err := os.MkdirAll(o.dataDir, 0o750); err != nil {
		return "", nil, fmt.Errorf("--data-dir: %w", err)
	}
	so := natsembed.Options{Listen: o.listen, StoreDir: o.dataDir}
	credentials := "none"
	if !o.noCredentials {
		path, user, password, err := natsembed.Credentials(o.dataDir)
		if errors.Is(err, natsembed.ErrCredentialsMode) || errors.Is(err, natscreds.ErrBad) {
			return "", nil, cmdline.Usagef("--data-dir: %w", err)
		}
		if err != nil {
			return "", nil, fmt.Errorf("--data-dir: %w", err)
		}
		so.User, so.Password, credentials = user, password, path
	}
	srv, err := natsembed.Start(so)
	if err != nil {
		return "", nil, err
	}
	log.Info("embedded NATS JetStream server started", "url", srv.ClientURL(), "data_dir", o.dataDir, "credentials", credentials)
	if o.noCredentials {
		log.Warn("the embedded NATS server takes connections without credentials (--no-credentials): any local process may read, forge and delete jobs and results")
	} else if !natsembed.Loopback(o.listen) {
		log.Warn("the embedded NATS server listens beyond this machine without TLS: its password and the jobs cross the network in clear", "listen", o.listen)
	}
	return natsembed.ClientURL(srv, so), func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	}, nil
}

// topology is the fleet-wide settings the flags give.
func (o *options) topology() fleet.Topology {
	return fleet.Topology{
		AckWait:       o.ackWait,
		MaxDeliver:    o.maxDeliver,
		MaxAckPending: o.maxAckPending,
		Replicas:      o.replicas,
		WorkspaceTTL:  o.workspaceTTL,
		EventsMaxAge:  o.eventsMaxAge,

		MaxBytes:           int64(o.store.jobs),
		ResultsMaxBytes:    int64(o.store.results),
		EventsMaxBytes:     int64(o.store.events),
		IndexMaxBytes:      int64(o.store.index),
		CancelsMaxKeys:     o.store.cancelsKeys,
		CancelsMaxBytes:    int64(o.store.cancels),
		WorkspacesMaxKeys:  o.store.workspacesKeys,
		WorkspacesMaxBytes: int64(o.store.workspaces),
		SnapshotsMaxBytes:  int64(o.store.workspaceQuota),
		ArtifactsMaxBytes:  int64(o.store.artifactQuota),
	}
}

// serveSessions runs the session host until stop; m, when set, gets its
// metrics.
func serveSessions(stop context.Context, js jetstream.JetStream, ss sessionStarter, o *options, m *jobMetrics, log *slog.Logger) {
	var sobs sessionhost.Observer
	if m != nil {
		sobs = m
	}
	host, err := sessionhost.New(stop, js, startSession(ss), sessionhost.Config{
		Worker: o.id, Max: o.sessions, MaxLifetime: o.sessionLifetime, MaxIdleTimeout: o.sessionIdle,
		MaxPerToken: o.sessionsPerToken, MaxPerTenant: o.sessionsPerTenant,
		Limits: ss.ResolveLimits, Images: ss.HasPreset, Logger: log, Observer: sobs,
		Workspaces: sessionWorkspaces(js, o.topology()), RefreshAge: o.topology().SnapshotRefreshAge(),
	})
	if err != nil {
		if stop.Err() == nil {
			log.Error("sessions not served", "err", err)
		}
		return
	}
	if m != nil {
		m.watchSessions(host) // a registry takes collectors while it serves
	}
	_ = host.Run(stop) // it logs "serving sessions" once listening
}

// releaseStartMemory hands the heap that setting up left behind (the
// topology's streams, the embedded server's start, the pool's first
// launches) back to the system once the worker is ready, rather than
// when Go's scavenger gets to it minutes later: an idle worker's RSS is
// what it holds, not what it once needed.
func releaseStartMemory(stop context.Context, w *worker.Worker) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for deadline := time.Now().Add(time.Minute); !w.Ready() && time.Now().Before(deadline); {
		select {
		case <-stop.Done():
			return
		case <-t.C:
		}
	}
	select {
	case <-stop.Done():
		return
	case <-time.After(3 * time.Second): // the pool's first launches
	}
	debug.FreeOSMemory()
}

// statusHandler serves /healthz (the process answers), /readyz (NATS
// connected, topology set up, executor up, fewer than unremovableMax
// containers it cannot remove), /status (the heartbeat) and /metrics
// (Prometheus).
func statusHandler(w *worker.Worker, natsUp func() bool, stuck func() int, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(rw, "ok")
	})
	mux.HandleFunc("GET /readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if !natsUp() {
			http.Error(rw, "NATS not connected", http.StatusServiceUnavailable)
			return
		}
		if !w.Ready() {
			msg := "topology or executor not ready"
			if why := w.Status().LastError; why != "" {
				msg = "not ready: " + why
			}
			http.Error(rw, msg, http.StatusServiceUnavailable)
			return
		}
		if n := stuck(); n >= unremovableMax {
			http.Error(rw, fmt.Sprintf("not ready: %d sandboxes cannot be removed (the engine refuses; retrying)", n), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ready")
	})
	mux.HandleFunc("GET /status", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(w.Status())
	})
	return mux
}
