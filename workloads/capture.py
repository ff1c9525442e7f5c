"""``harmony capture``: record a live workload into a replay file (:mod:`workloads.replay`).

The source is the server's own log. For the capture's duration the server logs every
statement with its duration and its bound parameters (``log_min_duration_statement = 0``,
``log_parameter_max_length = -1``, ``log_statement = none`` so that no statement is logged
twice, and a ``log_line_prefix`` with a token of this capture, the session id and the
database), set with ``ALTER SYSTEM`` + reload and put back the same way afterwards, also on
an error or Ctrl-C/SIGTERM. Why the log: it is the only place PostgreSQL shows each
execution's real parameter values together with its session (so transactions stay whole)
and its order; ``pg_stat_statements`` has the mix but no parameters, ``pg_stat_activity``
only what runs at the instant it is polled, and a proxy would need the application
re-pointed. When ``pg_stat_statements`` is installed its deltas over the capture are stored
beside, as the mix the replay must reproduce.

The log is read through ``pg_read_file`` when ``logging_collector`` is on (a superuser, or a
member of ``pg_read_server_files``), or from ``--log-file`` on this machine.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from harmony_base.errors import ConfigError, DatabaseError
from workloads.capture_log import parse_capture_log
from workloads.connect import connect, current_setting, describe_dsn, relation_exists
from workloads.replay import ReplayFile

logger = logging.getLogger(__name__)

#: how long the server is given to reload its configuration
RELOAD_WAIT_S = 5.0
READ_CHUNK = 4 * 2**20


def capture_settings(token: str) -> dict[str, str]:
    """The logging settings in force during a capture."""
    return {"log_min_duration_statement": "0", "log_parameter_max_length": "-1",
            "log_statement": "none", "log_line_prefix": f"%m hcap-{token} %c %d %Q "}


@dataclass
class _Saved:
    """A setting as it was before the capture: its value and whether postgresql.auto.conf
    set it (then it is set back; otherwise the ALTER SYSTEM entry is removed)."""

    value: str
    in_auto_conf: bool


def _saved_settings(conn: psycopg.Connection[TupleRow], names: list[str]) -> dict[str, _Saved]:
    rows = conn.execute("SELECT name, current_setting(name), coalesce(sourcefile, '') "
                        "FROM pg_settings WHERE name = ANY(%s)", [names]).fetchall()
    return {r[0]: _Saved(r[1], str(r[2]).endswith("postgresql.auto.conf")) for r in rows}


def _alter(conn: psycopg.Connection[TupleRow], name: str, value: str | None) -> None:
    if value is None:
        conn.execute(sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(name)))
    else:
        conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name),
                                                               sql.Literal(value)))


#: backend pids of the capture's own connections (their statements are not the workload's)
_OWN_PIDS: set[int] = set()


@contextmanager
def _own_connection(dsn: str) -> Iterator[psycopg.Connection[TupleRow]]:
    with connect(dsn, application_name="harmony-capture") as conn:
        _OWN_PIDS.add(conn.info.backend_pid)
        yield conn


def _wait_for(dsn: str, wanted: dict[str, str]) -> dict[str, str]:
    """Wait until new sessions see ``wanted``; return what they see."""
    deadline = time.monotonic() + RELOAD_WAIT_S
    while True:
        with _own_connection(dsn) as conn:
            seen = {n: current_setting(conn, n) for n in wanted}
        if seen == wanted or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)


@contextmanager
def logging_for_capture(dsn: str, token: str) -> Iterator[None]:
    """Set the capture's logging for the ``with`` block and put the original back after it,
    whatever ends the block (an error, Ctrl-C, SIGTERM turned into an exception)."""
    wanted = capture_settings(token)
    with _own_connection(dsn) as conn:
        saved = _saved_settings(conn, list(wanted))
        try:
            for name, value in wanted.items():
                _alter(conn, name, value)
            conn.execute("SELECT pg_reload_conf()")
        except BaseException:
            _restore(conn, saved)
            raise
    try:
        seen = _wait_for(dsn, wanted)
        if seen != wanted:
            raise DatabaseError(f"the server did not take the capture's logging settings "
                                f"within {RELOAD_WAIT_S} s (it shows {seen})")
        yield
    finally:
        with _own_connection(dsn) as conn:
            _restore(conn, saved)
        back = _wait_for(dsn, {n: s.value for n, s in saved.items()})
        if back != {n: s.value for n, s in saved.items()}:
            logger.error("after the capture the logging settings read %s, not the original "
                         "%s; check postgresql.auto.conf", back,
                         {n: s.value for n, s in saved.items()})


def _restore(conn: psycopg.Connection[TupleRow], saved: dict[str, _Saved]) -> None:
    for name, before in saved.items():
        _alter(conn, name, before.value if before.in_auto_conf else None)
    conn.execute("SELECT pg_reload_conf()")
    logger.info("capture: logging settings restored (%s)",
                ", ".join(f"{n}={s.value}" for n, s in saved.items()))


# -- reading the log -------------------------------------------------------------------------
class _LogReader:
    """The server log from a position on: a local file, or the current log file read
    through ``pg_read_file`` (following a rotation to the next file)."""

    def __init__(self, conn: psycopg.Connection[TupleRow], log_file: Path | None) -> None:
        self.conn = conn
        self.local = log_file
        if log_file is not None:
            if not log_file.exists():
                raise ConfigError(f"--log-file {log_file} does not exist")
            self.files = [(str(log_file), log_file.stat().st_size)]
            return
        row = conn.execute("SELECT pg_current_logfile()").fetchone()
        if row is None or row[0] is None:
            raise ConfigError(
                "the server writes its log to stderr (logging_collector is off), so capture "
                "cannot read it through SQL; give --log-file with the file the server's "
                "stderr goes to (e.g. /var/log/postgresql/postgresql-15-main.log)")
        self.files = [(str(row[0]), self._size(str(row[0])))]

    def _size(self, name: str) -> int:
        row = self.conn.execute("SELECT size FROM pg_stat_file(%s)", [name]).fetchone()
        return int(row[0]) if row else 0

    def read(self) -> str:
        if self.local is not None:
            with open(self.local, "rb") as f:
                f.seek(self.files[0][1])
                return f.read().decode(errors="replace")
        row = self.conn.execute("SELECT pg_current_logfile()").fetchone()
        current = str(row[0]) if row and row[0] else self.files[0][0]
        if current != self.files[-1][0]:
            self.files.append((current, 0))
        parts = []
        for name, offset in self.files:
            while True:
                chunk = self.conn.execute("SELECT pg_read_binary_file(%s, %s, %s, true)",
                                          [name, offset, READ_CHUNK]).fetchone()
                data = bytes(chunk[0]) if chunk and chunk[0] is not None else b""
                parts.append(data.decode(errors="replace"))
                offset += len(data)
                if len(data) < READ_CHUNK:
                    break
        return "".join(parts)


# -- pg_stat_statements beside -----------------------------------------------------------------
def _statements_snapshot(conn: psycopg.Connection[TupleRow]) -> dict[int, tuple[int, float, str]]:
    """calls, total_exec_time (ms) and text per queryid of this database, or {} when
    pg_stat_statements is not usable here."""
    try:
        with conn.transaction():
            if not relation_exists(conn, "pg_stat_statements"):
                return {}
            rows = conn.execute(
                "SELECT queryid, calls, total_exec_time, query FROM pg_stat_statements "
                "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND queryid IS NOT NULL").fetchall()
    except psycopg.Error as exc:
        logger.info("pg_stat_statements not usable (%s); the capture has the log only",
                    str(exc).strip())
        return {}
    out: dict[int, tuple[int, float, str]] = {}
    for queryid, n, ms, query in rows:
        old = out.get(int(queryid), (0, 0.0, str(query)))
        out[int(queryid)] = (old[0] + int(n), old[1] + float(ms), old[2])
    return out


def statements_delta(before: dict[int, tuple[int, float, str]],
                     after: dict[int, tuple[int, float, str]],
                     only: set[int] | None = None) -> list[dict[str, Any]]:
    """Per queryid (of ``only``, when given): calls and execution time (ms) between two
    snapshots."""
    delta = []
    for queryid, (n, ms, query) in after.items():
        n0, ms0, _ = before.get(queryid, (0, 0.0, query))
        if n > n0 and (not only or queryid in only):
            delta.append({"queryid": queryid, "calls": n - n0,
                          "total_exec_time_ms": round(ms - ms0, 3), "query": query})
    return sorted(delta, key=lambda d: -d["calls"])


# -- the capture -------------------------------------------------------------------------------
@dataclass(frozen=True)
class CaptureResult:
    replay: ReplayFile
    path: Path | None


def capture(dsn: str, seconds: float, out: Path | None = None, *,
            log_file: Path | None = None, stop: threading.Event | None = None) -> CaptureResult:
    """Record ``seconds`` of the live workload of ``dsn``'s database into ``out``.

    The server's logging settings are changed only inside :func:`logging_for_capture`,
    which puts them back even when this is interrupted. ``stop`` ends the capture early.
    """
    if not seconds > 0:
        raise ConfigError(f"--seconds must be > 0, but got {seconds}")
    if out is not None and not (out.parent.is_dir() and os.access(out.parent, os.W_OK)):
        raise ConfigError(f"--out {out}: the directory {out.parent} must exist and be writable "
                          f"(checked before the server's logging is touched)")
    token = secrets.token_hex(4)
    with connect(dsn, application_name="harmony-capture") as conn:
        row = conn.execute("SELECT rolsuper, current_database(), pg_backend_pid(), "
                           "current_setting('server_version') FROM pg_roles "
                           "WHERE rolname = current_user").fetchone()
        if row is None or not row[0]:
            raise ConfigError(f"capture needs a superuser on {describe_dsn(dsn)} (it sets the "
                              f"server's logging with ALTER SYSTEM and reads the log)")
        database, own_pid, version = str(row[1]), int(row[2]), str(row[3])
        reader = _LogReader(conn, log_file)
        pgss_before = _statements_snapshot(conn)
        begun = datetime.now(UTC)
        t0 = time.monotonic()
        with logging_for_capture(dsn, token):
            logger.info("capturing %s for %.0f s (token hcap-%s)", describe_dsn(dsn), seconds,
                        token)
            (stop or threading.Event()).wait(seconds)
            elapsed = time.monotonic() - t0
            pgss_after = _statements_snapshot(conn)
        text = reader.read()
    parsed = parse_capture_log(text, token, database, {own_pid, *_OWN_PIDS})
    if not parsed.units:
        logger.warning("the capture saw no statement of database %s in %.0f s", database,
                       elapsed)
    replay = ReplayFile(
        statements=tuple(parsed.statements), units=tuple(parsed.units),
        clients=max(1, parsed.sessions), seconds=round(elapsed, 3),
        captured={"database": describe_dsn(dsn), "started": begun.isoformat(),
                  "server_version": version, "sessions": parsed.sessions,
                  "mean_active": round(parsed.busy_ms / 1000.0 / elapsed, 3) if elapsed else 0,
                  "log_records": parsed.records},
        pg_stat_statements=(statements_delta(pgss_before, pgss_after,
                                             {s.queryid for s in parsed.statements
                                              if s.queryid is not None})
                            if pgss_before else None))
    if out is not None:
        replay.write(out)
    logger.info("captured %d units of %d statements from %d sessions in %.1f s", len(replay.units),
                len(replay.statements), parsed.sessions, elapsed)
    return CaptureResult(replay, out)
