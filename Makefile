# sandfleet: build, run, test, bench.
GO      ?= go
BIN     ?= bin
GOFLAGS ?=
TEST_TIMEOUT ?= 30m

export CGO_ENABLED ?= 0

.PHONY: all build sandbox-image runsc run test test-short vet bench humaneval soak up down clean

all: build

## build: the worker and submit binaries in bin/
build:
	$(GO) build $(GOFLAGS) -o $(BIN)/ ./cmd/worker ./cmd/submit

## sandbox-image: sandfleet/sandbox:latest (online base if pullable, else a local Debian base)
sandbox-image:
	./sandbox-image/build.sh

## runsc: install gVisor (Debian's runsc) and register it with the running Docker daemon (no restart)
runsc:
	./deploy/runsc.sh

## run: build everything and start one worker with an embedded JetStream server
run: build sandbox-image
	$(BIN)/worker --embedded

## images: the fleet's images, built locally: sandfleet/nats:<go.mod version>, sandfleet/worker:latest
images: sandbox-image
	./deploy/compose/images.sh

## up: the fleet on this host: a 3-node NATS JetStream cluster and 2 workers (deploy/compose)
up: images
	./deploy/compose/up.sh

## down: stop the fleet (keeps the JetStream volumes; ./deploy/compose/down.sh -v drops them)
down:
	./deploy/compose/down.sh

## test: vet and the whole suite with the race detector (real Docker, in-process JetStream, the compose images)
test: build images vet
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

## test-short: unit tests only, no Docker
test-short:
	CGO_ENABLED=1 $(GO) test -race -short ./...

## humaneval: HumanEval as a batch, canonical solutions (all must succeed) and broken ones (all must fail)
humaneval: build
	./examples/humaneval/run.sh

## bench: docker run --rm vs sandfleet (warm pool on and off), queue overhead, worker RSS, streaming on vs off (~3-4 min)
bench: build sandbox-image
	$(GO) run ./internal/cmd/bench -worker $(BIN)/worker $(BENCH_FLAGS)

vet:
	$(GO) vet ./...

clean:
	rm -rf $(BIN)
