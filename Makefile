# sandfleet: build, run, test, bench.
GO      ?= go
BIN     ?= bin
GOFLAGS ?=
TEST_TIMEOUT ?= 30m

export CGO_ENABLED ?= 0

.PHONY: all build sandbox-image run test test-short vet bench humaneval soak up down clean

all: build

## build: the worker and submit binaries in bin/
build:
	$(GO) build $(GOFLAGS) -o $(BIN)/ ./cmd/worker ./cmd/submit

## sandbox-image: sandfleet/sandbox:latest (online base if pullable, else a local Debian base)
sandbox-image:
	./sandbox-image/build.sh

## run: build everything and start one worker with an embedded JetStream server
run: build sandbox-image
	$(BIN)/worker --embedded

## test: vet and the whole suite with the race detector (real Docker, in-process JetStream)
test: build sandbox-image vet
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

## test-short: unit tests only, no Docker
test-short:
	CGO_ENABLED=1 $(GO) test -race -short ./...

## humaneval: HumanEval as a batch, canonical solutions (all must succeed) and broken ones (all must fail)
humaneval: build
	./examples/humaneval/run.sh

vet:
	$(GO) vet ./...

clean:
	rm -rf $(BIN)
