"""The database's cumulative ``pg_stat_database`` counters and their increments over a window.

Transactions, buffer hits and reads (the Buffer Miss Equation prior's input) and temp-file
bytes; a reset of the counters in a window voids the whole window's delta.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.rows import TupleRow

from harmony_base.errors import DatabaseError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StatsSnapshot:
    """The database's cumulative counters at one moment."""

    xact_commit: int
    blks_hit: int
    blks_read: int
    temp_bytes: int
    stats_reset: datetime | None
    taken: float  # time.monotonic()


@dataclass(frozen=True)
class StatsDelta:
    """Counter increments over a window (``None`` fields never: a reset voids the whole delta)."""

    xact_commit: int
    blks_hit: int
    blks_read: int
    temp_bytes: int
    seconds: float

    @property
    def miss_ratio(self) -> float | None:
        """``blks_read / (blks_read + blks_hit)``: P for the shared_buffers in force."""
        total = self.blks_hit + self.blks_read
        return self.blks_read / total if total else None

    @property
    def xact_per_minute(self) -> float:
        return 60.0 * self.xact_commit / self.seconds if self.seconds > 0 else 0.0


def read_database_stats(conn: psycopg.Connection[TupleRow]) -> StatsSnapshot:
    """Counters of the connection's database, read after dropping any cached stats snapshot."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT xact_commit, blks_hit, blks_read, temp_bytes, stats_reset "
        "FROM pg_stat_database WHERE datname = current_database()").fetchone()
    if row is None:
        raise DatabaseError("pg_stat_database has no row for the current database")
    return StatsSnapshot(int(row[0]), int(row[1]), int(row[2]), int(row[3]), row[4],
                         time.monotonic())


def stats_delta(before: StatsSnapshot, after: StatsSnapshot) -> StatsDelta | None:
    """``after - before``, or ``None`` when the counters were reset in between."""
    fields = ("xact_commit", "blks_hit", "blks_read", "temp_bytes")
    diffs = {f: getattr(after, f) - getattr(before, f) for f in fields}
    if after.stats_reset != before.stats_reset or any(v < 0 for v in diffs.values()):
        logger.warning("pg_stat_database counters were reset during the window (stats_reset "
                       "%s -> %s); its deltas are not recorded", before.stats_reset,
                       after.stats_reset)
        return None
    return StatsDelta(seconds=after.taken - before.taken, **diffs)


def no_blocks(delta: StatsDelta | None) -> bool:
    """Whether ``delta`` is missing or counted no block access (its backends had not yet
    flushed their statistics)."""
    return delta is None or delta.blks_hit + delta.blks_read == 0
