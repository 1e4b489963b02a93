#!/bin/sh
# Installs gVisor's runsc (Debian's package) when missing and registers it
# with the running Docker daemon as the runtime "runsc", without a restart:
# daemon.json gains the runtime, then dockerd gets a SIGHUP. Idempotent.
#
# --network=none: runsc refuses Docker's "none" network without it, and
# sandboxes have no network anyway (a job granted network cannot use runsc).
# --oci-seccomp: runsc applies the sandbox's seccomp profile inside its own
# kernel too (it ignores it otherwise), so a denied call fails under both
# runtimes alike.
set -eu
cd "$(dirname "$0")/.."
log() { echo "runsc.sh: $*" >&2; }
sudo_() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v runsc >/dev/null 2>&1; then
	log "installing runsc (Debian package)"
	sudo_ apt-get update -q >&2
	sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -q runsc >&2
fi
path=$(command -v runsc)
go build -o bin/daemonjson ./tools/daemonjson
state=$(sudo_ bin/daemonjson -file /etc/docker/daemon.json -name runsc -path "$path" -arg --network=none -arg --oci-seccomp)
if [ "$state" = unchanged ] && docker info --format '{{json .Runtimes}}' | grep -q '"runsc"'; then
	log "runsc is registered with Docker"
	exit 0
fi
log "daemon.json: $state"
pid=$(pidof dockerd || true)
[ -n "$pid" ] || { log "dockerd is not running here: restart Docker to load the runtime"; exit 1; }
sudo_ kill -HUP $pid
for _ in $(seq 1 30); do
	if docker info --format '{{json .Runtimes}}' | grep -q '"runsc"'; then
		log "runsc registered (dockerd reloaded its configuration)"
		exit 0
	fi
	sleep 1
done
log "dockerd did not pick up runsc; see its log"
exit 1
