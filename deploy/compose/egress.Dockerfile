# sandfleet/egress: the static cmd/egress binary built on the host (see
# images.sh), the egress proxy a worker runs for its sandboxes with a
# network. It needs no privilege: it runs as nobody, read-only.
FROM scratch
COPY egress /egress
USER 65534:65534
ENTRYPOINT ["/egress"]
