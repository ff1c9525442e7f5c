"""Live mode's workload: no driver, the traffic already on the server.

A sample is a time window over which ``pg_stat_statements`` (each statement's calls and
execution time, summed over roles for the current database) and ``pg_stat_database``
(commits, rollbacks, deadlocks, temp files) are read before and after; the deltas are the
sample. While a window runs it is re-read every ``poll_s`` and the partial window is handed
to :attr:`ObservedWorkload.watch`, so a guardrail can act within the sample.

The observer's own queries are not counted: its session sets ``pg_stat_statements.track``
to ``none`` (a superuser setting; the tuner needs superuser rights for ``ALTER SYSTEM``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.rows import TupleRow

from harmony_base.errors import DatabaseError, WorkloadError
from workloads.base import Workload
from workloads.connect import connect, describe_dsn
from workloads.sample import QueryStats, Sample

logger = logging.getLogger(__name__)

#: how to turn pg_stat_statements on, for the error messages
ENABLE_HELP = (
    "to enable it: add pg_stat_statements to shared_preload_libraries (e.g. ALTER SYSTEM SET "
    "shared_preload_libraries = 'pg_stat_statements', keeping any library already listed, or "
    "the same line in postgresql.conf, or `-c shared_preload_libraries=pg_stat_statements` "
    "in a container's command), restart PostgreSQL (a reload is not enough), then run CREATE "
    "EXTENSION pg_stat_statements; in the database being tuned"
)

_STATEMENTS = (
    "SELECT s.queryid::text, sum(s.calls)::bigint, sum(s.total_exec_time)::float8 "
    "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
    "WHERE d.datname = current_database() AND s.queryid IS NOT NULL GROUP BY s.queryid"
)
_DATABASE = (
    "SELECT xact_commit, xact_rollback, deadlocks, temp_files, stats_reset "
    "FROM pg_stat_database WHERE datname = current_database()"
)


@dataclass(frozen=True)
class Counters:
    """The cumulative counters at one moment: per statement ``(calls, total exec ms)``."""

    statements: dict[str, tuple[int, float]]
    xact_commit: int
    xact_rollback: int
    deadlocks: int
    temp_files: int
    stats_reset: datetime | None
    taken: float  # time.monotonic()


@dataclass(frozen=True)
class ObservedWindow:
    """What the traffic did over a window: per statement ``(calls, mean exec s)`` and the
    database's transaction outcomes."""

    seconds: float
    statements: dict[str, tuple[int, float]]
    xact_commit: int
    xact_rollback: int
    deadlocks: int
    temp_files: int

    @property
    def calls(self) -> int:
        return sum(n for n, _ in self.statements.values())

    @property
    def error_rate(self) -> float | None:
        """Rolled-back transactions and deadlocks per finished transaction (None: none)."""
        finished = self.xact_commit + self.xact_rollback
        return (self.xact_rollback + self.deadlocks) / finished if finished else None

    def plus(self, other: ObservedWindow) -> ObservedWindow:
        """This window and ``other`` as one: their seconds and counts added, each statement's
        calls added and its mean weighted by them."""
        statements = dict(self.statements)
        for key, (calls, mean) in other.statements.items():
            had, had_mean = statements.get(key, (0, 0.0))
            total = had + calls
            statements[key] = (total, (had * had_mean + calls * mean) / total if total else 0.0)
        return ObservedWindow(
            seconds=self.seconds + other.seconds, statements=statements,
            xact_commit=self.xact_commit + other.xact_commit,
            xact_rollback=self.xact_rollback + other.xact_rollback,
            deadlocks=self.deadlocks + other.deadlocks,
            temp_files=self.temp_files + other.temp_files)


def check_pg_stat_statements(conn: psycopg.Connection[TupleRow], where: str) -> None:
    """Raise :class:`WorkloadError` saying how to enable pg_stat_statements when the library
    is not preloaded or the extension not created in the connection's database."""
    row = conn.execute("SELECT current_setting('shared_preload_libraries'), "
                       "current_database()").fetchone()
    preload, dbname = (str(row[0]), str(row[1])) if row else ("", "?")
    loaded = [lib.strip().strip('"') for lib in preload.split(",") if lib.strip()]
    if "pg_stat_statements" not in loaded:
        raise WorkloadError(
            f"workload.observe needs pg_stat_statements, but {where} does not load it "
            f"(shared_preload_libraries = {preload!r}); {ENABLE_HELP}")
    created = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"
                           ).fetchone()
    if created is None:
        raise WorkloadError(
            f"workload.observe needs pg_stat_statements: the library is preloaded on {where}, "
            f"but the extension is not created in database {dbname!r}; run CREATE EXTENSION "
            f"pg_stat_statements; in that database (as a superuser)")


def read_counters(conn: psycopg.Connection[TupleRow]) -> Counters:
    """The statements' and the database's cumulative counters, read now."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    statements = {str(q): (int(n), float(t)) for q, n, t in conn.execute(_STATEMENTS)}
    row = conn.execute(_DATABASE).fetchone()
    if row is None:
        raise DatabaseError("pg_stat_database has no row for the current database")
    return Counters(statements, int(row[0]), int(row[1]), int(row[2]), int(row[3]), row[4],
                    time.monotonic())


def window_between(before: Counters, after: Counters) -> ObservedWindow:
    """``after - before``. A statement evicted from pg_stat_statements meanwhile (its calls
    went down) is left out; a reset of pg_stat_database zeroes the database's deltas."""
    statements: dict[str, tuple[int, float]] = {}
    for query, (calls, total) in after.statements.items():
        calls0, total0 = before.statements.get(query, (0, 0.0))
        n, ms = calls - calls0, total - total0
        if n > 0 and ms >= 0:
            statements[query] = (n, ms / 1000.0 / n)
    names = ("xact_commit", "xact_rollback", "deadlocks", "temp_files")
    deltas = {f: getattr(after, f) - getattr(before, f) for f in names}
    if after.stats_reset != before.stats_reset or any(v < 0 for v in deltas.values()):
        deltas = dict.fromkeys(names, 0)
    return ObservedWindow(seconds=after.taken - before.taken, statements=statements, **deltas)


class ObservedWorkload(Workload):
    """The traffic on ``dsn``'s database, sampled from pg_stat_statements; starts nothing.

    ``watch`` (optional) is called with the partial window every ``poll_s`` during a sample;
    whatever it raises ends the sample (a guardrail trip). ``last_window`` is the last full
    sample's window.
    """

    def __init__(self, dsn: str, *, poll_s: float = 0.5) -> None:
        if not (math.isfinite(poll_s) and poll_s > 0):
            raise WorkloadError(f"workload.observe.poll_s must be > 0 seconds, got {poll_s!r}")
        self.dsn = dsn
        self.poll_s = poll_s
        self.watch: Callable[[ObservedWindow], None] | None = None
        self.last_window: ObservedWindow | None = None
        self._conn: psycopg.Connection[TupleRow] | None = None

    def start(self) -> None:
        """Connect and check that pg_stat_statements is there (a clear error if not)."""
        if self._conn is not None and not self._conn.closed:
            return
        conn = connect(self.dsn)
        try:
            check_pg_stat_statements(conn, describe_dsn(self.dsn))
            try:
                conn.execute("SET pg_stat_statements.track = 'none'")
            except psycopg.Error as exc:
                logger.warning("cannot keep the observer's own queries out of "
                               "pg_stat_statements (%s); they are counted as traffic",
                               str(exc).strip())
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        logger.info("observing the traffic on %s through pg_stat_statements",
                    describe_dsn(self.dsn))

    def _read(self) -> Counters:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = None
            self.start()
        assert self._conn is not None
        try:
            return read_counters(self._conn)
        except psycopg.Error as exc:
            raise WorkloadError(f"cannot read pg_stat_statements on "
                                f"{describe_dsn(self.dsn)}: {exc}") from exc

    def sample(self, seconds: float | None = None, *, queries: int | None = None,
               timeout_s: float | None = None, since: float | None = None,
               every_query: bool = False) -> Sample:
        """The traffic over a ``seconds`` window (fixed-work samples are not possible: the
        tuner does not choose how much work the application sends). ``since`` cannot be
        honoured: pg_stat_statements counts a call when it ends, so a statement that started
        under the previous configuration counts here; the warm-up absorbs most of them."""
        if queries is not None or seconds is None:
            raise WorkloadError("workload.observe samples time windows only: give "
                                "measure.seconds, not measure.queries")
        if not (math.isfinite(seconds) and seconds > 0):
            raise WorkloadError(f"a sample window must be > 0 seconds, but got {seconds!r}")
        before = self._read()
        deadline = before.taken + seconds
        while True:
            time.sleep(max(0.0, min(self.poll_s, deadline - time.monotonic())))
            window = window_between(before, self._read())
            if self.watch is not None:
                self.watch(window)
            if time.monotonic() >= deadline:
                break
        self.last_window = window
        return window_sample(window)

    def stop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def window_sample(window: ObservedWindow) -> Sample:
    """The window as a :class:`Sample`: each statement (by queryid) a query of the sample."""
    per_second = 60.0 / window.seconds if window.seconds > 0 else 0.0
    per_query = {q: QueryStats(completed=n, errors=0, qpm=n * per_second, p50=None, p95=None,
                               p99=None, mean=mean)
                 for q, (n, mean) in window.statements.items()}
    return Sample(seconds=window.seconds, completed=window.calls,
                  errors=window.xact_rollback + window.deadlocks,
                  qpm=window.calls * per_second, per_query=per_query, mix="observed")
