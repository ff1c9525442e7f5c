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
    workload weighs the templates by (:mod:`tuner_client.stats.estimand`). ``overhead``:
    seconds per transaction, by configuration and template, that the run's own wrapper (the
    ``BEGIN; SET LOCAL ...; END`` round trips the workload's client does not make) added to
    each latency, as measured in the run; None: none measured.
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
    overhead: np.ndarray | None = None

    @classmethod
    def from_rows(cls, configurations: Sequence[Configuration], templates: Sequence[str],
                  rows: Sequence[tuple[int, int, float, float, bool]], seconds: float,
                  origin: float = 0.0, loops: Mapping[str, int] | None = None,
                  overhead: np.ndarray | None = None) -> Trace:
        """A trace from ``(config, template, start, latency, ok)`` rows."""
        arr = np.array([r[:4] for r in rows], dtype=float).reshape(-1, 4)
        return cls(tuple(configurations), tuple(templates), arr[:, 0].astype(int),
                   arr[:, 1].astype(int), arr[:, 2], arr[:, 3],
                   np.array([r[4] for r in rows], dtype=bool), seconds, origin, loops,
                   overhead)

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
                           last.origin - first.origin + last.seconds, origin=first.origin,
                           loops=first.loops, overhead=_pooled_overhead(traces, index))


def _pooled_overhead(traces: Sequence[Trace], index: Mapping[str, int]) -> np.ndarray | None:
    """The pieces' wrapper overheads, each weighted by its transactions (templates merged by
    name); None when no piece measured one."""
    measured = [t for t in traces if t.overhead is not None and len(t)]
    if not measured:
        return None
    total = np.zeros((len(traces[0].configurations), len(index)))
    weight = np.zeros(len(index))
    for t in measured:
        names = [index[name] for name in t.templates]
        total[:, names] += len(t) * t.overhead  # type: ignore[operator]
        weight[names] += len(t)
    return total / np.where(weight > 0, weight, 1.0)
