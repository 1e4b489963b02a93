# sandfleet: build, run, test, bench.
GO      ?= go
BIN     ?= bin
GOFLAGS ?=
TEST_TIMEOUT ?= 30m
# staticcheck, pinned: `go run` fetches it once through the Go module proxy.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
# The build tag of the worker's test hooks (cmd/worker/testhook.go); release
# builds never set it.
TESTHOOKS := sandfleet_testhooks
# The version the binaries' --version reports: the nearest tag vX.Y.Z,
# with the commits since and -dirty for uncommitted changes
# (v0.1.0-3-g1a2b3c4-dirty); a bare commit hash before the first tag.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
# The tests that need the languages' image (make test runs them last).
LANGS_TESTS := TestIntegrationLanguages|TestHumanEvalX

export CGO_ENABLED ?= 0

.PHONY: all help check docs soak test-suite build sandbox-image langs-image data-image data-image-refresh images-all engine-image test-langs humaneval-x runsc run images up down test test-short humaneval humaneval-data bench bench-tti bench-growth vet lint clean

all: build

## help: this list of the targets and what each does
help:
	@awk '/^## [a-z-]+: / { s = substr($$0, 4); i = index(s, ": "); printf "  %-14s %s\n", substr(s, 1, i-1), substr(s, i+2) }' $(firstword $(MAKEFILE_LIST))

## build: the worker, submit and gateway binaries in bin/, their --version from git describe (VERSION=... sets another)
build:
	$(GO) build $(GOFLAGS) -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/worker ./cmd/submit ./cmd/gateway

## check: the fast lane, no Docker: gofmt, go vet and staticcheck (as make lint), then test-short; .ci/run runs it first
check: lint test-short

## sandbox-image: sandfleet/sandbox:latest (online base if pullable, else a local Debian base)
sandbox-image:
	./sandbox-image/build.sh

## langs-image: sandfleet/sandbox-langs:latest, the node, c, cpp, java, go and rust presets (offline Debian base; ~5 min the first time, seconds when cached)
langs-image:
	./sandbox-image/build.sh langs

## data-image: sandfleet/sandbox-data:latest, the python-data preset: numpy, pandas, matplotlib, scipy, scikit-learn, sympy, pillow (offline Debian base; ~8 min the first time on a loaded 2-core host, seconds when cached)
data-image:
	./sandbox-image/build.sh data

## data-image-refresh: rebuild the data image from this tree's launcher when this host has it (its tests run against it; too slow to build from nothing in make test)
data-image-refresh:
	@if docker image inspect sandfleet/sandbox-data:latest >/dev/null 2>&1; then ./sandbox-image/build.sh data; fi

## images-all: every sandbox image: python and shell, the languages, and python-data
images-all: sandbox-image langs-image data-image

## test-langs: the languages' tests on real Docker (builds the langs image when missing)
test-langs: build
	@docker image inspect sandfleet/sandbox-langs:latest >/dev/null 2>&1 || ./sandbox-image/build.sh langs
	SANDFLEET_REQUIRE_LANGS=1 CGO_ENABLED=1 $(GO) test -race -count=1 -run '$(LANGS_TESTS)' ./internal/executor ./examples/humanevalx

## runsc: install gVisor (Debian's runsc) and register it with the running Docker daemon (no restart)
runsc:
	./deploy/runsc.sh

## soak: drive one embedded worker with a mix of jobs, batches, workspaces, egress and sessions for SOAK (default 60m; SOAK=5m for a quick look; SOAK_FLAGS='-nats URL' for an existing JetStream), sample it every minute, judge its criteria (exits non-zero on a miss); table on stdout, curves in soak-out/soak.svg
SOAK ?= 60m
SOAK_FLAGS ?=
soak: build
	SOAK=$(SOAK) $(GO) run ./tools/soak -out soak-out $(SOAK_FLAGS)

## run: build everything and start one worker with an embedded JetStream server and the HTTP API on 127.0.0.1:8080
run: build sandbox-image
	$(BIN)/worker --embedded

## images: the fleet's images, built locally: sandfleet/nats:<go.mod version>, sandfleet/worker:latest, sandfleet/egress:latest
images: sandbox-image
	./deploy/compose/images.sh

## engine-image: sandfleet/engine:latest, the Docker engine of a Kubernetes worker pod (deploy/kubernetes/engine-sidecar), with the sandbox and egress images inside; a first build takes minutes
engine-image: images
	./deploy/compose/images.sh engine

## up: the fleet on this host: a 3-node NATS JetStream cluster and 2 workers (deploy/compose)
up: images
	./deploy/compose/up.sh

## down: stop the fleet (keeps the JetStream volumes; ./deploy/compose/down.sh -v drops them)
down:
	./deploy/compose/down.sh

## test: vet, staticcheck and the whole suite with the race detector (real Docker, in-process JetStream, the compose images), then the languages' tests on their image
test: lint test-suite

## test-suite: make test without the lint: the whole suite, then the languages' tests (.ci/run runs it after make check)
# The languages' tests (compilers in sandboxes, CPU-bound) run after the
# rest, not beside the fault tests, whose engine deadlines they would eat.
test-suite: build images langs-image data-image-refresh
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -skip '$(LANGS_TESTS)' ./...
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -run '$(LANGS_TESTS)' ./internal/executor ./examples/humanevalx

## test-short: unit tests only, no Docker
test-short:
	CGO_ENABLED=1 $(GO) test -race -short ./...

## humaneval: HUMANEVAL=path/to/HumanEval.jsonl.gz as a batch, canonical solutions (all must succeed) and broken ones (all must fail)
humaneval: humaneval-data build
	HUMANEVAL="$(HUMANEVAL)" ./examples/humaneval/run.sh

## humaneval-x: HumanEval-X's six languages as batches, canonical and broken solutions (a worker with both images running; HUMANEVALX=DIR, default ../shared/data/humaneval-x)
humaneval-x: build
	./examples/humanevalx/run.sh

# HumanEval is not part of this repository: say where to get it.
humaneval-data:
	@if [ -z "$(HUMANEVAL)" ] || [ ! -f "$(HUMANEVAL)" ]; then \
		echo "make humaneval needs HUMANEVAL=path/to/HumanEval.jsonl.gz$(if $(HUMANEVAL), ($(HUMANEVAL) does not exist))." >&2; \
		echo "HumanEval is not part of this repository: get data/HumanEval.jsonl.gz from https://github.com/openai/human-eval" >&2; \
		echo "(the project's own 12 problems run the same way: make humaneval HUMANEVAL=examples/problems/problems.jsonl)" >&2; \
		exit 2; \
	fi

## bench: docker run --rm vs sandfleet (warm pool on and off), queue overhead, HTTP gateway overhead, worker RSS, streaming on vs off, the console's pages over 100,000 jobs, then time to interactive as bench-tti does and how cost grows as bench-growth does, its plots in bench-out/ (~20 min)
bench: build sandbox-image
	$(GO) run ./tools/bench -worker $(BIN)/worker $(BENCH_FLAGS)

## bench-tti: time to interactive in the field's format: jobs and sessions over HTTP, sequential, staggered (200 ms apart) and burst, TTI_N each (default 100; 20 for a quick look), against docker run in the same run, with the target table (~10 min at 100)
TTI_N ?= 100
bench-tti: build sandbox-image
	$(GO) run ./tools/bench -worker $(BIN)/worker -mode tti -tti-n $(TTI_N) $(BENCH_FLAGS)

## bench-growth: how cost grows with work on one worker: job latency against 1-64 callers, memory against idle sessions and the pool, exec against busy sessions, broker storage per job and call; tables on stdout, plots in GROWTH_OUT (default docs) (~5 min)
GROWTH_OUT ?= docs
bench-growth: build sandbox-image
	$(GO) run ./tools/bench -worker $(BIN)/worker -mode growth -growth-out $(GROWTH_OUT) $(BENCH_FLAGS)

## vet: gofmt (fails on any unformatted file), go vet, also over the code only the test hooks' build tag compiles
vet:
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted" >&2; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags $(TESTHOOKS) ./cmd/worker

## lint: vet and staticcheck, both builds
lint: vet
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags $(TESTHOOKS) ./cmd/worker

## docs: regenerate docs/cli.md and docs/metrics.md from the binaries (TestCLIPage, TestMetricsPage fail when stale)
docs:
	$(GO) run ./tools/docgen

## clean: remove bin/
clean:
	rm -rf $(BIN)
