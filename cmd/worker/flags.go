package main

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandfleet/sandfleet/internal/cmdline"
	"github.com/sandfleet/sandfleet/internal/egress"
	"github.com/sandfleet/sandfleet/internal/egressnet"
	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/natsconn"
	"github.com/sandfleet/sandfleet/internal/natscreds"
	"github.com/sandfleet/sandfleet/internal/natsembed"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

const usage = `usage: worker [--nats URL | --embedded [--listen ADDR] [--data-dir DIR] [--no-credentials]]
              [--queue NAME[:WEIGHT]]... [--slots N] [--pool N] [--pool-max N] [--id NAME] [--config FILE]
              [--metrics ADDR] [--grace D] [--http ADDR [--tokens FILE]]
              [cap flags] [fleet-wide flags]
       worker metrics

Pulls sandfleet jobs from NATS JetStream (stream JOBS, consumer
workers-<queue>) and runs each in a fresh, locked-down Docker sandbox.

The first SIGINT/SIGTERM drains: no more jobs are fetched, the jobs in flight
finish (for at most --grace) and are acked. A second signal, SIGQUIT or the
end of the grace period stops the sandboxes and hands their jobs back for
immediate redelivery.

"worker metrics" lists the metrics --metrics serves, one a line: name,
type, labels and help, separated by tabs.

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
	pprof               bool
	grace               time.Duration
	runtime             string
	sandboxUIDs         string            // --sandbox-uids as given
	uids                executor.UIDRange // --sandbox-uids parsed
	logFormat, logLevel string
	caps                limits.Limits
	allowNetwork        bool
	egressAllow         string // --egress-allow as given
	egressImage         string
	engineWait          time.Duration
	egressNetwork       string
	egressHosts         string          // --egress-hosts as given
	egressSubnets       string          // --egress-subnets as given
	subnets             netip.Prefix    // --egress-subnets parsed
	egressUpstreamCA    string          // --egress-upstream-ca as given
	secretsFile         string          // --secrets as given
	secrets             []egress.Secret // --secrets read
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
	sessionIdle         time.Duration
	sessionsPerToken    int
	sessionsPerTenant   int

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
	fs.BoolVar(&o.pprof, "pprof", false, "also serve Go's profiles (/debug/pprof/: heap, goroutines, CPU) on the --metrics listener, which should then be reachable by operators only")
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
	fs.StringVar(&o.egressAllow, "egress-allow", "", "the egress rules any job may name in limits.network.allow: `LIST` of hosts (*.example.org), IPs and CIDRs with optional :PORT, comma-separated (default empty: no job may have a network); private, loopback and link-local addresses only where named here; none within --egress-subnets (the worker refuses to start)")
	fs.StringVar(&o.egressImage, "egress-image", egressnet.DefaultImage, "`IMAGE` of the egress proxy, started when jobs may have a network (make images builds it)")
	fs.DurationVar(&o.engineWait, "engine-wait", 5*time.Minute, "when jobs may have a network, wait up to `D` at start for the Docker engine to answer before starting the egress proxy (an engine starting beside the worker); 0 fails at once")
	fs.StringVar(&o.egressNetwork, "egress-network", "bridge", "Docker `NETWORK` the egress proxy reaches the world by; the worker reaches the proxy's control API on it")
	fs.StringVar(&o.egressHosts, "egress-hosts", "", "`LIST` of NAME=IP the egress proxy uses instead of DNS (air-gapped fleets, mirrors); a pinned name may be a private address")
	fs.StringVar(&o.egressSubnets, "egress-subnets", egressnet.DefaultSubnets.String(), "IPv4 `CIDR` each sandbox with a network takes a /28 network of its own from (one per sandbox at once); none the host routes to")
	fs.StringVar(&o.egressUpstreamCA, "egress-upstream-ca", "", "PEM `FILE` of CAs the egress proxy trusts besides the system's when it verifies a host it adds a secret for (a mirror's, a test's)")
	fs.StringVar(&o.secretsFile, "secrets", "", "JSON `FILE` of credentials the egress proxy adds to jobs' HTTPS requests, never shown to the job: a list of {\"name\", \"hosts\", \"header\", \"value_file\" or \"value_env\"}; a job names those it may use in limits.network.secrets")
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
	fs.DurationVar(&o.sessionIdle, "session-max-idle", time.Hour, "the longest `D` a session may ask for as idle_timeout")
	fs.IntVar(&o.sessionsPerToken, "session-max-per-token", 4, "the most live sessions `N` one token holds in the fleet (give every worker the same); -1 no cap")
	fs.IntVar(&o.sessionsPerTenant, "session-max-per-tenant", 8, "the most live sessions `N` the tokens of one tenant hold in the fleet (give every worker the same); -1 no cap")
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
	if o.engineWait < 0 {
		return nil, cmdline.Usagef("--engine-wait %s is negative", o.engineWait)
	}
	if o.grace < 0 {
		return nil, cmdline.Usagef("--grace %s is negative", o.grace)
	}
	if o.secretsFile != "" {
		if o.secrets, err = egressnet.LoadSecrets(o.secretsFile, os.Getenv); err != nil {
			return nil, cmdline.Usagef("--secrets: %w", err)
		}
	}
	if o.subnets, err = netip.ParsePrefix(o.egressSubnets); err != nil {
		return nil, cmdline.Usagef("--egress-subnets: %w", err)
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
