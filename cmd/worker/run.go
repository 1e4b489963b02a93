package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandfleet/sandfleet/internal/natsembed"
	"github.com/sandfleet/sandfleet/internal/natsurl"
	"github.com/sandfleet/sandfleet/pkg/executor"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/worker"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// errUsage marks errors of the command line; main exits 2 on them.
var errUsage = errors.New("usage")

const usage = `usage: worker [--nats URL | --embedded [--listen ADDR] [--data-dir DIR]]
              [--queue NAME] [--slots N] [--pool N] [--id NAME] [--config FILE]
              [--metrics ADDR] [--grace D] [cap flags]

Pulls sandfleet jobs from NATS JetStream (stream JOBS, consumer
workers-<queue>) and runs each in a fresh, locked-down Docker sandbox.

The first SIGINT/SIGTERM drains: no more jobs are fetched, the jobs in flight
finish (for at most --grace) and are acked. A second signal, SIGQUIT or the
end of the grace period stops the sandboxes and hands their jobs back for
immediate redelivery.

Flags:
`

// fileConfig is the JSON of --config. Every field is optional.
//
//	{"presets": {"python": {"image": "sandfleet/sandbox:latest",
//	                        "main_file": "main.py", "argv": ["python3", "main.py"]}},
//	 "defaults": {"timeout": "30s", "memory": "512m"},
//	 "caps": {"timeout": "10m", "memory": "4g", "cpus": 2, "network": false},
//	 "runtime": "runc"}
type fileConfig struct {
	Presets map[string]struct {
		Image    string   `json:"image"`
		MainFile string   `json:"main_file"`
		Argv     []string `json:"argv"`
	} `json:"presets"`
	Defaults limits.Limits `json:"defaults"`
	Caps     limits.Limits `json:"caps"`
	Runtime  string        `json:"runtime"`
}

var longFlag = regexp.MustCompile(`(?m)^(  )-(\w\w)`)

type options struct {
	natsURL, listen, dataDir string
	embedded                 bool
	queue, id, configFile    string
	slots                    int
	pool                     int
	metrics                  string
	grace                    time.Duration
	runtime                  string
	logFormat, logLevel      string
	caps                     limits.Limits
	allowNetwork             bool
	ackWait                  time.Duration
	maxDeliver               int
	replicas                 int

	// ready, if set, is called with the NATS URL once connected (tests).
	ready func(url string)
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	var out io.Writer = os.Stderr
	if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" }) {
		out = os.Stdout // help asked for is output, not an error
	}
	fs.SetOutput(out)
	fs.Usage = func() {
		var b strings.Builder
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(out)
		// The docs spell flags GNU-style; the flag package accepts both.
		fmt.Fprint(out, usage, longFlag.ReplaceAllString(b.String(), "$1--$2"))
	}
	natsDefault := os.Getenv("NATS_URL")
	if natsDefault == "" {
		natsDefault = nats.DefaultURL
	}
	fs.StringVar(&o.natsURL, "nats", natsDefault, "NATS server `URL` (env NATS_URL)")
	fs.BoolVar(&o.embedded, "embedded", false, "run an in-process NATS JetStream server instead of connecting to --nats")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:4222", "with --embedded: `ADDR` the server listens on")
	fs.StringVar(&o.dataDir, "data-dir", "./data", "with --embedded: `DIR` of the JetStream file store (queued jobs and results survive restarts)")
	fs.StringVar(&o.queue, "queue", jobs.DefaultQueue, "queue `NAME` to serve (subjects jobs.NAME.<id>)")
	fs.IntVar(&o.slots, "slots", runtime.NumCPU(), "jobs run at once (`N`)")
	fs.IntVar(&o.pool, "pool", 0, "warm sandboxes kept per preset image, each used once (`N`; default --slots; 0 turns the pool off)")
	fs.StringVar(&o.id, "id", "", "worker `NAME` in results, logs and container labels (default the host name)")
	fs.StringVar(&o.configFile, "config", "", "JSON `FILE` with presets, defaults, caps and runtime")
	fs.StringVar(&o.metrics, "metrics", "", "serve /metrics (Prometheus), /healthz, /readyz and /status on `ADDR` (e.g. 127.0.0.1:9090)")
	fs.DurationVar(&o.grace, "grace", time.Minute, "after the first signal, how long jobs in flight may finish (`D`)")
	fs.StringVar(&o.runtime, "runtime", "", "OCI runtime of the sandboxes: runc (default) or runsc (gVisor)")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Var(&o.caps.Timeout, "max-timeout", "cap on a job's wall-clock timeout (`D`, default 10m)")
	fs.Var(&o.caps.Memory, "max-memory", "cap on a job's memory (`SIZE`, default 4g)")
	fs.Float64Var(&o.caps.CPUs, "max-cpus", 0, "cap on a job's CPUs (`N`, default 2)")
	fs.Int64Var(&o.caps.Pids, "max-pids", 0, "cap on a job's processes (`N`, default 1024)")
	fs.Var(&o.caps.Output, "max-output", "cap on a job's output per stream (`SIZE`, default 2m)")
	fs.BoolVar(&o.allowNetwork, "allow-network", false, "let jobs ask for a network (limits.network)")
	fs.DurationVar(&o.ackWait, "ack-wait", 0, "lease of a job, extended while it runs (`D`, default 30s; fleet-wide)")
	fs.IntVar(&o.maxDeliver, "max-deliver", 0, "deliveries before a job is given up (`N`, default 5; fleet-wide)")
	fs.IntVar(&o.replicas, "replicas", 0, "replicas of the stream and buckets (`N`, default 1; 3 on a cluster)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q (see --help)", errUsage, fs.Arg(0))
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	if !o.embedded && (explicit["listen"] || explicit["data-dir"]) {
		return nil, fmt.Errorf("%w: --listen and --data-dir go with --embedded", errUsage)
	}
	if o.embedded && explicit["nats"] {
		return nil, fmt.Errorf("%w: --nats and --embedded exclude each other", errUsage)
	}
	if o.slots < 1 {
		return nil, fmt.Errorf("%w: --slots %d: want at least 1", errUsage, o.slots)
	}
	if !explicit["pool"] {
		o.pool = o.slots
	}
	if o.pool < 0 {
		return nil, fmt.Errorf("%w: --pool %d: want 0 (off) or more", errUsage, o.pool)
	}
	if o.grace < 0 {
		return nil, fmt.Errorf("%w: --grace %s is negative", errUsage, o.grace)
	}
	return o, nil
}

func newLogger(format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", errUsage, level)
	}
	ho := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, ho)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, ho)), nil
	}
	return nil, fmt.Errorf("%w: --log-format %q: want text or json", errUsage, format)
}

// Run runs the worker until stop is canceled, then drains; force (or the
// end of --grace after stop) cancels the jobs in flight.
func Run(stop, force context.Context, args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
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

	url := o.natsURL
	if o.embedded {
		if err := os.MkdirAll(o.dataDir, 0o750); err != nil {
			return fmt.Errorf("--data-dir: %w", err)
		}
		srv, err := natsembed.Start(natsembed.Options{Listen: o.listen, StoreDir: o.dataDir})
		if err != nil {
			return err
		}
		defer func() {
			srv.Shutdown()
			srv.WaitForShutdown()
		}()
		url = srv.ClientURL()
		log.Info("embedded NATS JetStream server started", "url", url, "data_dir", o.dataDir)
	}
	log.Info("connecting to NATS", "url", natsurl.Redact(url))
	var everConnected atomic.Bool
	nc, err := nats.Connect(url,
		nats.Name("sandfleet-worker"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		// At a fleet's start NATS may come up after the worker: keep
		// trying (the topology set-up waits for it) instead of exiting.
		nats.RetryOnFailedConnect(true),
		nats.ConnectHandler(func(c *nats.Conn) {
			everConnected.Store(true)
			log.Info("NATS connected", "url", natsurl.Redact(c.ConnectedUrl()))
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			level := slog.LevelDebug // during an outage, "disconnected" said it
			if !everConnected.Load() {
				level = slog.LevelWarn
			}
			log.Log(context.Background(), level, "NATS not reachable; retrying", "url", natsurl.Redact(url), "err", natsurl.Error(err, url))
		}),
		nats.ClosedHandler(func(c *nats.Conn) {
			if err := c.LastError(); err != nil {
				log.Error("NATS connection closed", "err", natsurl.Error(err, url))
			}
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("NATS disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("NATS reconnected", "url", natsurl.Redact(c.ConnectedUrl())) }),
		// Asynchronous errors, permission violations above all, would
		// otherwise only reach nats.go's default handler on stderr.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			attrs := []any{"err", natsurl.Error(err, url)}
			if sub != nil {
				attrs = append(attrs, "subject", sub.Subject)
			}
			log.Error("NATS async error", attrs...)
		}),
	)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", natsurl.Redact(url), natsurl.Error(err, url))
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if o.ready != nil {
		o.ready(url)
	}

	var m *metrics
	var obs worker.Observer
	if o.metrics != "" {
		var presets []string
		if pl, ok := exec.(presetLister); ok {
			presets = pl.Presets()
		}
		m = newMetrics(prometheus.NewRegistry(), presets)
		obs = m
	}
	w, err := worker.New(js, exec, worker.Config{
		ID:      o.id,
		Queue:   o.queue,
		Slots:   o.slots,
		Version: version,
		Topology: jobs.Topology{
			AckWait:    o.ackWait,
			MaxDeliver: o.maxDeliver,
			Replicas:   o.replicas,
		},
		Logger:   log,
		Observer: obs,
	})
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}

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
	return w.Run(stop, force)
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
			return executor.Config{}, fmt.Errorf("%w: --config %s: %v", errUsage, o.configFile, err)
		}
	}
	cfg := executor.Config{
		Defaults: fc.Defaults,
		Caps:     limits.Caps(fc.Caps),
		Runtime:  fc.Runtime,
		WorkerID: o.id,
		Pool:     o.pool,
	}
	if fc.Presets != nil {
		cfg.Presets = map[string]executor.Preset{}
		for name, p := range fc.Presets {
			cfg.Presets[name] = executor.Preset{Image: p.Image, MainFile: p.MainFile, Argv: p.Argv}
		}
	}
	if o.runtime != "" {
		cfg.Runtime = o.runtime
	}
	c := &cfg.Caps
	if o.caps.Timeout != 0 {
		c.Timeout = o.caps.Timeout
	}
	if o.caps.Memory != 0 {
		c.Memory = o.caps.Memory
	}
	if o.caps.CPUs != 0 {
		c.CPUs = o.caps.CPUs
	}
	if o.caps.Pids != 0 {
		c.Pids = o.caps.Pids
	}
	if o.caps.Output != 0 {
		c.Output = o.caps.Output
	}
	if o.allowNetwork {
		c.Network = true
	}
	return cfg, nil
}

// newExecutor is the one place that wires pkg/executor in.
func newExecutor(cfg executor.Config) (interface {
	worker.Executor
	Close() error
}, error) {
	e, err := executor.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	d := &dockerExecutor{Executor: e}
	d.startReaping()
	return d, nil
}
