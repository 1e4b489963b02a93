#!/bin/sh
# Installs gVisor's runsc (Debian's package) when missing and registers it
# with the running Docker daemon as the runtimes "runsc" and "runsc-net",
# without a restart: daemon.json gains them, then dockerd gets a SIGHUP.
# Idempotent.
#
# --network=none: runsc refuses Docker's "none" network without it, and
# with it a sandbox has no network at all. So sandboxes with a network (on
# the egress gateway's internal network, the proxy their only way out) run
# under "runsc-net" (the worker's --network-runtime): --network=host, which
# under Docker is the container's own network namespace, the one Docker
# attached to the internal network, used through the host kernel's stack
# (gVisor's own, --network=sandbox, fails on this Docker: "cannot run with
# network enabled in root network namespace"). What the sandbox reaches is
# exactly what a runc sandbox does; its system calls still go to gVisor.
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
state_net=$(sudo_ bin/daemonjson -file /etc/docker/daemon.json -name runsc-net -path "$path" -arg --network=host -arg --oci-seccomp)
[ "$state_net" = unchanged ] || state=$state_net
if [ "$state" = unchanged ] && docker info --format '{{json .Runtimes}}' | grep -q '"runsc-net"'; then
	log "runsc is registered with Docker"
	exit 0
fi
log "daemon.json: $state"
pid=$(pidof dockerd || true)
[ -n "$pid" ] || { log "dockerd is not running here: restart Docker to load the runtime"; exit 1; }
sudo_ kill -HUP $pid
for _ in $(seq 1 30); do
	if docker info --format '{{json .Runtimes}}' | grep -q '"runsc-net"'; then
		log "runsc and runsc-net registered (dockerd reloaded its configuration)"
		exit 0
	fi
	sleep 1
done
log "dockerd did not pick up runsc; see its log"
exit 1
