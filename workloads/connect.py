"""Opening workload connections with errors that name the server but never the password."""

from __future__ import annotations

import logging
from typing import Any

import psycopg
from psycopg import conninfo
from psycopg.rows import TupleRow

from harmony_base.errors import DatabaseError

logger = logging.getLogger(__name__)


def describe_dsn(dsn: str) -> str:
    """A password-free description of a DSN, e.g. ``host=127.0.0.1 port=5433 dbname=tpch``."""
    try:
        parts = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparsable DSN>"
    shown = [f"{key}={parts[key]}" for key in ("host", "port", "dbname", "user") if parts.get(key)]
    return " ".join(shown) or "<default libpq target>"


def connect(dsn: str, *, connect_timeout_s: int = 10,
            **kwargs: Any) -> psycopg.Connection[TupleRow]:
    """Open an autocommit connection without prepared statements, or raise DatabaseError.

    Prepared statements are off so every TPC-H instance is planned with its own literal
    values, as it would be when sent by ``qgen`` + psql.
    """
    try:
        parts = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise DatabaseError(f"the DSN must be a libpq connection string or URI: {exc}") from exc
    if "connect_timeout" not in parts:
        kwargs.setdefault("connect_timeout", connect_timeout_s)
    try:
        conn = psycopg.connect(dsn, autocommit=True, prepare_threshold=None, **kwargs)
    except psycopg.OperationalError as exc:
        reason = " ".join(line.strip() for line in str(exc).splitlines()) or type(exc).__name__
        raise DatabaseError(
            f"cannot connect to PostgreSQL at {describe_dsn(dsn)}: {reason}; "
            "check that the server is running and the DSN is right"
        ) from exc
    return conn


def relation_exists(conn: psycopg.Connection[TupleRow], name: str) -> bool:
    """Whether the table (or view) ``name`` is visible on the connection's search path."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", [name]).fetchone()
    return bool(row and row[0])


def current_setting(conn: psycopg.Connection[TupleRow], name: str) -> str:
    """The server's current value of setting ``name``, as PostgreSQL shows it."""
    row = conn.execute("SELECT current_setting(%s)", [name]).fetchone()
    if row is None:  # current_setting answers one row or raises
        raise DatabaseError(f"current_setting({name!r}) returned no row")
    return str(row[0])
