#!/usr/bin/env bash
# Stop the fleet and remove its containers and network. The JetStream volumes
# (queued jobs, results) are kept; ./down.sh -v removes them too. Extra
# arguments go to `compose down`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$here/.env" ]; then
	echo "down: no $here/.env, nothing was started from here"
	exit 0
fi
"$here/compose.sh" down --remove-orphans "$@"
