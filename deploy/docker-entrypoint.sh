#!/bin/sh
# Container entrypoint: turn *_FILE secrets into the variables libpq reads, then run the command.
# PGPASSWORD_FILE=/run/secrets/postgres_password -> PGPASSWORD (never written to the compose file).
set -eu
if [ -n "${PGPASSWORD_FILE:-}" ] && [ -r "$PGPASSWORD_FILE" ]; then
    PGPASSWORD="$(cat "$PGPASSWORD_FILE")"
    export PGPASSWORD
fi
exec "$@"
