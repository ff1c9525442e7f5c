"""What the workload did, as PostgreSQL's statistics views count it: one read-only reading
(:func:`read_workload_stats`), the difference of two (:func:`stats_delta`), and a window of
the workload between two readings (:func:`observe_workload`). The knob proposals
(:mod:`tuner_client.plan.proposals`) and the plan (:mod:`tuner_client.plan.planner`) read these.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

import psycopg
from psycopg.rows import TupleRow

from harmony_base.errors import DatabaseError

logger = logging.getLogger(__name__)


class Startable(Protocol):
    """A workload driver as :func:`observe_workload` runs it."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def sample(self, seconds: float | None = None) -> object: ...


@dataclass(frozen=True)
class WorkloadStats:
    """What the statistics views say about the workload since they were last reset."""

    database: str
    stats_since: str | None
    xact_commit: int
    temp_files: int
    temp_bytes: int
    blks_read: int
    blks_hit: int
    checkpoints_timed: int
    checkpoints_req: int
    dead_tuples: int
    live_tuples: int
    #: the table furthest behind on vacuum: (name, dead share, dead rows)
    worst_table: tuple[str, float, int] | None
    database_bytes: int
    #: pg_stat_statements of this database, when the extension is installed in it
    statements: StatementStats | None
    #: settings the rules compare against (current values as pg_settings shows them)
    settings: Mapping[str, str] = field(default_factory=dict)
    #: seconds the counters cover when they are a window's difference (None: since reset)
    window_s: float | None = None


@dataclass(frozen=True)
class StatementStats:
    """pg_stat_statements summed over this database's statements."""

    count: int
    calls: int
    exec_ms: float
    jit_ms: float
    temp_blks_written: int
    #: the mean execution time (ms) of the statement that took the most time in total
    top_mean_ms: float
    top_query: str

_DATABASE = """
SELECT current_database(), stats_reset::text, xact_commit, temp_files, temp_bytes,
       blks_read, blks_hit, pg_database_size(current_database())
FROM pg_stat_database WHERE datname = current_database()"""
#: the checkpoint counters: in pg_stat_checkpointer from PostgreSQL 17 on (renamed), in
#: pg_stat_bgwriter before
_CHECKPOINTS_17 = "SELECT num_timed, num_requested FROM pg_stat_checkpointer"
_CHECKPOINTS_15 = "SELECT checkpoints_timed, checkpoints_req FROM pg_stat_bgwriter"


def checkpoints_query(server_version_num: int) -> str:
    """The SELECT of the timed and requested checkpoint counts on a server of that version."""
    return _CHECKPOINTS_17 if server_version_num >= 170000 else _CHECKPOINTS_15

_TABLES = """
SELECT schemaname || '.' || relname, n_live_tup, n_dead_tup FROM pg_stat_user_tables"""
_HAS_STATEMENTS = """
SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"""
_STATEMENTS = """
SELECT count(*), coalesce(sum(calls), 0), coalesce(sum(total_exec_time), 0),
       coalesce(sum(jit_generation_time + jit_inlining_time + jit_optimization_time
                    + jit_emission_time), 0),
       coalesce(sum(temp_blks_written), 0)
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database
                                      WHERE datname = current_database())"""
#: the SELECT or WITH (what a parallel plan can serve; not COPY or DDL) with the most time
_TOP_STATEMENT = """
SELECT mean_exec_time, left(query, 80) FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query ~* '^[[:space:](]*(select|with)[[:>:]]'
ORDER BY total_exec_time DESC LIMIT 1"""
_SETTINGS = """
SELECT name, current_setting(name) FROM pg_settings WHERE name IN
  ('max_parallel_workers_per_gather', 'jit', 'max_wal_size', 'checkpoint_timeout',
   'work_mem', 'shared_buffers')"""


def read_workload_stats(conn: psycopg.Connection[TupleRow]) -> WorkloadStats:
    """Read the statistics views once (SELECTs only: nothing is reset or changed)."""
    row = conn.execute(_DATABASE).fetchone()
    assert row is not None  # the current database always has a pg_stat_database row
    bg = conn.execute(checkpoints_query(conn.info.server_version)).fetchone() or (0, 0)
    tables = conn.execute(_TABLES).fetchall()
    worst: tuple[str, float, int] | None = None
    for name, live, dead in tables:
        live, dead = int(live or 0), int(dead or 0)
        share = dead / (live + dead) if live + dead else 0.0
        if dead and (worst is None or (share, dead) > (worst[1], worst[2])):
            worst = (str(name), share, dead)
    statements = None
    if conn.execute(_HAS_STATEMENTS).fetchone() is not None:
        try:
            s = conn.execute(_STATEMENTS).fetchone()
            top = conn.execute(_TOP_STATEMENT).fetchone()
        except psycopg.Error as exc:  # installed but not preloaded: the view cannot be read
            logger.info("pg_stat_statements is installed but not readable (%s)", exc)
        else:
            assert s is not None  # an aggregate always returns one row
            statements = StatementStats(
                count=int(s[0]), calls=int(s[1]), exec_ms=float(s[2]), jit_ms=float(s[3]),
                temp_blks_written=int(s[4]), top_mean_ms=float(top[0]) if top else 0.0,
                top_query=" ".join(str(top[1]).split()) if top else "")
    settings = {str(n): str(v) for n, v in conn.execute(_SETTINGS).fetchall()}
    return WorkloadStats(
        database=str(row[0]), stats_since=row[1], xact_commit=int(row[2] or 0),
        temp_files=int(row[3] or 0), temp_bytes=int(row[4] or 0), blks_read=int(row[5] or 0),
        blks_hit=int(row[6] or 0), checkpoints_timed=int(bg[0] or 0),
        checkpoints_req=int(bg[1] or 0),
        dead_tuples=sum(int(t[2] or 0) for t in tables),
        live_tuples=sum(int(t[1] or 0) for t in tables), worst_table=worst,
        database_bytes=int(row[7] or 0), statements=statements, settings=settings)


def stats_delta(before: WorkloadStats, after: WorkloadStats) -> WorkloadStats:
    """What happened between two readings: the counters' differences; the dead tuples, the
    sizes and the settings as ``after`` reads them (they are levels, not counters)."""
    statements = after.statements
    if before.statements is not None and after.statements is not None:
        b, a = before.statements, after.statements
        statements = replace(a, calls=a.calls - b.calls, exec_ms=a.exec_ms - b.exec_ms,
                             jit_ms=a.jit_ms - b.jit_ms,
                             temp_blks_written=a.temp_blks_written - b.temp_blks_written)
    return replace(after, stats_since=None, window_s=None,
                   xact_commit=after.xact_commit - before.xact_commit,
                   temp_files=after.temp_files - before.temp_files,
                   temp_bytes=after.temp_bytes - before.temp_bytes,
                   blks_read=after.blks_read - before.blks_read,
                   blks_hit=after.blks_hit - before.blks_hit,
                   checkpoints_timed=after.checkpoints_timed - before.checkpoints_timed,
                   checkpoints_req=after.checkpoints_req - before.checkpoints_req,
                   statements=statements)


def observe_workload(dsn: str, seconds: float, workload: Startable | None = None,
                     *, sleep: Callable[[float], None] = time.sleep) -> WorkloadStats:
    """The statistics of ``seconds`` of the workload: ``workload`` run for that long (or the
    traffic already on the server when None), read before and after, read-only."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            conn.read_only = True
            before = read_workload_stats(conn)
            started = time.monotonic()
            if workload is None:
                sleep(seconds)
            else:
                # a driver's load runs inside sample() (pgbench runs only there)
                workload.start()
                try:
                    workload.sample(seconds=seconds)
                finally:
                    workload.stop()
            watched = time.monotonic() - started
            # the backends' pending counts reach the views within a second of their last
            # transaction (PostgreSQL 15 flushes them at most once a second)
            sleep(1.0)
            return replace(stats_delta(before, read_workload_stats(conn)), window_s=watched)
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot read the statistics views of {dsn}: {exc}") from exc
