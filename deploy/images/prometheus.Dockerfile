# Prometheus from Debian bookworm's package on the debootstrap base (deploy/images/build), started
# like prom/prometheus (entrypoint the binary, data in /prometheus, an unprivileged user), with
# wget for docker-compose.yml's health check.
ARG BASE_IMAGE=harmony-base:bookworm
FROM ${BASE_IMAGE}
RUN apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        prometheus wget \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /prometheus /etc/prometheus \
    && chown prometheus:prometheus /prometheus
USER prometheus
WORKDIR /prometheus
VOLUME /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
