# sandfleet/egress: the static cmd/egress binary built on the host (see
# images.sh), the egress proxy a worker runs for its sandboxes with a
# network. It needs no privilege: it runs as nobody, read-only. The host's
# CA roots verify the hosts it intercepts to add a secret's header.
FROM scratch
COPY egress /egress
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
USER 65534:65534
ENTRYPOINT ["/egress"]
