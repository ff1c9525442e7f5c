"""A probe's buffer brought to its steady state before the probe's window (issue 31).

Right after a restart the buffer is empty, so a short window's misses are mostly compulsory:
where the data are larger than the buffer the window reads a miss probability well above the
steady state at that size, and a flat curve of such windows says nothing of the knee. Before
its window a settled probe loads the hottest blocks recorded before the probes (and after each
probe, when that saw more) with ``pg_prewarm``, up to its size, then runs the workload in short
sub-windows until the buffer has settled: it is full, or its occupancy stopped growing while
the workload no longer misses (every page it touches is resident), *and* the miss probability
of the last two sub-windows agrees. Only then does the probe's window start.

A buffer that cannot settle within the budget is given up early (``filling``): its miss
probability has stopped falling but stays above the "fits" level, and at its last
sub-window's growth it would still not be full when the budget runs out. Waiting on would
only spend the budget (pgbench TPC-B at scale 55 filled 5,350 of 32,768 buffers in 30 s,
issue 31); the probe's window then reads a buffer still filling, as a timeout would.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import psycopg
from psycopg.rows import TupleRow

from harmony_base.errors import HarmonyError
from harmony_base.jsontypes import JSONObject
from tuner_client.measurer import Measurer
from tuner_client.measurer.prewarm import BufferRecord, buffer_capacity, buffers_in_use

logger = logging.getLogger(__name__)

#: the buffer counts as full from this share of its capacity (a few stay free for new pages)
FULL_SHARE = 0.98
#: the occupancy stopped growing: it grew by less than this share of the capacity over the
#: last sub-window
GROWTH_SHARE = 0.01
#: ... and the buffer holds every page the workload touches only while it (nearly) never
#: misses: the last two sub-windows' miss probabilities at most this
FITS_MISS = 0.01
#: the last two sub-windows' miss probabilities agree within this much (absolute) ...
MISS_TOL_ABS = 0.01
#: ... or within this fraction of the larger one
MISS_TOL_REL = 0.10
#: a sub-window lasts half the probe's window, at least this long (a backend flushes its
#: block counts at most once a second, so a shorter one reads mostly the previous one's)
MIN_SUB_S = 1.5


@dataclass(frozen=True)
class Settling:
    """How a probe's buffer settled: ``how`` is ``full`` or ``fits`` (settled: the buffer
    filled, or every touched page is resident), ``filling`` (given up early: it could not
    fill within the budget), ``timeout`` (the settle budget ran out first) or ``cold`` (no
    settling asked); ``seconds`` spent, the blocks prewarmed, and per sub-window the miss
    probability and the buffers in use."""

    how: str
    seconds: float = 0.0
    prewarmed: int = 0
    misses: tuple[float | None, ...] = ()
    fills: tuple[int, ...] = ()
    capacity: int = 0

    @property
    def settled(self) -> bool:
        return self.how in ("full", "fits")

    def to_dict(self) -> JSONObject:
        return {"how": self.how, "seconds": self.seconds, "prewarmed": self.prewarmed,
                "misses": list(self.misses), "fills": list(self.fills),
                "capacity": self.capacity}


def settled_state(capacity: int, fills: list[int],
                  misses: list[float | None]) -> str | None:
    """``full`` or ``fits`` once the buffer has settled after the sub-windows read so far
    (``fills[0]`` the occupancy before the first), else None."""
    if len(misses) < 2 or len(fills) < 3 or capacity <= 0:
        return None
    last, previous = misses[-1], misses[-2]
    if last is None or previous is None:
        return None
    if not _agree(last, previous):
        return None
    if fills[-1] >= FULL_SHARE * capacity:
        return "full"
    # every page the workload touches is resident: nothing read, nothing added. A slow
    # workload still filling a large buffer also adds little a sub-window, but it still
    # misses (pgbench TPC-B at scale 55 under load 90: P = 0.075 while 256 MB grew < 1 %)
    if fills[-1] - fills[-2] < GROWTH_SHARE * capacity and max(last, previous) <= FITS_MISS:
        return "fits"
    return None


def _agree(last: float, previous: float) -> bool:
    return abs(last - previous) <= max(MISS_TOL_ABS, MISS_TOL_REL * max(last, previous))


def cannot_fill(capacity: int, fills: list[int], misses: list[float | None], sub_s: float,
                left_s: float) -> bool:
    """Whether the buffer will not settle in the ``left_s`` seconds left: the last two
    sub-windows' miss probabilities agree (no longer falling) but stay above ``FITS_MISS``
    (so it is not about to hold every touched page), and at the last sub-window's growth
    (``sub_s`` long) the occupancy would still be short of full when the time is up."""
    if len(misses) < 2 or len(fills) < 3 or capacity <= 0 or sub_s <= 0:
        return False
    last, previous = misses[-1], misses[-2]
    if last is None or previous is None or not _agree(last, previous):
        return False
    if min(last, previous) <= FITS_MISS:
        return False
    growth = max(0, fills[-1] - fills[-2]) / sub_s
    return fills[-1] + growth * max(0.0, left_s) < FULL_SHARE * capacity


def _miss(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    hits, reads = after[0] - before[0], after[1] - before[1]
    return reads / (hits + reads) if hits >= 0 and reads >= 0 and hits + reads > 0 else None


def _io_totals(conn: psycopg.Connection[TupleRow]) -> tuple[int, int]:
    """Block hits and reads of the database's user relations now (a fresh snapshot)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT coalesce(sum(heap_blks_hit + coalesce(idx_blks_hit, 0)"
        " + coalesce(toast_blks_hit, 0) + coalesce(tidx_blks_hit, 0)), 0)::int8,"
        " coalesce(sum(heap_blks_read + coalesce(idx_blks_read, 0)"
        " + coalesce(toast_blks_read, 0) + coalesce(tidx_blks_read, 0)), 0)::int8"
        " FROM pg_statio_user_tables").fetchone()
    return (int(row[0]), int(row[1])) if row is not None else (0, 0)


def prewarm_for_probe(measurer: Measurer, conn: psycopg.Connection[TupleRow],
                      record: BufferRecord | None) -> int:
    """Load the hottest blocks of ``record`` up to the buffer's size; the blocks loaded."""
    if record is None or not record.blocks:
        return 0
    result = measurer.applier.prewarmer.load(conn, record)
    if result.method == "none":
        logger.info("probe not prewarmed: %s", result.reason)
    return result.blocks


def settle(measurer: Measurer, conn: psycopg.Connection[TupleRow], budget_s: float,
           sub_s: float, *, give_up: bool = True) -> Settling:
    """Run the workload (started by the caller) in ``sub_s``-s sub-windows until the buffer
    has settled (:func:`settled_state`), cannot settle in time (:func:`cannot_fill`) or
    ``budget_s`` has passed."""
    started = time.monotonic()
    capacity = buffer_capacity(conn)
    fills = [buffers_in_use(conn)]
    misses: list[float | None] = []
    last = _io_totals(conn)
    how = "timeout"
    while time.monotonic() - started < budget_s:
        measurer.workload.sample(seconds=sub_s)
        now = _io_totals(conn)
        misses.append(_miss(last, now))
        fills.append(buffers_in_use(conn))
        last = now
        state = settled_state(capacity, fills, misses)
        if state is not None:
            how = state
            break
        if give_up and cannot_fill(capacity, fills, misses, sub_s,
                       budget_s - (time.monotonic() - started)):
            how = "filling"
            break
    got = Settling(how, time.monotonic() - started, misses=tuple(misses), fills=tuple(fills),
                   capacity=capacity)
    logger.info("probe buffer %s after %.1f s: misses %s, in use %s of %d", how, got.seconds,
                [None if m is None else round(m, 4) for m in misses], list(fills), capacity)
    return got


def record_richer(measurer: Measurer, conn: psycopg.Connection[TupleRow],
                  kept: BufferRecord | None) -> BufferRecord | None:
    """The buffer's blocks now when they are more than ``kept``'s, else ``kept`` (the next,
    larger probe then prewarms from the fullest buffer seen)."""
    try:
        now = measurer.applier.prewarmer.record(conn)
    except (HarmonyError, psycopg.Error) as exc:
        logger.info("the probe's buffer could not be recorded: %s", exc)
        return kept
    if isinstance(now, str):
        logger.info("the probes are not prewarmed: %s", now)
        return kept
    if kept is None or len(now.blocks) > len(kept.blocks):
        return now
    return kept
