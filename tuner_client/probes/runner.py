"""Taking BME probes on a live server: restart at one shared_buffers size, run the workload for a
short window (from the cold buffer, or once the buffer has settled:
:mod:`tuner_client.probes.settle`), and read only the miss probability of its relations.

The counts come from ``pg_statio_user_tables`` (heap) and ``pg_statio_user_indexes``: block
hits and reads of every user relation whose counters moved over the window. A read may still
be served by the OS page cache (inside the memory cgroup, if any); it is a miss of
PostgreSQL's buffer all the same, which is what the Buffer Miss Equation describes. The
sizes of the relations the windows touched give the catalog's P* (see
:mod:`bme.probe_decision`). Every probe goes through :meth:`Measurer.apply`, so a size
that breaks the memory budget is refused, never applied.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import psycopg
from psycopg.rows import TupleRow

from bme.probe_decision import Probe, flat
from harmony_base.errors import HarmonyError
from tuner_client.config import format_bytes
from tuner_client.measurer import Measurer
from tuner_client.measurer.prewarm import BufferRecord, buffer_capacity, buffers_in_use
from tuner_client.probes.settle import (
    MIN_SUB_S,
    Settling,
    prewarm_for_probe,
    record_richer,
    settle,
)

logger = logging.getLogger(__name__)

#: how long the counters are polled for after the window (backends flush on exit)
SETTLE_S = 3.0
SETTLE_POLL_S = 0.2

#: the client backends of the database besides the asking one. A backend flushes its pending
#: block counts when it exits, before it leaves pg_stat_activity; while it is idle it may
#: hold them for up to 10 s (PostgreSQL 15 flushes at most once a second)
_CLIENTS_SQL = """
SELECT pid FROM pg_stat_activity
 WHERE datname = current_database() AND backend_type = 'client backend'
   AND pid <> pg_backend_pid()
"""

_IO_SQL = """
SELECT relid::regclass::text, coalesce(heap_blks_hit, 0), coalesce(heap_blks_read, 0),
       pg_relation_size(relid) / current_setting('block_size')::int
  FROM pg_statio_user_tables
UNION ALL
SELECT indexrelid::regclass::text, coalesce(idx_blks_hit, 0), coalesce(idx_blks_read, 0),
       pg_relation_size(indexrelid) / current_setting('block_size')::int
  FROM pg_statio_user_indexes
"""


@dataclass(frozen=True)
class BufferFill:
    """How full a probe's buffer was at the end of its window: ``used`` of ``capacity``
    buffers (``pg_buffercache``)."""

    used: int
    capacity: int

    @property
    def full(self) -> bool:
        """Whether the window filled the buffer (within 2 %: a few stay free for new pages)."""
        return self.capacity > 0 and self.used >= 0.98 * self.capacity


@dataclass(frozen=True)
class RelationIO:
    """Block hits and reads of every user relation (tables and indexes) at one moment, with
    each relation's size in pages."""

    counts: dict[str, tuple[int, int]]
    pages: dict[str, int]

    def total(self) -> int:
        return sum(h + r for h, r in self.counts.values())


def read_relation_io(conn: psycopg.Connection[TupleRow]) -> RelationIO:
    """The current statio counters of the connection's database (a fresh snapshot)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    counts: dict[str, tuple[int, int]] = {}
    pages: dict[str, int] = {}
    for name, hits, reads, size in conn.execute(_IO_SQL).fetchall():
        counts[str(name)] = (int(hits), int(reads))
        pages[str(name)] = int(size or 0)
    return RelationIO(counts, pages)


def window_delta(before: RelationIO, after: RelationIO) -> tuple[int, int, dict[str, int]]:
    """Hits, reads, and the pages of each relation whose counters moved between the two."""
    hits = reads = 0
    touched: dict[str, int] = {}
    for name, (h1, r1) in after.counts.items():
        h0, r0 = before.counts.get(name, (0, 0))
        dh, dr = h1 - h0, r1 - r0
        if dh < 0 or dr < 0:  # a stats reset or a re-created relation: skip it
            continue
        if dh + dr > 0:
            hits += dh
            reads += dr
            touched[name] = after.pages.get(name, 0)
    return hits, reads, touched


def client_pids(conn: psycopg.Connection[TupleRow]) -> set[int]:
    """The pids of the database's other client backends (a fresh snapshot)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return {int(pid) for (pid,) in conn.execute(_CLIENTS_SQL).fetchall()}


def settled_io(conn: psycopg.Connection[TupleRow], present: set[int]) -> RelationIO:
    """The counters once the backends the window opened (not in ``present``) have exited,
    so their counts are flushed, and the totals stop moving; at most ``SETTLE_S``.

    Two equal readings alone are not enough: a backend that ran a query less than a second
    after its previous flush holds the counts until it exits, and a probe read before that
    misses them (a 16 MB TPC-H probe once measured P = 0.056 against 0.47 in every other
    set, which counts missed this way would explain; benchmarks/README.md, session 8)."""
    deadline = time.monotonic() + SETTLE_S
    while client_pids(conn) - present and time.monotonic() < deadline:
        time.sleep(SETTLE_POLL_S)
    last = read_relation_io(conn)
    while time.monotonic() < deadline:
        time.sleep(SETTLE_POLL_S)
        now = read_relation_io(conn)
        if now.total() == last.total():
            return now
        last = now
    return last


def read_fill(measurer: Measurer, conn: psycopg.Connection[TupleRow]) -> BufferFill | None:
    """How full the buffer is now, or None (logged) without ``pg_buffercache``."""
    why = measurer.applier.prewarmer.ensure(conn, "pg_buffercache")
    if why:
        logger.info("the probes cannot tell whether their buffer filled: %s", why)
        return None
    try:
        return BufferFill(buffers_in_use(conn), buffer_capacity(conn))
    except psycopg.Error as exc:
        logger.info("the probes cannot tell whether their buffer filled: %s", exc)
        return None


def probe(measurer: Measurer, size: int, seconds: float,
          fills: dict[int, BufferFill] | None = None, *, settle_s: float = 0.0,
          record: BufferRecord | None = None, give_up: bool = True) -> Probe | str:
    """One probe at ``size`` bytes: restart (budget-checked), a ``seconds`` window of the
    workload, the statio deltas (and, given ``fills``, how full the buffer was at the end,
    by size). With ``settle_s`` > 0 the window starts from a settled buffer
    (:mod:`tuner_client.probes.settle`: ``record``'s hottest blocks prewarmed, then the
    workload until the buffer settles, at most ``settle_s``); else from the cold buffer. A
    refused or failed restart, or a failing workload, is returned as text (the server keeps
    its last good configuration). ``give_up``: a buffer that cannot settle in time stops
    settling early (:func:`tuner_client.probes.settle.cannot_fill`)."""
    started = time.monotonic()
    measurer.stop()
    # the restart itself is cold: a settled probe prewarms from the probes' own record
    outcome = measurer.apply({"shared_buffers": format_bytes(size)}, warm_up=False,
                             prewarm=False)
    if outcome.failure is not None:
        return outcome.failure
    settling = Settling("cold")
    try:
        conn = measurer.live_conn()
        if settle_s > 0:
            prewarmed = prewarm_for_probe(measurer, conn, record)
        before = read_relation_io(conn)  # a cold window counts from the workload's start
        present = client_pids(conn)
        window_start = time.monotonic()
        measurer.start()
        try:
            if settle_s > 0:
                settling = replace(settle(measurer, conn, settle_s,
                                          max(MIN_SUB_S, seconds / 2), give_up=give_up),
                                   prewarmed=prewarmed)
                before = read_relation_io(conn)
                window_start = time.monotonic()
            measurer.workload.sample(seconds=seconds)
        finally:
            measurer.stop()
        window_s = time.monotonic() - window_start
        after = settled_io(conn, present)
        fill = read_fill(measurer, conn) if fills is not None else None
        if fill is not None and fills is not None:
            fills[size] = fill
    except (HarmonyError, psycopg.Error) as exc:
        return f"probe at {format_bytes(size)} failed: {exc}"
    hits, reads, touched = window_delta(before, after)
    got = Probe(size=size, hits=hits, reads=reads, window_s=window_s,
                cost_s=time.monotonic() - started, touched=touched,
                settled="" if settling.how == "cold" else settling.how,
                settle_s=settling.seconds)
    logger.info("probe shared_buffers=%s (%s): %d accesses, P = %s, %.1f s",
                format_bytes(size), settling.how, got.accesses,
                f"{got.miss:.4f}" if got.accesses else "n/a", got.cost_s)
    return got


def probe_order(sizes: Sequence[int]) -> list[int]:
    """The smallest size, the largest, then the ones between (increasing): the two ends
    alone can already decide a flat curve (:func:`ends_flat_unfilled`)."""
    ordered = sorted(sizes)
    return ordered if len(ordered) < 3 else [ordered[0], ordered[-1], *ordered[1:-1]]


def run_probes(measurer: Measurer, sizes: Sequence[int], seconds: float,
               fills: dict[int, BufferFill] | None = None, *, settle_s: float = 0.0,
               order: Callable[[Sequence[int]], list[int]] = sorted,
               stop: Callable[[Sequence[Probe]], bool] | None = None,
               give_up: bool = True) -> tuple[list[Probe], list[str]]:
    """Probe every size in ``order`` (increasing unless told) until ``stop`` says the probes
    so far decide; returns the probes and the failures' texts (``fills`` gets how full each
    probe's buffer was). With ``settle_s`` > 0 every window starts from a settled buffer,
    prewarmed from the fullest buffer seen so far (the server's own before the first
    probe). The workload is left stopped and the last probed size in force."""
    probes: list[Probe] = []
    failures: list[str] = []
    record: BufferRecord | None = None
    for size in order(sizes):
        if settle_s > 0:
            record = record_richer(measurer, measurer.live_conn(), record)
        got = probe(measurer, size, seconds, fills, settle_s=settle_s, record=record,
                    give_up=give_up)
        if isinstance(got, str):
            logger.warning("BME probe skipped: %s", got)
            failures.append(got)
        else:
            probes.append(got)
            if stop is not None and stop(probes):
                logger.info("BME probes: %d of %d sizes decide; the rest are not run",
                            len(probes), len(sizes))
                break
    return probes, failures


def _flat_ends(probes: Sequence[Probe], fills: dict[int, BufferFill]
               ) -> tuple[BufferFill | None, bool] | None:
    """When the first two probes, the smallest and the largest size, read a flat curve: the
    largest's buffer fill (None: not recorded) and whether that buffer had settled (full, or
    holding every page the workload touches); None otherwise."""
    if len(probes) != 2 or not all(p.accesses for p in probes):
        return None
    small, large = sorted(probes, key=lambda p: p.size)
    if not flat([small.miss, large.miss]):
        return None
    fill = fills.get(large.size)
    return fill, large.settled == "fits" or (fill is not None and fill.full)


def ends_flat_unfilled(probes: Sequence[Probe], fills: dict[int, BufferFill]) -> bool:
    """Whether the first two probes, the smallest and the largest size
    (:func:`probe_order`), already decide "no knee found in range": their miss
    probabilities read a flat curve, and the largest's buffer was neither full nor holding
    every page the workload touches. The probes between lie between the ends on a miss
    curve that falls with size, so they could only leave it flat (the same decision) or
    make it not monotone (rejected, the search keeps its whole range all the same)."""
    ends = _flat_ends(probes, fills)
    return ends is not None and not ends[1] and ends[0] is not None


def ends_flat_settled(probes: Sequence[Probe], fills: dict[int, BufferFill]) -> bool:
    """Whether the first two probes, the smallest and the largest size, already decide "no
    knee": their miss probabilities read a flat curve and the largest's buffer had settled
    (full, or holding every page the workload touches). The probes between lie between the
    ends on a curve that falls with size, so they would read it flat too (the demo's four
    probes all read 0.0000 at SF 0.01, 28 s of its run)."""
    ends = _flat_ends(probes, fills)
    return ends is not None and ends[1]


def fits_at_smallest(probes: Sequence[Probe], smallest: int) -> bool:
    """Whether the first probe alone, at the ``smallest`` size (:func:`probe_order`), already
    decides "no knee": its buffer had settled (full, or holding every page the workload
    touches) and it (nearly) never missed, a flat curve with zero. A larger buffer misses no
    more on a curve that falls with size, so every size above would read the same flat curve
    (the demo's largest probe read 0.0000 after its smallest did, 6 s of its run)."""
    if len(probes) != 1:
        return False
    small = probes[0]
    return (small.size == smallest and small.accesses > 0
            and small.settled in ("full", "fits") and flat([small.miss, 0.0]))


def touched_pages(probes: Sequence[Probe]) -> int:
    """The pages of every relation any probe's window accessed (the catalog's P* numerator)."""
    pages: dict[str, int] = {}
    for p in probes:
        pages.update(p.touched)
    return sum(pages.values())
