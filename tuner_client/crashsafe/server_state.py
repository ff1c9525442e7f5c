"""What a server is and how it is configured, as the restore journal records it
(:mod:`.journal`): its identity, and the original ``postgresql.auto.conf`` and settings read
before the run's first change.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import TupleRow

from harmony_base.errors import DatabaseError


@dataclass(frozen=True)
class ServerIdentity:
    """Which server a journal belongs to."""

    system_identifier: str
    data_directory: str | None  # None when the role may not read it
    host: str
    port: int
    dsn: str
    version: int

    def describe(self) -> str:
        where = f"{self.host}:{self.port}" if not self.host.startswith("/") \
            else f"socket {self.host} port {self.port}"
        return f"{where} (system {self.system_identifier}" + (
            f", data directory {self.data_directory})" if self.data_directory else ")")


@dataclass(frozen=True)
class OriginalConfig:
    """The server's configuration before the run's first change."""

    auto_conf: str | None  # postgresql.auto.conf's text, where a controller could read it
    entries: dict[str, str]  # postgresql.auto.conf's settings as the server reads the file
    settings: dict[str, str]  # pg_settings.setting of every setting in force
    restart_time: list[str]  # the settings only a restart changes (context postmaster)
    pending_restart: list[str]  # settings already pending a restart before the run


def scalar(conn: psycopg.Connection[TupleRow], query: str) -> Any:
    """The first column of the first row of ``query`` (None without a row)."""
    row = conn.execute(query).fetchone()
    return row[0] if row else None


def read_identity(conn: psycopg.Connection[TupleRow], dsn: str) -> ServerIdentity:
    """The identity of the server ``conn`` is connected to."""
    # both need more than a plain role may have; the host and port still name the server
    data_directory = system_identifier = None
    with contextlib.suppress(psycopg.Error):
        data_directory = scalar(conn, "SELECT current_setting('data_directory')")
    with contextlib.suppress(psycopg.Error):
        system_identifier = scalar(conn, "SELECT system_identifier FROM pg_control_system()")
    return ServerIdentity(
        system_identifier=str(system_identifier or "unknown"),
        data_directory=data_directory, host=str(conn.info.host), port=int(conn.info.port),
        dsn=dsn, version=int(scalar(conn, "SHOW server_version_num")))


def parse_auto_conf(text: str) -> dict[str, str]:
    """The settings of a ``postgresql.auto.conf`` text (the server writes ``name = 'value'``
    with ``''`` for a quote)."""
    entries: dict[str, str] = {}
    for line in text.splitlines():
        body = line.split("#", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if "=" not in body:
            continue
        name, _, value = body.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1].replace("''", "'")
        entries[name.strip().lower()] = value
    return entries


def auto_conf_entries(conn: psycopg.Connection[TupleRow]) -> dict[str, str]:
    """``postgresql.auto.conf``'s settings as the server reads the file now
    (``pg_file_settings``: the file on disk, not what is in force)."""
    rows = conn.execute("SELECT name, setting FROM pg_file_settings "
                        "WHERE sourcefile LIKE '%/postgresql.auto.conf' ORDER BY seqno").fetchall()
    return {str(r[0]).lower(): str(r[1]) for r in rows}


def settings_in_force(conn: psycopg.Connection[TupleRow]
                      ) -> tuple[dict[str, str], list[str], list[str]]:
    """Every setting's value, the restart-time ones, and those pending a restart."""
    rows = conn.execute("SELECT name, setting, context, pending_restart FROM pg_settings"
                        ).fetchall()
    return ({str(r[0]).lower(): str(r[1]) for r in rows},
            [str(r[0]).lower() for r in rows if r[2] == "postmaster"],
            [str(r[0]).lower() for r in rows if r[3]])


def read_original(conn: psycopg.Connection[TupleRow], auto_conf: str | None) -> OriginalConfig:
    """What the journal must restore; DatabaseError when ``postgresql.auto.conf`` can be read
    neither through the server (``pg_file_settings`` needs a superuser) nor as a file."""
    settings, restart_time, pending = settings_in_force(conn)
    try:
        entries = auto_conf_entries(conn)
    except psycopg.Error as exc:
        if auto_conf is None:
            raise DatabaseError(
                f"cannot read postgresql.auto.conf: pg_file_settings refused ({exc}) and the "
                "controller cannot read the file; without it no restore journal can be kept, "
                "so nothing is changed (connect as a superuser, or give a controller with "
                "access to the data directory)") from exc
        entries = parse_auto_conf(auto_conf)
    return OriginalConfig(auto_conf=auto_conf, entries=entries,
                          settings=settings, restart_time=restart_time,
                          pending_restart=pending)
