#!/usr/bin/env bash
# Start the fleet: passwords (made once), then the 3-node cluster and the
# workers from the locally built images (./images.sh). Extra arguments go to
# `compose up`, e.g. ./up.sh --scale worker2=0.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
"$here/secrets.sh"
"$here/tenants.sh" # the tenants of .env's SANDFLEET_TENANTS into nats.conf
for img in "sandfleet/nats:$(sed -n 's/^NATS_VERSION=//p' "$here/.env")" "${SANDFLEET_WORKER_IMAGE:-sandfleet/worker:latest}" sandfleet/sandbox:latest; do
	if ! docker image inspect "$img" >/dev/null 2>&1; then
		echo "up: image $img is missing: run make images (and make sandbox-image)" >&2
		exit 1
	fi
done
"$here/compose.sh" up -d "$@"
. "$here/.env"
cat <<EOT
up: fleet started. Submit from this host with
  export NATS_URL='nats://submitter:<SANDFLEET_SUBMITTER_PASSWORD from $here/.env>@127.0.0.1:${SANDFLEET_NATS_PORT1:-4222}'
  bin/submit run -c 'print(6*7)'
up: logs: $here/compose.sh logs -f      stop: make down
EOT
