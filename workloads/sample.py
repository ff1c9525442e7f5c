"""Throughput samples: what a window of completed queries tells (:class:`Sample`, per query
:class:`QueryStats`), how completions are summarised into one, and the work-based estimates
(reference costs, progress credit for queries still running). The windows themselves are
collected by :class:`workloads.recorder.Recorder`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from harmony_base.jsontypes import JSONObject


@dataclass(frozen=True)
class QueryStats:
    """One query's share of a sample: completions, errors, rate and latency percentiles (s)."""

    completed: int
    errors: int
    qpm: float
    p50: float | None
    p95: float | None
    p99: float | None
    mean: float | None


@dataclass(frozen=True)
class Sample:
    """A throughput measurement: ``qpm`` is completed queries per minute over ``seconds``.

    ``concurrency_qpm`` is the same throughput estimated from latencies instead of counts
    (Little's law for closed-loop streams): each of the ``n`` streams running query ``q``
    completes one query per mean latency of ``q``, so the rate is ``sum_q n_q / mean
    latency_q``. Every completion, slow or fast, contributes its latency, so it depends less
    on which queries happened to finish inside a short window (half the per-point spread in
    ``benchmarks/results/evidence_estimators.quick.md``); ``None`` when some query of the
    mix completed no instance in the sample.

    :meth:`work_per_s` weights each completion by its template's reference cost instead of
    counting it once (work-weighted throughput, see :func:`reference_costs`).

    ``progress_qpm`` counts queries by the share of their run time that fell inside the
    window instead of whole completions (:func:`progress_credit`): a query that started
    before the window counts only its part inside it, and one still running at the end
    counts its elapsed part of its expected duration. A 40-s query in a 30-s window adds
    about 0.75 every time instead of 0 or 1, so the counting noise at the window's ends
    (the floor of ``qpm``) is gone; the expectation is the same. ``None`` for workloads whose
    driver does not report when queries start (pgbench, live observation).
    """

    seconds: float
    completed: int
    errors: int
    qpm: float
    per_query: dict[str, QueryStats]
    mix: str = ""
    concurrency_qpm: float | None = None
    #: mean latency (s) of each statement of a scripted or replayed workload, by
    #: ``file, line N`` (or the replay's statement id); empty for the TPC-H mixes
    per_statement: dict[str, float] = field(default_factory=dict)
    progress_qpm: float | None = None

    def to_dict(self) -> JSONObject:
        """Plain data for JSON output."""
        return asdict(self)

    def work_per_s(self, costs: Mapping[str, float]) -> float | None:
        """Work completed per wall second: ``sum_q completed_q * costs[q] / seconds``.

        ``costs`` are the templates' reference costs (seconds of work one completion stands
        for, e.g. :func:`reference_costs` of the reference configuration's samples), so a
        4-minute query counts 240 times a 1-s one instead of once. ``None`` when a template
        that completed in this sample has no cost, or the sample has no duration.
        """
        if self.seconds <= 0:
            return None
        total = 0.0
        for query, stats in self.per_query.items():
            if stats.completed == 0:
                continue
            cost = costs.get(query)
            if cost is None:
                return None
            total += stats.completed * cost
        return total / self.seconds


def reference_costs(samples: Iterable[Sample]) -> dict[str, float]:
    """Each template's mean latency over ``samples`` pooled (completions-weighted): the
    reference cost of :meth:`Sample.work_per_s`. Templates without a completion are absent."""
    count: dict[str, int] = {}
    busy: dict[str, float] = {}
    for sample in samples:
        for query, stats in sample.per_query.items():
            if stats.completed and stats.mean is not None:
                count[query] = count.get(query, 0) + stats.completed
                busy[query] = busy.get(query, 0.0) + stats.completed * stats.mean
    return {q: busy[q] / n for q, n in count.items() if busy[q] > 0}


def progress_credit(start: float, end: float, finished: Iterable[tuple[float, float]],
                    running: Iterable[tuple[float, float | None]]) -> float:
    """Queries' worth of work done inside the window [``start``, ``end``]: each finished
    query (``(started, ended)``, ended inside the window) credited with the share of its run
    time inside the window, each query still running at ``end`` (``(started, expected
    duration or None)``) with its elapsed part of ``max(elapsed, expected)``.

    In a closed loop every stream's credits add up to the window's length over its queries'
    durations, so the expectation equals the count of completions while the ends of the
    window no longer decide whether a long query counts 0 or 1.
    """
    credit = 0.0
    for started, ended in finished:
        if ended > started:
            credit += (ended - max(started, start)) / (ended - started)
        else:
            credit += 1.0
    for started, expected in running:
        elapsed = end - started
        if elapsed <= 0:
            continue
        credit += (end - max(started, start)) / max(elapsed, expected or 0.0)
    return credit


def percentile(sorted_values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) with linear interpolation; None for no values."""
    if not sorted_values:
        return None
    if len(sorted_values) == 1:
        return sorted_values[0]
    rank = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(rank)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (rank - lo)


def summarize(
    completions: Iterable[tuple[str, float]],
    errors: Iterable[str],
    seconds: float,
    queries: Iterable[str] = (),
    mix: str = "",
    concurrency: Mapping[str, int] | None = None,
) -> Sample:
    """Build a Sample from (query, latency) completions and failed query names.

    ``concurrency`` (streams per query) enables the latency-based estimate.
    """
    latencies: dict[str, list[float]] = {q: [] for q in queries}
    error_counts: dict[str, int] = {q: 0 for q in latencies}
    for query, latency in completions:
        latencies.setdefault(query, []).append(latency)
    for query in errors:
        error_counts[query] = error_counts.get(query, 0) + 1
        latencies.setdefault(query, [])
    per_query: dict[str, QueryStats] = {}
    for query, values in latencies.items():
        values.sort()
        per_query[query] = QueryStats(
            completed=len(values),
            errors=error_counts.get(query, 0),
            qpm=len(values) * 60.0 / seconds if seconds > 0 else 0.0,
            p50=percentile(values, 50),
            p95=percentile(values, 95),
            p99=percentile(values, 99),
            mean=sum(values) / len(values) if values else None,
        )
    completed = sum(s.completed for s in per_query.values())
    estimate = None
    if concurrency:
        means = [(n, per_query[q].mean if q in per_query else None)
                 for q, n in concurrency.items()]
        if all(m is not None and m > 0 for _, m in means):
            estimate = 60.0 * sum(n / m for n, m in means if m)
    return Sample(
        seconds=seconds,
        completed=completed,
        errors=sum(s.errors for s in per_query.values()),
        qpm=completed * 60.0 / seconds if seconds > 0 else 0.0,
        per_query=per_query,
        mix=mix,
        concurrency_qpm=estimate,
    )
