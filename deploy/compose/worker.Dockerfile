# sandfleet/worker: the static cmd/worker binary built on the host (see
# images.sh). It drives the host's Docker daemon through the socket mounted at
# /var/run/docker.sock, so it runs as root: the socket is root-equivalent
# anyway, which is why the worker is trusted and sandboxes never get it. The
# sandbox image (sandfleet/sandbox:latest) must exist on that host.
FROM scratch
COPY worker /worker
COPY tmp /tmp
ENTRYPOINT ["/worker"]
