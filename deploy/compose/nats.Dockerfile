# sandfleet/nats: nats-server built on the host from the nats-server/v2 module
# at the version go.mod pins (see images.sh). Nothing is pulled: FROM scratch
# is not an image. The configuration and every credential are mounted or
# passed in at run time, never baked in.
FROM scratch
COPY nats-server /nats-server
COPY tmp /tmp
EXPOSE 4222 6222 8222
ENTRYPOINT ["/nats-server"]
CMD ["-c", "/etc/nats/nats.conf"]
