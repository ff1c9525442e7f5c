"""Warm restarts: the buffer contents recorded before a restart and loaded back after it.

A restart empties shared_buffers, so the first windows after one measure the cold cache, not
the new configuration (benchmarks/README.md, "throughput after a restart"). Before the
restart :func:`record_buffers` reads from ``pg_buffercache`` which blocks of the database's
relations are resident, hottest (highest usage count) first; after it :func:`load_buffers`
loads them back with ``pg_prewarm`` up to the new shared_buffers size (for a smaller
buffer the hottest blocks first). Without ``pg_buffercache`` the autoprewarm worker's dump
is the fallback (when ``pg_prewarm`` is preloaded with ``pg_prewarm.autoprewarm``); without
either nothing is loaded and the reason is logged. Extensions the tuner created itself are
dropped again by :meth:`Prewarmer.cleanup`; each carries :data:`TUNER_MARK` as its comment, so
one left by a run that died before its cleanup (a crash, ``kill -9``) is dropped by the next
run's start (:func:`drop_leftover_extensions`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from harmony_base.jsontypes import JSONObject

logger = logging.getLogger(__name__)

#: the database's resident main-fork blocks of its relations, hottest first
_RESIDENT_SQL = """
SELECT c.oid::int8, b.relblocknumber::int8
  FROM pg_buffercache b
  JOIN pg_class c ON b.relfilenode = pg_relation_filenode(c.oid)
 WHERE b.reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND b.relforknumber = 0
 ORDER BY b.usagecount DESC NULLS LAST, c.oid, b.relblocknumber
"""

#: load block ranges (relation oid, first, last) into shared buffers; a relation dropped
#: since, or shorter now, is skipped or clipped
_LOAD_SQL = """
SELECT coalesce(sum(pg_prewarm(c.oid::regclass, 'buffer', 'main', t.f,
                               least(t.l, pg_relation_size(c.oid)
                                          / current_setting('block_size')::int8 - 1))), 0)
  FROM unnest(%s::int8[], %s::int8[], %s::int8[]) AS t(r, f, l)
  JOIN pg_class c ON c.oid = t.r::oid
 WHERE t.f < pg_relation_size(c.oid) / current_setting('block_size')::int8
"""


#: the comment on an extension the tuner created (a user's own extension never carries it)
TUNER_MARK = "created by the Harmony tuner for warm restarts and BME probes; dropped when it ends"

_MARKED_SQL = """
SELECT e.extname FROM pg_extension e
  JOIN pg_description d ON d.objoid = e.oid AND d.classoid = 'pg_extension'::regclass
 WHERE d.description = %s
"""


@dataclass(frozen=True)
class BufferRecord:
    """The resident blocks before a restart, hottest first: ``(relation oid, block)`` pairs,
    or, for the autoprewarm fallback, only how many blocks its dump holds."""

    blocks: tuple[tuple[int, int], ...] = ()
    method: str = "pg_buffercache"
    dumped: int = 0

    def hottest_ranges(self, capacity: int) -> list[tuple[int, int, int]]:
        """The hottest ``capacity`` blocks as contiguous ``(oid, first, last)`` ranges."""
        chosen = sorted(self.blocks[:max(0, capacity)])
        ranges: list[tuple[int, int, int]] = []
        for oid, block in chosen:
            if ranges and ranges[-1][0] == oid and ranges[-1][2] == block - 1:
                ranges[-1] = (oid, ranges[-1][1], block)
            else:
                ranges.append((oid, block, block))
        return ranges

    def completed_by(self, earlier: BufferRecord) -> BufferRecord:
        """These blocks, hottest first, then ``earlier``'s that are not among them (in their
        own order): what a larger buffer held before, after the hottest blocks now."""
        have = set(self.blocks)
        return BufferRecord(self.blocks + tuple(b for b in earlier.blocks if b not in have),
                            self.method, self.dumped)


@dataclass(frozen=True)
class PrewarmResult:
    """What a warm restart restored: ``blocks`` loaded in ``seconds`` by ``method``
    (``pg_buffercache`` + ``pg_prewarm``, ``autoprewarm``, or ``none`` with ``reason``),
    out of ``recorded`` resident before the restart, for a buffer of ``capacity`` blocks."""

    method: str
    blocks: int = 0
    seconds: float = 0.0
    recorded: int = 0
    capacity: int = 0
    reason: str = ""

    def to_dict(self) -> JSONObject:
        return {"method": self.method, "blocks": self.blocks, "seconds": self.seconds,
                "recorded": self.recorded, "capacity": self.capacity, "reason": self.reason}

    def text(self) -> str:
        if self.method == "none":
            return f"no prewarm ({self.reason})"
        return (f"prewarmed {self.blocks} of {self.recorded} recorded blocks (buffer "
                f"{self.capacity} blocks) in {self.seconds:.1f} s by {self.method}")


def _ensure_extension(conn: psycopg.Connection[TupleRow], name: str) -> tuple[bool, str]:
    """Whether extension ``name`` is usable, and whether this call created it (or why not)."""
    present = conn.execute("SELECT 1 FROM pg_extension WHERE extname = %s", [name]).fetchone()
    if present is not None:
        return True, ""
    try:
        conn.execute(sql.SQL("CREATE EXTENSION IF NOT EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("COMMENT ON EXTENSION {} IS {}").format(sql.Identifier(name),
                                                                    sql.Literal(TUNER_MARK)))
    except psycopg.Error as exc:
        return False, f"CREATE EXTENSION {name} failed: {str(exc).strip()}"
    return True, "created"


def drop_leftover_extensions(conn: psycopg.Connection[TupleRow]) -> list[str]:
    """Drop the extensions an earlier run created and never dropped (it died first): those
    carrying :data:`TUNER_MARK`; their names."""
    dropped: list[str] = []
    for (name,) in conn.execute(_MARKED_SQL, [TUNER_MARK]).fetchall():
        try:
            conn.execute(sql.SQL("DROP EXTENSION IF EXISTS {}").format(sql.Identifier(name)))
        except psycopg.Error as exc:
            logger.warning("could not drop extension %s left by an earlier run: %s", name, exc)
            continue
        dropped.append(str(name))
    if dropped:
        logger.warning("dropped extension(s) %s that an earlier run created for warm restarts "
                       "and did not drop (it ended before its cleanup)", ", ".join(dropped))
    return dropped


def _autoprewarm_on(conn: psycopg.Connection[TupleRow]) -> bool:
    row = conn.execute("SELECT current_setting('shared_preload_libraries'), "
                       "current_setting('pg_prewarm.autoprewarm', true)").fetchone()
    return row is not None and "pg_prewarm" in str(row[0]) and str(row[1]) == "on"


def buffers_in_use(conn: psycopg.Connection[TupleRow]) -> int:
    """Buffers holding a page now (``pg_buffercache`` must be installed)."""
    row = conn.execute("SELECT count(*) FROM pg_buffercache "
                       "WHERE relfilenode IS NOT NULL").fetchone()
    return int(row[0]) if row is not None else 0


def buffer_capacity(conn: psycopg.Connection[TupleRow]) -> int:
    """shared_buffers in force, in blocks."""
    row = conn.execute("SELECT setting::int8 FROM pg_settings "
                       "WHERE name = 'shared_buffers'").fetchone()
    return int(row[0]) if row is not None else 0


@dataclass
class Prewarmer:
    """Records the buffer before a restart and loads it back after; remembers the extensions
    it created so :meth:`cleanup` leaves the user's database as it found it."""

    created: list[str] = field(default_factory=list)
    unavailable: str = ""
    #: the record with the most blocks so far (the largest buffer's)
    richest: BufferRecord | None = None

    def ensure(self, conn: psycopg.Connection[TupleRow], name: str) -> str:
        """Make extension ``name`` usable (created and remembered when absent); why not, or
        an empty string."""
        usable, note = _ensure_extension(conn, name)
        if note == "created":
            self.created.append(name)
            logger.info("created extension %s for warm restarts (dropped at the end)", name)
        return "" if usable else note

    def record(self, conn: psycopg.Connection[TupleRow]) -> BufferRecord | str:
        """The resident blocks now, hottest first, or why they cannot be read."""
        if self.unavailable:
            return self.unavailable
        try:
            why = self.ensure(conn, "pg_buffercache")
            if not why:
                rows = conn.execute(_RESIDENT_SQL).fetchall()
                return self.remember(BufferRecord(tuple((int(r[0]), int(r[1])) for r in rows)))
            if _autoprewarm_on(conn):
                row = conn.execute("SELECT autoprewarm_dump_now()").fetchone()
                return BufferRecord(method="autoprewarm", dumped=int(row[0]) if row else 0)
        except psycopg.Error as exc:
            return f"reading the buffer failed: {str(exc).strip()}"
        self.unavailable = (f"{why}; and pg_prewarm's autoprewarm is not preloaded "
                            f"(shared_preload_libraries)")
        return self.unavailable

    def remember(self, now: BufferRecord) -> BufferRecord:
        """``now``, completed by the richest earlier record when that held more blocks: a
        restart from a smaller buffer into a larger one then loads the blocks the larger
        buffer held before, after the hottest ones now, instead of leaving the rest empty
        (80 MB back to 128 MB loaded 10,148 of 16,384 buffers, issue 31)."""
        if self.richest is None or len(now.blocks) >= len(self.richest.blocks):
            self.richest = now
            return now
        return now.completed_by(self.richest)

    def load(self, conn: psycopg.Connection[TupleRow], record: BufferRecord | str,
             wait_s: float = 60.0) -> PrewarmResult:
        """Load ``record`` into the (restarted) buffer, up to its size, hottest first."""
        if isinstance(record, str):
            return PrewarmResult("none", reason=record)
        started = time.monotonic()
        try:
            capacity = buffer_capacity(conn)
            if record.method == "autoprewarm":  # the worker loads its dump at start-up
                _wait_for_autoprewarm(conn, started + wait_s)
                return PrewarmResult("autoprewarm", blocks=min(record.dumped, capacity),
                                     seconds=time.monotonic() - started,
                                     recorded=record.dumped, capacity=capacity)
            why = self.ensure(conn, "pg_prewarm")
            if why:
                return PrewarmResult("none", recorded=len(record.blocks), capacity=capacity,
                                     reason=why)
            ranges = record.hottest_ranges(capacity)
            row = conn.execute(_LOAD_SQL, [[r[0] for r in ranges], [r[1] for r in ranges],
                                           [r[2] for r in ranges]]).fetchone()
        except psycopg.Error as exc:
            return PrewarmResult("none", recorded=len(record.blocks),
                                 reason=f"pg_prewarm failed: {str(exc).strip()}")
        return PrewarmResult("pg_buffercache", blocks=int(row[0]) if row else 0,
                             seconds=time.monotonic() - started, recorded=len(record.blocks),
                             capacity=capacity)

    def cleanup(self, conn: psycopg.Connection[TupleRow]) -> None:
        """Drop the extensions this prewarmer created."""
        for name in reversed(self.created):
            try:
                conn.execute(sql.SQL("DROP EXTENSION IF EXISTS {}").format(
                    sql.Identifier(name)))
            except psycopg.Error as exc:
                logger.warning("could not drop extension %s created for warm restarts: %s",
                               name, exc)
        self.created.clear()


def _wait_for_autoprewarm(conn: psycopg.Connection[TupleRow], deadline: float) -> None:
    """Wait until the autoprewarm worker has loaded its dump (its loader has exited)."""
    while time.monotonic() < deadline:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT count(*) FROM pg_stat_activity "
                           "WHERE backend_type = 'autoprewarm worker'").fetchone()
        if row is None or int(row[0]) == 0:
            return
        time.sleep(0.2)


def prewarm_summary(results: list[PrewarmResult]) -> str | None:
    """One line on what a pass's warm restarts restored (None: no restart was recorded)."""
    if not results:
        return None
    warm = [r for r in results if r.method != "none"]
    if not warm:
        return (f"{len(results)} restart(s) not prewarmed: {results[-1].reason}")
    blocks = sum(r.blocks for r in warm)
    seconds = sum(r.seconds for r in warm)
    methods = sorted({r.method for r in warm})
    text = (f"{len(warm)} of {len(results)} restart(s) prewarmed ({', '.join(methods)}): "
            f"{blocks} blocks ({blocks * 8 / 1024:.0f} MB of 8 kB) restored in "
            f"{seconds:.1f} s in all")
    cold = [r for r in results if r.method == "none"]
    return text + (f"; {len(cold)} cold: {cold[-1].reason}" if cold else "")
