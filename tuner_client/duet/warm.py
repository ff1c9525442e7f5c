"""Warm restarts for the duet's clone, as the server's own are (``measure.prewarm``).

In a race whose configurations differ in a restart-time knob every swap restarts both
clusters. The server's restarts go through the run's applier, which records its buffer's blocks
before and loads them back after (:mod:`tuner_client.measurer.prewarm`); the clone's restarted
cold. The role swaps (ABBA) cancel the mean of that asymmetry but not its spread: the clone's
refill and the server's prewarm differ from segment to segment. Ten A/A runs of server-wide
knobs (``benchmarks/results/aa_default.s33.md``) read the four races that restarted at
±4.2–5.5 % and the six by reload at ±3.0–4.9 %. Here the clone's restarts are warm too, by the
same :class:`~tuner_client.measurer.prewarm.Prewarmer`: its buffer's blocks, hottest first,
recorded before and loaded back after, up to the new size.

A clone is a copy of the server's data, so the extensions the server's prewarmer created are
in it already; whatever this one creates goes with the clone when it is removed. A user's twin
is not warmed this way (its extensions would be the user's to keep): there the server restarts
cold as well (:func:`tuner_client.phases.final_duet.duet_arms`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import psycopg
from psycopg.rows import TupleRow

from tuner_client.measurer.prewarm import BufferRecord, Prewarmer, PrewarmResult

logger = logging.getLogger(__name__)


@dataclass
class WarmRestarts:
    """Records the clone's buffer (through ``dsn``, its workload database) before each
    configuration change and loads it back after one that restarted."""

    dsn: str
    prewarmer: Prewarmer = field(default_factory=Prewarmer)
    #: what each restart loaded back, in order
    results: list[PrewarmResult] = field(default_factory=list)

    def wrap(self, apply: Callable[[Mapping[str, str]], bool]
             ) -> Callable[[Mapping[str, str]], bool]:
        """``apply`` (which returns whether it restarted) with the buffer recorded before a
        change of a restart-time knob and loaded back after the restart."""
        def put(settings: Mapping[str, str]) -> bool:
            record = self._record(settings)
            restarted = apply(settings)
            if restarted and record is not None:
                self._load(record)
            return restarted
        return put

    def _record(self, settings: Mapping[str, str]) -> BufferRecord | str | None:
        """The buffer now, or why not; None when no restart-time knob of ``settings`` differs
        from its value in force (a reload: nothing to record)."""
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                if not _restarts(conn, settings):
                    return None
                return self.prewarmer.record(conn)
        except psycopg.Error as exc:
            return f"the clone's buffer could not be read: {str(exc).strip()}"

    def _load(self, record: BufferRecord | str) -> None:
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                result = self.prewarmer.load(conn, record)
        except psycopg.Error as exc:
            result = PrewarmResult("none", reason=f"the clone could not be reached: {exc}")
        if result.blocks == 0:
            logger.info("the clone's restart was not prewarmed: %s", result.reason)
        self.results.append(result)


def _restarts(conn: psycopg.Connection[TupleRow], settings: Mapping[str, str]) -> bool:
    """Whether putting ``settings`` in force may restart the server: a postmaster knob among
    them shown differently from ``settings`` (a spelling of the same value, 1GB for 1024MB,
    only costs a record that is not loaded: the apply says whether it restarted)."""
    rows = conn.execute("SELECT name, current_setting(name) FROM pg_settings "
                        "WHERE context = 'postmaster' AND name = ANY(%s)",
                        [list(settings)]).fetchall()
    return any(str(shown) != settings[str(name)] for name, shown in rows)
