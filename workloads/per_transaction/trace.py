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

    @classmethod
    def merged(cls, windows: Sequence[Trace], arms: Sequence[int],
               configurations: Sequence[Configuration]) -> Trace:
        """One trace from whole-server windows run one after another, each under one
        configuration: window i's transactions all count as ``configurations[arms[i]]``, and
        its starts move onto the first window's clock by the windows' origins."""
        if not windows or len(windows) != len(arms):
            raise ValueError(f"merging needs one arm per window, but got {len(windows)} "
                             f"windows and {len(arms)} arms")
        templates = tuple(sorted({t for w in windows for t in w.templates}))
        index = {t: i for i, t in enumerate(templates)}
        origin = windows[0].origin
        parts = [(np.full(len(w), arm), np.array([index[t] for t in w.templates],
                                                   dtype=int)[w.template],
                  w.start + (w.origin - origin), w.latency, w.ok)
                 for w, arm in zip(windows, arms, strict=True)]
        config, template, start, latency, ok = (np.concatenate([part[k] for part in parts])
                                                for k in range(5))
        end = max(w.origin - origin + w.seconds for w in windows)
        return cls(tuple(configurations), templates, config.astype(int), template, start,
                   latency, ok.astype(bool), end, origin)

    def __len__(self) -> int:
        return int(self.config.size)

    def counts(self) -> np.ndarray:
        """Finished transactions per configuration (failed ones included)."""
        return np.bincount(self.config, minlength=len(self.configurations))

    @property
    def errors(self) -> int:
        return int((~self.ok).sum())
