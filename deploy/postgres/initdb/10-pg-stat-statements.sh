#!/bin/sh
# Run once by the official postgres image when it initialises a new data volume: preload
# pg_stat_statements, which the live (observe) mode of the tuner reads. Written into
# postgresql.conf, not postgresql.auto.conf, so the tuner's ALTER SYSTEM never touches it.
# An existing volume: ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements' and
# restart the container once.
set -e
echo "shared_preload_libraries = 'pg_stat_statements'  # harmony: docker-compose" \
    >> "$PGDATA/postgresql.conf"
