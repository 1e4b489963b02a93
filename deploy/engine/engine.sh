#!/bin/sh
# sandfleet-engine: the Docker engine of a worker pod
# (deploy/kubernetes/engine-sidecar), in a privileged container.
#
#   sandfleet-engine             run dockerd, load the baked images, stay up
#   sandfleet-engine ready       exit 0 once dockerd answers and the images
#                                are loaded (the pod's startupProbe)
#   sandfleet-engine wait-worker wait until the worker's containers are gone
#                                and its /healthz no longer answers (the
#                                engine's preStop)
#
# dockerd listens on $ENGINE_SOCKET only (a unix socket in the emptyDir the
# worker mounts), never on TCP. Its data root is /var/lib/docker, the pod's
# own emptyDir. The images in $ENGINE_IMAGES (docker save tarballs baked in
# by deploy/compose/images.sh engine) are loaded at start, so the first job
# does not wait for a build or a pull. gVisor's runsc is registered as the
# runtimes runsc and runsc-net (as deploy/runsc.sh registers them on a host)
# and kept only when a sandbox actually starts under it here.
#
# Environment: ENGINE_SOCKET (default /run/sandfleet-engine/docker.sock),
# ENGINE_IMAGES (default /usr/share/sandfleet/images), ENGINE_STORAGE_DRIVER
# (default: dockerd's choice, overlay2 on the emptyDir), ENGINE_RUNSC
# (auto|off, default auto), ENGINE_CGROUP_PARENT (default: dockerd's, under
# this container's cgroup), WORKER_HEALTHZ (default
# http://127.0.0.1:9090/healthz: the pod shares one network namespace).
set -eu
sock=${ENGINE_SOCKET:-/run/sandfleet-engine/docker.sock}
images=${ENGINE_IMAGES:-/usr/share/sandfleet/images}
loaded=/run/sandfleet-engine.loaded # in this container only
log() { echo "sandfleet-engine: $*" >&2; }
export DOCKER_HOST="unix://$sock"

case "${1:-run}" in
ready)
	[ -e "$loaded" ] && docker version >/dev/null 2>&1
	exit
	;;
wait-worker)
	while curl -fsS -o /dev/null --max-time 2 "${WORKER_HEALTHZ:-http://127.0.0.1:9090/healthz}" ||
		[ -n "$(docker ps -aq --filter label=sandfleet.worker 2>/dev/null)" ]; do
		sleep 1
	done
	exit 0
	;;
run) ;;
*)
	log "unknown command $1 (want run, ready or wait-worker)"
	exit 2
	;;
esac

rm -f "$loaded" "$sock"
mkdir -p "$(dirname "$sock")" /etc/docker
# docker in this container (kubectl exec, the probes) finds the engine by
# its usual path too.
[ "$sock" = /var/run/docker.sock ] || ln -sf "$sock" /var/run/docker.sock
# The sandboxes' networks carry the pod's MTU, not 1500 inside an overlay.
mtu=$(cat /sys/class/net/eth0/mtu 2>/dev/null || echo 1500)
runsc=$(command -v runsc || true)
[ "${ENGINE_RUNSC:-auto}" != off ] || runsc=

daemon_json() { # $1: with runsc (1) or without (0)
	printf '{\n  "mtu": %s,\n  "log-driver": "json-file",\n  "log-opts": {"max-size": "10m", "max-file": "3"}' "$mtu"
	[ -z "${ENGINE_STORAGE_DRIVER:-}" ] || printf ',\n  "storage-driver": "%s"' "$ENGINE_STORAGE_DRIVER"
	[ -z "${ENGINE_CGROUP_PARENT:-}" ] || printf ',\n  "cgroup-parent": "%s"' "$ENGINE_CGROUP_PARENT"
	if [ "$1" = 1 ]; then
		printf ',\n  "runtimes": {\n'
		printf '    "runsc": {"path": "%s", "runtimeArgs": ["--network=none", "--oci-seccomp"]},\n' "$runsc"
		printf '    "runsc-net": {"path": "%s", "runtimeArgs": ["--network=host", "--oci-seccomp"]}\n  }' "$runsc"
	fi
	printf '\n}\n'
}
daemon_json "$([ -n "$runsc" ] && echo 1 || echo 0)" >/etc/docker/daemon.json

dockerd --host "unix://$sock" --data-root /var/lib/docker --config-file /etc/docker/daemon.json &
dockerd=$!
trap 'kill -TERM $dockerd 2>/dev/null' TERM INT
i=0
until docker version >/dev/null 2>&1; do
	kill -0 $dockerd 2>/dev/null || { log "dockerd exited"; wait $dockerd; exit 1; }
	i=$((i + 1))
	[ $i -lt 120 ] || { log "dockerd does not answer after 60s"; exit 1; }
	sleep 0.5
done
log "dockerd answers on $sock ($(docker info --format '{{.Driver}}') storage)"

for f in "$images"/*.tar; do
	[ -e "$f" ] || continue
	log "loading $(basename "$f")"
	docker load -q -i "$f" >&2
done

if [ -n "$runsc" ]; then
	# The check deploy/runsc.sh's registration stands for: a sandbox starts
	# under runsc here (nested engines do not always allow it).
	img=$(docker images --format '{{.Repository}}:{{.Tag}}' | grep -m1 '^sandfleet/sandbox' || true)
	if [ -n "$img" ] && docker run --rm --runtime=runsc --network=none --entrypoint /bin/true "$img" >/dev/null 2>&1; then
		log "runsc and runsc-net registered (a sandbox starts under runsc)"
	else
		log "runsc does not start a sandbox in this engine: unregistered (the worker's --runtime runsc would not be ready)"
		daemon_json 0 >/etc/docker/daemon.json
		kill -HUP $dockerd
	fi
fi
touch "$loaded"
log "ready"
# wait returns early when a trapped signal arrives: wait again for dockerd
# to stop its containers and exit.
wait $dockerd || true
wait $dockerd 2>/dev/null || true
