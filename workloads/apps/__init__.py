"""Example applications beyond TPC-H: a schema, a data loader and the application's SQL.

``workloads/apps/<name>/`` holds ``schema.sql``, ``data.sql`` (rows for ``:scale``) and the
application's scripts. :func:`setup_app` loads one into a database, once
(``harmony workload app-setup shop --dsn ... --scale N``).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path

from psycopg import conninfo, sql

from harmony_base.errors import ConfigError, WorkloadError
from workloads.connect import connect, describe_dsn, relation_exists

logger = logging.getLogger(__name__)

APPS_DIR = Path(__file__).resolve().parent
#: the table that records which application is loaded, at which scale
MARKER = "harmony_app"


def app_names() -> list[str]:
    """The shipped example applications."""
    return sorted(p.parent.name for p in APPS_DIR.glob("*/schema.sql"))


@dataclass(frozen=True)
class AppSetup:
    name: str
    scale: int
    reused: bool
    seconds: float
    database_bytes: int


def _statements(text: str) -> list[str]:
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in body.split(";") if s.strip()]


def loaded_app(dsn: str) -> tuple[str, int] | None:
    """The example application loaded in ``dsn`` and its scale, if any."""
    with connect(dsn) as conn:
        if not relation_exists(conn, MARKER):
            return None
        row = conn.execute(sql.SQL("SELECT name, scale FROM {}").format(
            sql.Identifier(MARKER))).fetchone()
    return (str(row[0]), int(row[1])) if row else None


def create_database(dsn: str) -> bool:
    """Create the database ``dsn`` names (connecting to ``postgres`` on the same server) if it
    does not exist; True when it was created."""
    parts = conninfo.conninfo_to_dict(dsn)
    name = parts.get("dbname")
    if not name:
        raise ConfigError("the DSN must name the database to create (dbname=...)")
    with connect(conninfo.make_conninfo(dsn, dbname="postgres")) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            return False
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(name))))
    logger.info("created database %s", name)
    return True


def create_stat_statements(dsn: str) -> None:
    """``CREATE EXTENSION IF NOT EXISTS pg_stat_statements`` in ``dsn``'s database (the live
    mode reads it); a clear error when the server does not preload the library."""
    with connect(dsn) as conn:
        row = conn.execute("SELECT current_setting('shared_preload_libraries')").fetchone()
        libraries = [s.strip() for s in str(row[0] if row else "").split(",")]
        if "pg_stat_statements" not in libraries:
            raise WorkloadError(
                f"{describe_dsn(dsn)} does not preload pg_stat_statements (shared_preload_"
                f"libraries = {row[0] if row else ''!r}); run ALTER SYSTEM SET "
                f"shared_preload_libraries = 'pg_stat_statements' and restart the server")
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")


def setup_app(dsn: str, name: str, scale: int = 1) -> AppSetup:
    """Create the application's schema and load its rows at ``scale`` (a whole number >= 1);
    an application already loaded at that scale is reused, another one is an error."""
    if name not in app_names():
        raise ConfigError(f"example application must be one of {app_names()}, but got {name!r}")
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ConfigError(f"the application's scale must be a whole number >= 1, but got "
                          f"{scale!r}")
    started = time.monotonic()
    present = loaded_app(dsn)
    if present is not None:
        if present != (name, scale):
            raise WorkloadError(f"{describe_dsn(dsn)} already holds {present[0]} at scale "
                                f"{present[1]}; use another database for {name} at scale {scale}")
        return AppSetup(name, scale, True, time.monotonic() - started, _size(dsn))
    folder = APPS_DIR / name
    data = re.sub(r":scale\b", str(scale), (folder / "data.sql").read_text())
    with connect(dsn) as conn, conn.transaction():
        for statement in _statements((folder / "schema.sql").read_text()) + _statements(data):
            conn.execute(statement)  # our own files, not user input
        conn.execute(sql.SQL("CREATE TABLE {} (name text NOT NULL, scale int NOT NULL)").format(
            sql.Identifier(MARKER)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(sql.Identifier(MARKER)),
                     [name, scale])
    with connect(dsn) as conn:
        conn.execute("ANALYZE")
    seconds = time.monotonic() - started
    logger.info("loaded %s at scale %d into %s in %.1f s", name, scale, describe_dsn(dsn),
                seconds)
    return AppSetup(name, scale, False, seconds, _size(dsn))


def _size(dsn: str) -> int:
    with connect(dsn) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0
