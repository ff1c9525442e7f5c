"""What a per-transaction run records: for every finished transaction (or query) the
configuration it drew, its template, when it started and how long it took."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from workloads.per_transaction.settings import Configuration

#: how often a run with a stopping rule shows it the trace so far (seconds)
CHECK_S = 2.0


@dataclass(frozen=True)
class Trace:
    """Parallel arrays, one entry per transaction, in no particular order.

    ``config[i]`` indexes :attr:`configurations`, ``template[i]`` indexes :attr:`templates`
    (a pgbench script, a TPC-H query, a statement of a .sql file); ``start[i]`` is seconds
    since the run began and ``latency[i]`` seconds; ``ok[i]`` is False for a transaction that
    failed (its latency is then the time until the failure). ``origin`` is the wall-clock time
    (``time.time()``, epoch seconds) of start 0, so the trace can be lined up with events timed
    elsewhere (a switchback's slices). ``loops``: how many clients loop each template (a TPC-H
    stream runs its one query over and over), None when every client draws each transaction's
    template from the mix (pgbench, scripts, a replay): what a throughput count of the run's
    workload weighs the templates by (:mod:`tuner_client.stats.estimand`).
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
    loops: Mapping[str, int] | None = None

    @classmethod
    def from_rows(cls, configurations: Sequence[Configuration], templates: Sequence[str],
                  rows: Sequence[tuple[int, int, float, float, bool]], seconds: float,
                  origin: float = 0.0, loops: Mapping[str, int] | None = None) -> Trace:
        """A trace from ``(config, template, start, latency, ok)`` rows."""
        arr = np.array([r[:4] for r in rows], dtype=float).reshape(-1, 4)
        return cls(tuple(configurations), tuple(templates), arr[:, 0].astype(int),
                   arr[:, 1].astype(int), arr[:, 2], arr[:, 3],
                   np.array([r[4] for r in rows], dtype=bool), seconds, origin, loops)

    def __len__(self) -> int:
        return int(self.config.size)

    def counts(self) -> np.ndarray:
        """Finished transactions per configuration (failed ones included)."""
        return np.bincount(self.config, minlength=len(self.configurations))

    @property
    def errors(self) -> int:
        return int((~self.ok).sum())


#: a stopping rule: True once the trace so far is enough (the run then ends sooner)
Settled = Callable[[Trace], bool]


def concat(traces: Sequence[Trace]) -> Trace:
    """One trace of consecutive runs over the same configurations: starts on the first
    run's clock (by each run's ``origin``), templates merged by name."""
    if not traces:
        raise ValueError("concat needs at least one trace")
    first = traces[0]
    templates = sorted({name for t in traces for name in t.templates})
    index = {name: i for i, name in enumerate(templates)}
    rows: list[tuple[int, int, float, float, bool]] = []
    for t in traces:
        if t.configurations != first.configurations:
            raise ValueError("concat needs traces over the same configurations")
        shift = t.origin - first.origin
        names = [index[name] for name in t.templates]
        rows += [(int(c), names[int(k)], float(s) + shift, float(lat), bool(ok))
                 for c, k, s, lat, ok in zip(t.config, t.template, t.start, t.latency, t.ok,
                                                 strict=True)]
    last = traces[-1]
    return Trace.from_rows(first.configurations, templates, rows,
                           last.origin - first.origin + last.seconds, origin=first.origin)
