"""What a per-transaction run records: for every finished transaction (or query) the
configuration it drew, its template, when it started and how long it took."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workloads.per_transaction.settings import Configuration


@dataclass(frozen=True)
class Trace:
    """Parallel arrays, one entry per transaction, in no particular order.

    ``config[i]`` indexes :attr:`configurations`, ``template[i]`` indexes :attr:`templates`
    (a pgbench script, a TPC-H query, a statement of a .sql file); ``start[i]`` is seconds
    since the run began and ``latency[i]`` seconds; ``ok[i]`` is False for a transaction that
    failed (its latency is then the time until the failure). ``origin`` is the wall-clock time
    (``time.time()``, epoch seconds) of start 0, so the trace can be lined up with events timed
    elsewhere (a switchback's slices).
    """

    configurations: tuple[Configuration, ...]
    templates: tuple[str, ...]
    config: np.ndarray
    template: np.ndarray
    start: np.ndarray
    latency: np.ndarray
    ok: np.ndarray
    seconds: float
    origin: float = 0.0

    @classmethod
    def from_rows(cls, configurations: Sequence[Configuration], templates: Sequence[str],
                  rows: Sequence[tuple[int, int, float, float, bool]], seconds: float,
                  origin: float = 0.0) -> Trace:
        """A trace from ``(config, template, start, latency, ok)`` rows."""
        arr = np.array([r[:4] for r in rows], dtype=float).reshape(-1, 4)
        return cls(tuple(configurations), tuple(templates), arr[:, 0].astype(int),
                   arr[:, 1].astype(int), arr[:, 2], arr[:, 3],
                   np.array([r[4] for r in rows], dtype=bool), seconds, origin)

    def __len__(self) -> int:
        return int(self.config.size)

    def counts(self) -> np.ndarray:
        """Finished transactions per configuration (failed ones included)."""
        return np.bincount(self.config, minlength=len(self.configurations))

    @property
    def errors(self) -> int:
        return int((~self.ok).sum())
