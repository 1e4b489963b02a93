#!/usr/bin/env bash
# Run docker compose for the fleet: `docker compose` (v2) when present, else
# docker-compose (v1); COMPOSE overrides, e.g. COMPOSE=docker-compose.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${COMPOSE:-}" ]; then
	if docker compose version >/dev/null 2>&1; then
		COMPOSE="docker compose"
	elif command -v docker-compose >/dev/null 2>&1; then
		COMPOSE=docker-compose
	else
		echo "compose: neither 'docker compose' nor docker-compose is installed" >&2
		exit 1
	fi
fi
cd "$here"
# shellcheck disable=SC2086 # COMPOSE may be two words
exec $COMPOSE --project-name "${SANDFLEET_PROJECT:-sandfleet}" --env-file "$here/.env" -f "$here/docker-compose.yml" "$@"
