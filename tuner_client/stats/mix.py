"""Live mode's objective and mix statistics: statements compared like with like.

Observed traffic is not under the tuner's control: between two windows the application may
send a different mix, and a window of cheaper statements would look faster. So a window is
scored statement by statement against the reference configuration:

    R = Σ_q w_q · (mean_q / c_q) / Σ_q w_q      over the statements q with enough calls

where ``c_q`` is statement q's mean execution time under the reference configuration and
``w_q`` its share of the reference's execution time (both frozen when learned). ``R`` is the
time the reference's own mix would take at this window's per-statement speeds, relative to
the reference (1.0: as fast; 1.25: 25 % slower); a change of mix alone leaves it at 1.
The tuner maximises ``1 / R``, the *relative speed*.

A mix is a time-share vector (each statement's share of the execution time, its calls priced
at the reference's costs); two mixes are compared by their total-variation distance
½ Σ |a_q − b_q| (0: the same mix, 1: disjoint).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from harmony_base.errors import WorkloadError

#: per statement: (calls, mean execution seconds or None)
PerQuery = Mapping[str, tuple[int, float | None]]


def time_shares(per_query: PerQuery, costs: Mapping[str, float] | None = None
                ) -> dict[str, float]:
    """Each statement's share of the window's execution time (empty when no time).

    With ``costs`` (mean seconds per call, e.g. the reference's) each call is priced at its
    statement's cost instead of its mean in the window (statements without a cost at their
    own mean): the shares then move with the mix of calls, not with the latencies, which a
    configuration (or a few scheduling stalls of microsecond statements) also moves.
    """
    costs = costs or {}
    busy = {q: n * costs.get(q, m) for q, (n, m) in per_query.items()
            if n > 0 and m is not None and costs.get(q, m) > 0}
    total = sum(busy.values())
    return {q: t / total for q, t in busy.items()} if total > 0 else {}


def pool(windows: Iterable[PerQuery]) -> dict[str, tuple[int, float]]:
    """Windows summed per statement: ``(calls, total execution seconds)``."""
    pooled: dict[str, tuple[int, float]] = {}
    for window in windows:
        for q, (n, m) in window.items():
            if n > 0 and m is not None:
                calls, busy = pooled.get(q, (0, 0.0))
                pooled[q] = (calls + n, busy + n * m)
    return pooled


def share_distance(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Total-variation distance between two time-share vectors, in [0, 1]."""
    return 0.5 * sum(abs(a.get(q, 0.0) - b.get(q, 0.0)) for q in set(a) | set(b))


@dataclass(frozen=True)
class LatencyScore:
    """A window scored against the reference: ``ratio`` is R of the module docstring."""

    ratio: float
    #: the reference's time share carried by the statements that were scored
    covered: float
    calls: int
    #: statements of the reference with too few calls in the window, left out
    left_out: tuple[str, ...] = ()

    @property
    def speed(self) -> float:
        """``1 / ratio``: higher is better, 1.0 is the reference's speed."""
        return 1.0 / self.ratio


@dataclass(frozen=True)
class MixReference:
    """Per-statement mean times (``costs``, s) and time shares under the reference."""

    costs: dict[str, float]
    shares: dict[str, float]
    min_calls: int
    #: minimum reference time share a window must cover to be scored
    min_coverage: float = 0.5
    #: calls seen while learning (for messages)
    calls: int = 0
    ignored: dict[str, int] = field(default_factory=dict)

    @classmethod
    def learn(cls, windows: Iterable[PerQuery], *, min_calls: int,
              min_coverage: float = 0.5, seconds: float | None = None) -> MixReference:
        """Pool the reference configuration's windows; statements with fewer than
        ``min_calls`` calls per window on average are left out. Raises
        :class:`WorkloadError` when no statement has enough calls (too little traffic)."""
        windows = list(windows)
        pooled, count = pool(windows), len(windows)
        calls = sum(n for n, _ in pooled.values())
        need = min_calls * max(count, 1)
        kept = {q: (n, t) for q, (n, t) in pooled.items() if n >= need and t > 0}
        if not kept:
            during = f" in {seconds:.0f} s" if seconds is not None else ""
            top = max((n for n, _ in pooled.values()), default=0)
            raise WorkloadError(
                f"too little traffic to measure: pg_stat_statements saw {calls} calls of "
                f"{len(pooled)} statements{during} under the reference configuration, the "
                f"busiest with {top} calls; a statement needs at least {min_calls} calls per "
                f"sample window ({need} over {count} windows) to be compared. Lengthen "
                f"measure.seconds, lower workload.observe.min_calls, or tune when the "
                f"application is busier")
        total = sum(t for _, t in kept.values())
        return cls(costs={q: t / n for q, (n, t) in kept.items()},
                   shares={q: t / total for q, (_, t) in kept.items()},
                   min_calls=min_calls, min_coverage=min_coverage, calls=calls,
                   ignored={q: n for q, (n, _) in pooled.items() if q not in kept})

    def score(self, per_query: PerQuery, *, min_calls: int | None = None,
              min_coverage: float | None = None) -> LatencyScore | None:
        """R of this window, or None when the statements with enough calls carry less than
        ``min_coverage`` of the reference's time (too little traffic to say)."""
        need = self.min_calls if min_calls is None else min_calls
        coverage = self.min_coverage if min_coverage is None else min_coverage
        weighted, covered, calls, left_out = 0.0, 0.0, 0, []
        for q, share in self.shares.items():
            n, mean = per_query.get(q, (0, None))
            if n < need or mean is None or not math.isfinite(mean):
                left_out.append(q)
                continue
            weighted += share * mean / self.costs[q]
            covered += share
            calls += n
        if covered <= 0 or covered < coverage:
            return None
        return LatencyScore(ratio=max(weighted / covered, 1e-12), covered=covered,
                            calls=calls, left_out=tuple(left_out))

    def coverage_error(self, per_query: PerQuery, seconds: float) -> WorkloadError:
        """The too-little-traffic error for a window :meth:`score` could not score."""
        calls = sum(n for n, _ in per_query.values())
        enough = sum(self.shares[q] for q in self.shares
                     if per_query.get(q, (0, None))[0] >= self.min_calls)
        return WorkloadError(
            f"too little traffic to measure this window: {calls} calls in {seconds:.1f} s; "
            f"the statements with at least {self.min_calls} calls carry "
            f"{100 * enough:.0f} % of the reference's execution time, and "
            f"{100 * self.min_coverage:.0f} % is needed. Lengthen measure.seconds or lower "
            f"workload.observe.min_calls")
