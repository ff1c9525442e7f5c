#!/bin/bash
# Entrypoint of the PostgreSQL image built by deploy/images/build: the part of the official
# image's entrypoint docker-compose.yml relies on. On an empty data volume: initdb (superuser
# $POSTGRES_USER, password from $POSTGRES_PASSWORD_FILE or $POSTGRES_PASSWORD, scram-sha-256 for
# TCP clients), create $POSTGRES_DB, run /docker-entrypoint-initdb.d/*.sh and *.sql once; then
# run the server as postgres. An existing data directory is started as it is.
set -euo pipefail

if [ "${1:0:1}" = "-" ]; then
    set -- postgres "$@"
fi
if [ "$1" != "postgres" ]; then
    exec "$@"
fi

if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    user="${POSTGRES_USER:-postgres}"
    db="${POSTGRES_DB:-$user}"
    if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
        if [ ! -r "$POSTGRES_PASSWORD_FILE" ]; then
            echo "POSTGRES_PASSWORD_FILE=$POSTGRES_PASSWORD_FILE is not readable" >&2
            exit 1
        fi
        password="$(cat "$POSTGRES_PASSWORD_FILE")"
    else
        password="${POSTGRES_PASSWORD:-}"
    fi
    if [ -z "$password" ]; then
        echo "the database has no superuser password: set POSTGRES_PASSWORD_FILE (a secret)" \
             "or POSTGRES_PASSWORD" >&2
        exit 1
    fi
    pwfile="$(mktemp)"
    printf '%s\n' "$password" > "$pwfile"
    initdb --username="$user" --pwfile="$pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8 -D "$PGDATA"
    rm -f "$pwfile"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    # initialise on the socket only, so that nobody connects before the scripts ran
    pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start
    if [ "$db" != postgres ]; then
        psql -v ON_ERROR_STOP=1 -U "$user" -d postgres -q \
            -c "CREATE DATABASE \"${db//\"/\"\"}\""
    fi
    for f in /docker-entrypoint-initdb.d/*; do
        case "$f" in
            *.sh) echo "running $f"; . "$f" ;;
            *.sql) echo "running $f"; psql -v ON_ERROR_STOP=1 -U "$user" -d "$db" -f "$f" ;;
            *) [ -e "$f" ] && echo "ignoring $f" ;;
        esac
    done
    pg_ctl -D "$PGDATA" -m fast -w stop
    echo "PostgreSQL init process complete; ready for start up."
fi

exec "$@"
