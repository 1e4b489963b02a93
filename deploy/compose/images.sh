#!/usr/bin/env bash
# Build the fleet's images locally, with no registry: static binaries are
# built on the host and copied into FROM scratch images.
#
#   sandfleet/nats:<version>   nats-server at the version go.mod pins (also :latest)
#   sandfleet/worker:latest    cmd/worker
#   sandfleet/egress:latest    cmd/egress, the egress proxy a worker starts
#                              for its sandboxes with a network
#
# Usage: images.sh [nats] [worker] [egress]    (default: all three)
# Env:   GO (default go), WORKER_TAG (default sandfleet/worker:latest),
#        EGRESS_TAG (default sandfleet/egress:latest)
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

for t in "${targets[@]}"; do
	case "$t" in
	nats) build_nats ;;
	worker) build_worker ;;
	egress) build_egress ;;
	*) echo "images: unknown target $t (want nats, worker or egress)" >&2; exit 2 ;;
	esac
done
