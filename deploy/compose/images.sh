#!/usr/bin/env bash
# Build the fleet's images locally, with no registry: static binaries are
# built on the host and copied into FROM scratch images.
#
#   sandfleet/nats:<version>   nats-server at the version go.mod pins (also :latest)
#   sandfleet/worker:latest    cmd/worker
#   sandfleet/egress:latest    cmd/egress, the egress proxy a worker starts
#                              for its sandboxes with a network
#   sandfleet/engine:latest    only when asked for: the Docker engine of a
#                              worker pod (deploy/kubernetes/engine-sidecar,
#                              deploy/engine): Debian's docker.io and runsc
#                              in a bookworm base made with mmdebstrap
#                              (cached as sandfleet/debian-engine-base:bookworm;
#                              a first build takes a few minutes), with
#                              $ENGINE_IMAGES saved into it, loaded at start
#
# Usage: images.sh [nats] [worker] [egress] [engine]  (default: the first three)
# Env:   GO (default go), WORKER_TAG (default sandfleet/worker:latest),
#        EGRESS_TAG (default sandfleet/egress:latest), ENGINE_IMAGES (default
#        "sandfleet/sandbox:latest sandfleet/egress:latest", plus
#        sandfleet/sandbox-langs:latest when this host has it),
#        SANDBOX_APT_SOURCES (as sandbox-image/build.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
GO=${GO:-go}
WORKER_TAG=${WORKER_TAG:-sandfleet/worker:latest}
export CGO_ENABLED=0

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(nats worker egress)

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

# context DIR: a build context with an empty /tmp; the binary goes next to it.
context() {
	mkdir -p "$1/tmp"
	chmod 1777 "$1/tmp"
}

nats_version() {
	(cd "$root" && "$GO" list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)
}

build_nats() {
	local v dir
	v=$(nats_version)
	dir="$ctx/nats"
	context "$dir"
	echo "images: building nats-server $v"
	(cd "$root" && "$GO" build -trimpath -ldflags '-s -w' -o "$dir/nats-server" github.com/nats-io/nats-server/v2)
	cp "$here/nats.Dockerfile" "$dir/Dockerfile"
	docker build -q -t "sandfleet/nats:${v#v}" -t sandfleet/nats:latest \
		--label "org.opencontainers.image.version=${v#v}" "$dir" >/dev/null
	echo "images: sandfleet/nats:${v#v} sandfleet/nats:latest"
}

build_worker() {
	local dir rev
	dir="$ctx/worker"
	context "$dir"
	if [ ! -d "$root/cmd/worker" ] || ! ls "$root"/cmd/worker/*.go >/dev/null 2>&1; then
		echo "images: cmd/worker does not exist yet; cannot build $WORKER_TAG" >&2
		return 1
	fi
	rev=$(cd "$root" && git describe --tags --always --dirty 2>/dev/null || echo unknown)
	echo "images: building cmd/worker $rev"
	(cd "$root" && "$GO" build -trimpath -ldflags "-s -w -X main.version=$rev" -o "$dir/worker" ./cmd/worker)
	cp "$here/worker.Dockerfile" "$dir/Dockerfile"
	docker build -q -t "$WORKER_TAG" --label "org.opencontainers.image.revision=$rev" "$dir" >/dev/null
	echo "images: $WORKER_TAG"
	if ! docker image inspect sandfleet/sandbox:latest >/dev/null 2>&1; then
		echo "images: warning: sandfleet/sandbox:latest is not on this host; workers need it (make sandbox-image)" >&2
	fi
}

build_egress() {
	local dir rev
	dir="$ctx/egress"
	mkdir -p "$dir"
	rev=$(cd "$root" && git describe --always --dirty 2>/dev/null || echo unknown)
	echo "images: building cmd/egress $rev"
	(cd "$root" && "$GO" build -trimpath -ldflags "-s -w" -o "$dir/egress" ./cmd/egress)
	cp "$here/egress.Dockerfile" "$dir/Dockerfile"
	# The roots the proxy verifies the hosts it intercepts by: the host's.
	: >"$dir/ca-certificates.crt"
	for f in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt /etc/ssl/cert.pem; do
		if [ -r "$f" ]; then cp "$f" "$dir/ca-certificates.crt"; break; fi
	done
	docker build -q -t "${EGRESS_TAG:-sandfleet/egress:latest}" --label "org.opencontainers.image.revision=$rev" "$dir" >/dev/null
	echo "images: ${EGRESS_TAG:-sandfleet/egress:latest}"
}

engine_base=sandfleet/debian-engine-base:bookworm

build_engine_base() {
	local sources tmp
	if docker image inspect "$engine_base" >/dev/null 2>&1; then
		echo "images: $engine_base is cached"
		return
	fi
	command -v mmdebstrap >/dev/null || { echo "images: mmdebstrap is missing (apt-get install mmdebstrap)" >&2; return 1; }
	sources=${SANDBOX_APT_SOURCES:-/etc/apt/sources.list.d/debian.sources}
	tmp="$ctx/engine-base"
	mkdir -p "$tmp"
	echo "images: building $engine_base with mmdebstrap (a few minutes)"
	set -- --variant=minbase --include=docker.io,iptables,runsc,fuse-overlayfs,ca-certificates,procps,curl \
		--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
		--dpkgopt='path-exclude=/usr/share/locale/*' bookworm "$tmp/base.tar"
	if [ -r "$sources" ]; then mmdebstrap "$@" - <"$sources" >&2; else mmdebstrap "$@" >&2; fi
	docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		"$tmp/base.tar" "$engine_base" >/dev/null
	rm -rf "$tmp"
}

build_engine() {
	local dir images img
	build_engine_base
	dir="$ctx/engine"
	mkdir -p "$dir/images"
	images=${ENGINE_IMAGES:-sandfleet/sandbox:latest sandfleet/egress:latest}
	if [ -z "${ENGINE_IMAGES:-}" ] && docker image inspect sandfleet/sandbox-langs:latest >/dev/null 2>&1; then
		images="$images sandfleet/sandbox-langs:latest"
	fi
	for img in $images; do
		docker image inspect "$img" >/dev/null 2>&1 || { echo "images: $img is not on this host (make sandbox-image images)" >&2; return 1; }
		echo "images: saving $img into the engine"
		docker save -o "$dir/images/$(echo "$img" | tr '/:' '__').tar" "$img"
	done
	cp "$root/deploy/engine/Dockerfile" "$root/deploy/engine/engine.sh" "$dir/"
	docker build -q -t "${ENGINE_TAG:-sandfleet/engine:latest}" --build-arg "BASE=$engine_base" "$dir" >/dev/null
	echo "images: ${ENGINE_TAG:-sandfleet/engine:latest} (with $images)"
}

for t in "${targets[@]}"; do
	case "$t" in
	nats) build_nats ;;
	worker) build_worker ;;
	egress) build_egress ;;
	engine) build_engine ;;
	*) echo "images: unknown target $t (want nats, worker, egress or engine)" >&2; exit 2 ;;
	esac
done
