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
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/sandfleet/sandfleet/internal/metrics"
	"github.com/spf13/pflag"

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/egress"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/natscreds"
	"github.com/sandfleet/sandfleet/internal/natsembed"
	"github.com/sandfleet/sandfleet/internal/sessionhost"
	"github.com/sandfleet/sandfleet/pkg/executor"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/worker"
)

// version is set at build time with -ldflags "-X main.version=..."; when
// it is not, cmdline.Version reads what the Go toolchain recorded.
var version string

const usage = `usage: worker [--nats URL | --embedded [--listen ADDR] [--data-dir DIR] [--no-credentials]]
              [--queue NAME[:WEIGHT]]... [--slots N] [--pool N] [--pool-max N] [--id NAME] [--config FILE]
              [--metrics ADDR] [--grace D] [--http ADDR [--tokens FILE]]
              [cap flags] [fleet-wide flags]

Pulls sandfleet jobs from NATS JetStream (stream JOBS, consumer
workers-<queue>) and runs each in a fresh, locked-down Docker sandbox.

The first SIGINT/SIGTERM drains: no more jobs are fetched, the jobs in flight
finish (for at most --grace) and are acked. A second signal, SIGQUIT or the
end of the grace period stops the sandboxes and hands their jobs back for
immediate redelivery.

Exit codes: 0 clean stop, 2 usage or configuration error, 1 anything else.

Flags:
`

// fileConfig is the JSON of --config. Every field is optional.
//
//	{"presets": {"python": {"image": "sandfleet/sandbox:latest",
//	                        "main_file": "main.py", "argv": ["python3", "main.py"]},
//	             "c": {"image": "sandfleet/sandbox-langs:latest", "main_file": "main.c",
//	                   "compile": ["gcc", "-o", "/tmp/main", "main.c"], "argv": ["/tmp/main"],
//	                   "optional": true}},
//	 "defaults": {"timeout": "30s", "memory": "512m"},
//	 "caps": {"timeout": "10m", "memory": "4g", "cpus": 2, "network": false},
//	 "runtime": "runc"}
type fileConfig struct {
	Presets  map[string]executor.Preset `json:"presets"`
	Defaults limits.Limits              `json:"defaults"`
	Caps     limits.Limits              `json:"caps"`
	Runtime  string                     `json:"runtime"`
}

type options struct {
	natsURL, listen, dataDir string
	embedded                 bool
	noCredentials            bool          // --no-credentials: the embedded server takes anyone
	queue                    []string      // --queue as given
	lanes                    []worker.Lane // --queue parsed
	configFile               string
	// id is the worker's name, normalised (worker.NormalizeID): results,
	// logs, heartbeats and container labels all show this value.
	id                  string
	slots               int
	pool                int
	poolMax             int
	metrics             string
	grace               time.Duration
	runtime             string
	sandboxUIDs         string            // --sandbox-uids as given
	uids                executor.UIDRange // --sandbox-uids parsed
	logFormat, logLevel string
	caps                limits.Limits
	allowNetwork        bool
	egressAllow         string // --egress-allow as given
	egressImage         string
	egressNetwork       string
	egressHosts         string // --egress-hosts as given
	egressSubnets       string
	networkRuntime      string
	ackWait             time.Duration
	maxDeliver          int
	maxAckPending       int
	replicas            int
	events              bool
	workspaceTTL        time.Duration
	eventsMaxAge        time.Duration
	store               storeCaps
	version             bool
	http                httpOptions // http.go
	sessions            int
	sessionLifetime     time.Duration

	// ready, if set, is called with the NATS URL once connected (tests).
	ready func(url string)
}

// flagSet defines the worker's flags on o.
func flagSet(o *options) *pflag.FlagSet {
	fs := cmdline.NewFlagSet("worker")
	fs.StringVar(&o.natsURL, "nats", "", natsconn.URLHelp)
	fs.BoolVar(&o.embedded, "embedded", false, "run an in-process NATS JetStream server instead of connecting to --nats")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:4222", "with --embedded: `ADDR` the server listens on")
	fs.StringVar(&o.dataDir, "data-dir", "./data", "with --embedded: `DIR` of the JetStream file store (queued jobs and results survive restarts) and of "+natscreds.File+", the server's USER:PASSWORD (made at the first start, mode 0600)")
	fs.BoolVar(&o.noCredentials, "no-credentials", false, "with --embedded: the NATS server takes connections without credentials, so any local process may read, forge and delete jobs and results (loopback --listen only)")
	fs.StringArrayVar(&o.queue, "queue", []string{jobs.DefaultQueue}, "queue `NAME[:WEIGHT]` to serve (subjects jobs.NAME.<id>); repeat it for priority lanes, the heaviest served first, e.g. --queue interactive:10 --queue batch:1 (weight default 1)")
	fs.IntVar(&o.slots, "slots", runtime.NumCPU(), "run `N` jobs at once (default the number of CPUs)")
	fs.IntVar(&o.pool, "pool", 0, "keep `N` warm sandboxes per preset image, each used once (default --slots; 0 turns the pool off)")
	fs.IntVar(&o.poolMax, "pool-max", 0, "let the pool grow to `N` per preset image while jobs drain it faster than it refills, back to --pool after 2m of calm (default 4 × --pool; --pool-max = --pool: a fixed pool)")
	fs.StringVar(&o.id, "id", "", "worker `NAME` in results, logs and container labels (default the host name; characters other than A-Z a-z 0-9 - _ / = become -)")
	fs.StringVar(&o.configFile, "config", "", "JSON `FILE` with presets, defaults, caps and runtime")
	fs.StringVar(&o.metrics, "metrics", "", "serve /metrics (Prometheus), /healthz, /readyz and /status on `ADDR` (e.g. 127.0.0.1:9090)")
	fs.DurationVar(&o.grace, "grace", time.Minute, "after the first signal, jobs in flight may finish for `D` (default 1m)")
	fs.StringVar(&o.runtime, "runtime", "", "OCI runtime `NAME` of the sandboxes: runc (default) or runsc (gVisor)")
	fs.StringVar(&o.sandboxUIDs, "sandbox-uids", executor.DefaultUIDs.String(), "host uids `FIRST-LAST` the sandboxes run as, one of its own each, never one another container on the engine holds (workers on one engine may share it); no uid anything else on the host uses")
	fs.StringVar(&o.logFormat, "log-format", "text", "log `FORMAT`: text (default) or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `LEVEL`: debug, info (default), warn or error")
	fs.Var(cmdline.Value(&o.caps.Timeout, "duration"), "max-timeout", "cap `D` on a job's wall-clock timeout (default 10m)")
	fs.Var(cmdline.Value(&o.caps.Memory, "size"), "max-memory", "cap `SIZE` on a job's memory (default 4g)")
	fs.Float64Var(&o.caps.CPUs, "max-cpus", 0, "cap `N` on a job's CPUs (default 2)")
	fs.Int64Var(&o.caps.Pids, "max-pids", 0, "cap `N` on a job's processes and threads (default 1024)")
	fs.Var(cmdline.Value(&o.caps.Output, "size"), "max-output", "cap `SIZE` on a job's output per stream (default 2m)")
	fs.BoolVar(&o.allowNetwork, "allow-network", false, "let jobs ask for open egress (limits.network: true): the internet through the egress proxy, never private, loopback, link-local or the host's addresses")
	fs.StringVar(&o.egressAllow, "egress-allow", "", "the egress rules any job may name in limits.network.allow: `LIST` of hosts (*.example.org), IPs and CIDRs with optional :PORT, comma-separated (default empty: no job may have a network); private, loopback and link-local addresses only where named here")
	fs.StringVar(&o.egressImage, "egress-image", egress.DefaultImage, "`IMAGE` of the egress proxy, started when jobs may have a network (make images builds it)")
	fs.StringVar(&o.egressNetwork, "egress-network", "bridge", "Docker `NETWORK` the egress proxy reaches the world by; the worker reaches the proxy's control API on it")
	fs.StringVar(&o.egressHosts, "egress-hosts", "", "`LIST` of NAME=IP the egress proxy uses instead of DNS (air-gapped fleets, mirrors); a pinned name may be a private address")
	fs.StringVar(&o.egressSubnets, "egress-subnets", egress.DefaultSubnets.String(), "IPv4 `CIDR` each sandbox with a network takes a /28 network of its own from (one per sandbox at once); none the host routes to")
	fs.StringVar(&o.networkRuntime, "network-runtime", "", "OCI runtime `NAME` of sandboxes with a network (default --runtime; runsc-net when --runtime is runsc: deploy/runsc.sh registers it)")
	fs.DurationVar(&o.ackWait, "ack-wait", 0, "lease `D` of a job, extended while it runs (default 30s; fleet-wide)")
	fs.IntVar(&o.maxDeliver, "max-deliver", 0, "give a job up after `N` deliveries (default 5; fleet-wide)")
	fs.IntVar(&o.maxAckPending, "max-ack-pending", 0, "at most `N` jobs of a queue in flight across the fleet (default 1000; set it to the fleet's slots or more; fleet-wide)")
	fs.IntVar(&o.replicas, "replicas", 0, "`N` replicas of the stream and buckets (default 1; 3 on a cluster; fleet-wide)")
	fs.BoolVar(&o.events, "events", true, "publish each job's output and lifecycle to the stream EVENTS while it runs (submit run's live output, submit logs); --events=false turns them off")
	fs.DurationVar(&o.eventsMaxAge, "events-max-age", 0, "keep a job's events (its live output) `D` in the stream EVENTS (default 1h; fleet-wide; the result in RESULTS stays the authority)")
	fs.DurationVar(&o.workspaceTTL, "workspace-ttl", 0, "a workspace expires `D` after its last step, its snapshots D+D/4 after they were put (default 24h; fleet-wide)")
	storeFlags(fs, &o.store)
	fs.IntVar(&o.sessions, "sessions", 16, "hold at most `N` sessions (long-lived sandboxes) at once, apart from --slots; 0 serves none")
	fs.DurationVar(&o.sessionLifetime, "session-max-lifetime", 24*time.Hour, "the longest `D` a session may ask for as max_lifetime")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	httpFlags(fs, &o.http)
	return fs
}

// storeCaps are the caps of the fleet's storage: each stream and bucket
// has its own, so that none can take another's room; the server reserves
// each on its storage.
type storeCaps struct {
	jobs, results, events, index  limits.Size
	cancels, workspaces           limits.Size
	cancelsKeys, workspacesKeys   int64
	workspaceQuota, artifactQuota limits.Size
}

func storeFlags(fs *pflag.FlagSet, c *storeCaps) {
	size := func(v *limits.Size, name, usage string) { fs.Var(cmdline.Value(v, "size"), name, usage) }
	size(&c.jobs, "jobs-max-bytes", "cap `SIZE` on the jobs queued (stream JOBS; default 1g; past it Submit says the queue is full; fleet-wide)")
	size(&c.results, "results-max-bytes", "cap `SIZE` on the stored results (bucket RESULTS; default 1g; past it the oldest go before their 24h; fleet-wide)")
	size(&c.events, "events-max-bytes", "cap `SIZE` on the jobs' events (stream EVENTS; default 1g; past it the oldest go; fleet-wide)")
	size(&c.index, "index-max-bytes", "cap `SIZE` on the job index the console lists (stream INDEX; default 512m; past it the oldest go; fleet-wide)")
	size(&c.cancels, "cancels-max-bytes", "cap `SIZE` on the cancel requests (bucket CANCELS, which tenants write; default 64m; past it the oldest go; fleet-wide)")
	fs.Int64Var(&c.cancelsKeys, "cancels-max-keys", 0, "cap `N` on the cancel requests kept (bucket CANCELS; default 100000; past it the oldest go; fleet-wide)")
	size(&c.workspaces, "workspaces-max-bytes", "cap `SIZE` on the workspace heads (bucket WORKSPACES, which tenants write; default 256m; past it a new workspace is refused; fleet-wide)")
	fs.Int64Var(&c.workspacesKeys, "workspaces-max-keys", 0, "cap `N` on the workspaces of the fleet (bucket WORKSPACES; default 100000; past it a new workspace is refused; fleet-wide)")
	size(&c.workspaceQuota, "workspace-quota", "quota `SIZE` of each tenant's workspace snapshots (SNAPSHOTS_<tenant>, and SNAPSHOTS; default 2g; past it a step's revision is not saved and its job ends as error; fleet-wide)")
	size(&c.artifactQuota, "artifact-quota", "quota `SIZE` of each tenant's artifacts (ARTIFACTS_<tenant>, and ARTIFACTS; default 1g; past it a job's files are not kept and it ends as error; fleet-wide)")
}

// writeHelp writes what --help prints.
func writeHelp(w io.Writer) {
	fmt.Fprint(w, usage, cmdline.Usages(flagSet(&options{})))
}

// parseFlags parses and checks the command line. It returns
// cmdline.ErrHelp for --help, and errors matching cmdline.ErrUsage.
func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flagSet(o)
	err := cmdline.Parse(fs, args)
	if err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, cmdline.Usagef("unexpected argument %q (see --help)", fs.Arg(0))
	}
	if !o.embedded && (fs.Changed("listen") || fs.Changed("data-dir") || fs.Changed("no-credentials")) {
		return nil, cmdline.Usagef("--listen, --data-dir and --no-credentials go with --embedded")
	}
	if o.embedded && o.noCredentials && !natsembed.Loopback(o.listen) {
		return nil, cmdline.Usagef("--listen %s is not a loopback address: there the NATS server needs its credentials (drop --no-credentials)", o.listen)
	}
	if o.embedded && fs.Changed("nats") {
		return nil, cmdline.Usagef("--nats and --embedded exclude each other")
	}
	if o.lanes, err = parseLanes(o.queue); err != nil {
		return nil, err
	}
	if !fs.Changed("slots") {
		o.slots = max(o.slots, len(o.lanes))
	}
	if o.slots < 1 {
		return nil, cmdline.Usagef("--slots %d: want at least 1", o.slots)
	}
	if o.slots < len(o.lanes) {
		return nil, cmdline.Usagef("--slots %d: want at least one per --queue (%d): an idle lane waits for work with a slot of its own", o.slots, len(o.lanes))
	}
	if !fs.Changed("pool") {
		o.pool = o.slots
	}
	if o.pool < 0 {
		return nil, cmdline.Usagef("--pool %d: want 0 (off) or more", o.pool)
	}
	if !fs.Changed("pool-max") {
		o.poolMax = 4 * o.pool
	}
	if o.poolMax < o.pool {
		return nil, cmdline.Usagef("--pool-max %d: want at least --pool (%d)", o.poolMax, o.pool)
	}
	if o.grace < 0 {
		return nil, cmdline.Usagef("--grace %s is negative", o.grace)
	}
	if o.uids, err = executor.ParseUIDRange(o.sandboxUIDs); err != nil {
		return nil, cmdline.Usagef("--sandbox-uids: %w", err)
	}
	// Each running and warm sandbox holds a uid: a range smaller than the
	// worker's own sandboxes leaves its slots without one.
	if o.sessions < 0 {
		return nil, cmdline.Usagef("--sessions %d: want 0 (none) or more", o.sessions)
	}
	if n, want := uint64(o.uids.Last-o.uids.First)+1, uint64(o.slots+o.poolMax+o.sessions); n < want {
		return nil, cmdline.Usagef("--sandbox-uids %s: %d uids, want at least --slots + --pool-max + --sessions (%d), and room for the other workers' on the engine", o.uids, n, want)
	}
	if err := o.http.resolve(fs, o.embedded); err != nil {
		return nil, err
	}
	o.id = worker.NormalizeID(o.id)
	return o, nil
}

func newLogger(format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, cmdline.Usagef("--log-level %q: want debug, info, warn or error", level)
	}
	ho := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, ho)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, ho)), nil
	}
	return nil, cmdline.Usagef("--log-format %q: want text or json", format)
}

// Run runs the worker until stop is canceled, then drains; force (or the
// end of --grace after stop) cancels the jobs in flight. --help and
// --version print on stdout and return nil; errors of the command line
// and of the configuration match cmdline.ErrUsage.
func Run(stop, force context.Context, args []string, stdout io.Writer) error {
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
		gw, err := startGateway(stop, o, log)
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
	// After the first signal, the grace period; then force.
	force, forceNow := context.WithCancel(force)
	defer forceNow()
	defer context.AfterFunc(stop, func() {
		t := time.AfterFunc(o.grace, func() {
			log.Warn("grace period over; stopping the jobs in flight", "grace", o.grace)
			forceNow()
		})
		context.AfterFunc(force, func() { t.Stop() })
	})()

	url := natsconn.ServerURL(o.natsURL)
	if o.embedded {
		if err := os.MkdirAll(o.dataDir, 0o750); err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
		so := natsembed.Options{Listen: o.listen, StoreDir: o.dataDir}
		credentials := "none"
		if !o.noCredentials {
			path, user, password, err := natsembed.Credentials(o.dataDir)
			if errors.Is(err, natsembed.ErrCredentialsMode) || errors.Is(err, natscreds.ErrBad) {
				return cmdline.Usagef("--data-dir: %w", err)
			}
			if err != nil {
				return fmt.Errorf("--data-dir: %w", err)
			}
			so.User, so.Password, credentials = user, password, path
		}
		srv, err := natsembed.Start(so)
		if err != nil {
			return err
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		url = natsembed.ClientURL(srv, so)
		log.Info("embedded NATS JetStream server started", "url", srv.ClientURL(), "data_dir", o.dataDir, "credentials", credentials)
		if o.noCredentials {
			log.Warn("the embedded NATS server takes connections without credentials (--no-credentials): any local process may read, forge and delete jobs and results")
		} else if !natsembed.Loopback(o.listen) {
			log.Warn("the embedded NATS server listens beyond this machine without TLS: its password and the jobs cross the network in clear", "listen", o.listen)
		}
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
	topo := jobs.Topology{
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
	w, err := worker.New(js, exec, worker.Config{
		ID:       o.id,
		Queues:   o.lanes,
		Slots:    o.slots,
		Version:  cmdline.Version(version),
		Topology: topo,
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
		hs := &http.Server{Handler: statusHandler(w, nc.IsConnected, m.handler()), ReadHeaderTimeout: 5 * time.Second}
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
	if ss, ok := exec.(sessionStarter); ok && o.sessions > 0 {
		// Beside the jobs: a fleet whose sessions cannot be set up (a
		// bucket its credentials may not make) still runs jobs, and a stop
		// during the set-up is no failure.
		var sobs sessionhost.Observer
		if m != nil {
			sobs = m
		}
		wg.Go(func() {
			host, err := sessionhost.New(stop, js, startSession(ss), sessionhost.Config{
				Worker: o.id, Max: o.sessions, MaxLifetime: o.sessionLifetime,
				Limits: ss.ResolveLimits, Images: ss.HasPreset, Logger: log, Observer: sobs,
				Workspaces: sessionWorkspaces(js, topo),
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
		})
	}
	return w.Run(stop, force)
}

// sessionStarter is an executor that starts sessions' sandboxes.
type sessionStarter interface {
	StartSession(ctx context.Context, spec executor.SessionSpec) (*executor.Session, error)
	ResolveLimits(limits.Limits) (limits.Limits, error)
	HasPreset(name string) bool
}

// startSession is how the session host starts a sandbox on ss.
func startSession(ss sessionStarter) sessionhost.Starter {
	return func(ctx context.Context, spec sessionhost.StartSpec) (sessionhost.Sandbox, error) {
		return ss.StartSession(ctx, executor.SessionSpec{ID: spec.ID, Image: spec.Image, Limits: spec.Limits,
			Env: spec.Env, Files: spec.Files, Lifetime: spec.Lifetime, OutputLimit: spec.MaxOutput, Restore: spec.Restore, OnEvent: spec.OnEvent})
	}
}

// sessionWorkspaces opens the workspace stores persistent sessions keep
// their checkpoints in, with the fleet's settings, each once per process.
func sessionWorkspaces(js jetstream.JetStream, topo jobs.Topology) func(context.Context, string) (jetstream.KeyValue, jetstream.ObjectStore, error) {
	var mu sync.Mutex
	var heads jetstream.KeyValue
	snaps := map[string]jetstream.ObjectStore{}
	return func(ctx context.Context, tenant string) (jetstream.KeyValue, jetstream.ObjectStore, error) {
		mu.Lock()
		defer mu.Unlock()
		if heads == nil {
			ws, err := topo.EnsureWorkspaces(ctx, js)
			if err != nil {
				return nil, nil, err
			}
			heads, snaps[""] = ws.Heads, ws.Snapshots
		}
		if s, ok := snaps[tenant]; ok {
			return heads, s, nil
		}
		o, err := topo.EnsureObjects(ctx, js, tenant)
		if err != nil {
			return nil, nil, err
		}
		snaps[tenant] = o.Snapshots
		return heads, o.Snapshots, nil
	}
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
// connected, topology set up, executor up), /status (the heartbeat) and
// /metrics (Prometheus).
func statusHandler(w *worker.Worker, natsUp func() bool, metrics http.Handler) http.Handler {
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
		fmt.Fprintln(rw, "ready")
	})
	mux.HandleFunc("GET /status", func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(w.Status())
	})
	return mux
}

// executorConfig builds the executor's configuration from --config and the
// cap flags (flags win).
func executorConfig(o *options) (executor.Config, error) {
	var fc fileConfig
	if o.configFile != "" {
		data, err := os.ReadFile(o.configFile)
		if err != nil {
			return executor.Config{}, fmt.Errorf("--config: %w", err)
		}
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&fc); err != nil {
			return executor.Config{}, cmdline.Usagef("--config %s: %w", o.configFile, err)
		}
	}
	cfg := executor.Config{
		Presets:  fc.Presets,
		Defaults: fc.Defaults,
		Runtime:  fc.Runtime,
		WorkerID: o.id,
		Pool:     o.pool,
		PoolMax:  o.poolMax,
		UIDs:     o.uids,
	}
	if o.runtime != "" {
		cfg.Runtime = o.runtime
	}
	cfg.NetworkRuntime = o.networkRuntime
	if cfg.NetworkRuntime == "" && cfg.Runtime == "runsc" {
		cfg.NetworkRuntime = "runsc-net" // runsc itself is registered with no network at all
	}
	// The cap flags win over the file's caps, field by field.
	cfg.Caps = limits.Caps(o.caps.Fill(fc.Caps))
	allow, err := limits.ParseRules(o.egressAllow)
	if err != nil {
		return executor.Config{}, cmdline.Usagef("--egress-allow: %w", err)
	}
	// The flags add to the file's caps.network.
	nw := limits.Network{Open: o.allowNetwork, Allow: allow}
	if fc.Caps.Network != nil {
		nw.Open = nw.Open || fc.Caps.Network.Open
		nw.Allow = append(nw.Allow, fc.Caps.Network.Allow...)
	}
	if !nw.None() {
		cfg.Caps.Network = &nw
	}
	return cfg, nil
}

// startGateway starts the egress gateway of a worker whose jobs may have
// a network: its internal network and proxy, named after the worker.
func startGateway(ctx context.Context, o *options, log *slog.Logger) (*egress.Gateway, error) {
	hosts, err := egress.ParseHosts(o.egressHosts)
	if err != nil {
		return nil, cmdline.Usagef("--egress-hosts: %w", err)
	}
	subnets, err := netip.ParsePrefix(o.egressSubnets)
	if err != nil {
		return nil, cmdline.Usagef("--egress-subnets: %w", err)
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		return nil, fmt.Errorf("egress: docker client: %w", err)
	}
	name := "sandfleet-egress-" + strings.NewReplacer("/", "-", "=", "-").Replace(o.id)
	return egress.StartGateway(ctx, egress.GatewayConfig{
		Client: cli, Name: name, Image: o.egressImage, Outside: o.egressNetwork, Hosts: hosts, Subnets: subnets, Logger: log,
	})
}

// newExecutor is the one place that wires pkg/executor in.
func newExecutor(cfg executor.Config) (interface {
	worker.Executor
	Close() error
}, error) {
	e, err := executor.New(cfg)
	if err != nil {
		return nil, cmdline.Usagef("%w", err)
	}
	return executor.StartReaping(e), nil
}

var _ worker.Pinger = (*executor.Reaping)(nil)
