# PostgreSQL 15 (Debian bookworm's package, pg_stat_statements included) on the debootstrap base
# (deploy/images/build), behaving like the official postgres image for what docker-compose.yml
# uses: POSTGRES_DB / POSTGRES_USER / POSTGRES_PASSWORD(_FILE), /docker-entrypoint-initdb.d on a
# new data volume, PGDATA=/var/lib/postgresql/data, the server running as postgres (uid 999).
ARG BASE_IMAGE=harmony-base:bookworm
FROM ${BASE_IMAGE}
# no cluster from the package's postinst: the entrypoint initialises the volume instead
RUN groupadd --system --gid 999 postgres \
    && useradd --system --uid 999 --gid postgres --home-dir /var/lib/postgresql \
        --shell /bin/bash postgres \
    && mkdir -p /etc/postgresql-common/createcluster.d \
    && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/harmony.conf \
    && apt-get update -q \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        postgresql-15 \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql /docker-entrypoint-initdb.d \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
    && chmod 700 /var/lib/postgresql/data
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
COPY --chmod=0755 postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
VOLUME /var/lib/postgresql/data
# SIGINT is PostgreSQL's fast shutdown (SIGTERM would wait for clients to disconnect)
STOPSIGNAL SIGINT
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["postgres"]
