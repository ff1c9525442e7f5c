"""Throughput samples: counting completed queries over a time window or a fixed amount of work.

Streams report each finished query to a :class:`Recorder`; a sample opens a window on the
recorder and collects the completions that fall into it. Completion times are taken under
the recorder's lock, so every completion lands in a window or outside it, never both and
never twice.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from harmony.base.errors import WorkloadError

#: completions per query whose mean is a running query's expected duration (no completion of
#: that query in the window)
RECENT = 8


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

    def to_dict(self) -> dict[str, Any]:
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


@dataclass
class _Window:
    start: float | None  # None until the first completion marks the start (fixed work)
    target: int | None
    completions: list[tuple[str, float]] = field(default_factory=list)  # (query, latency)
    errors: list[str] = field(default_factory=list)
    end: float | None = None
    done: threading.Event = field(default_factory=threading.Event)
    #: fixed work only: failed queries since the sample began (before the start mark too)
    failed: int = 0
    #: queries that started before this moment ran under an earlier configuration: ignored
    since: float | None = None
    #: fixed work also waits for one completion of each of these queries
    every: frozenset[str] = frozenset()
    #: (started, ended) of each completion counted, for :func:`progress_credit`
    spans: list[tuple[float, float]] = field(default_factory=list)

    def complete(self) -> bool:
        if self.target is None or len(self.completions) < self.target:
            return False
        return not self.every or self.every <= {q for q, _ in self.completions}


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


class Recorder:
    """Collects completions from all streams and serves samples; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._windows: list[_Window] = []
        self.total_completed = 0
        self.total_errors = 0
        self._stopped = threading.Event()
        #: the queries running now, by the token :meth:`begin` gave: (query, started)
        self._running: dict[int, tuple[str, float]] = {}
        self._tokens = 0
        #: the latest completions' latencies per query (the expected duration of a running
        #: instance when the window has none of its own: recent, so under the configuration
        #: in force rather than averaged over earlier ones)
        self._latency: dict[str, deque[float]] = {}

    def begin(self, query: str) -> tuple[int, float]:
        """Report that an instance of ``query`` starts now; returns its token (for
        :meth:`record`) and its monotonic start time. Drivers that report starts give the
        samples their ``progress_qpm``."""
        with self._lock:
            self._tokens += 1
            started = time.monotonic()
            self._running[self._tokens] = (query, started)
            return self._tokens, started

    def forget(self, token: int) -> None:
        """A query reported by :meth:`begin` ends without a result (its stream stopped)."""
        with self._lock:
            self._running.pop(token, None)

    def record(self, query: str, started: float, ok: bool, token: int | None = None) -> None:
        """Report that one instance of ``query``, started at monotonic ``started``, ended
        (``token``: what :meth:`begin` returned for it, if it was reported)."""
        with self._lock:
            now = time.monotonic()
            if token is not None:
                self._running.pop(token, None)
            if ok:
                self.total_completed += 1
                self._latency.setdefault(query, deque(maxlen=RECENT)).append(now - started)
            else:
                self.total_errors += 1
            for window in self._windows:
                if window.done.is_set():
                    continue
                if window.since is not None and started < window.since:
                    continue  # ran (at least partly) under the previous configuration
                if window.target is not None and not ok:
                    window.failed += 1
                    if window.failed >= window.target:
                        # as many failures as the work asked for: the server is not serving
                        # this configuration (crash loop, OOM kills); waiting is pointless
                        window.done.set()
                if window.start is None:
                    if ok:  # fixed work: the first completion marks the start, uncounted
                        window.start = now
                    continue
                if ok:
                    window.completions.append((query, now - started))
                    window.spans.append((started, now))
                    if window.complete():
                        window.end = now
                        window.done.set()
                else:
                    window.errors.append(query)

    def stop(self) -> None:
        """Wake any waiting sample: no more completions will come."""
        self._stopped.set()
        with self._lock:
            for window in self._windows:
                window.done.set()

    def reset(self) -> None:
        """Allow sampling again after :meth:`stop` (a restarted driver)."""
        self._stopped.clear()
        with self._lock:
            self._running.clear()

    def sample(
        self,
        seconds: float | None = None,
        *,
        queries: int | None = None,
        timeout_s: float | None = None,
        labels: Callable[[], tuple[Iterable[str], str]] = lambda: ((), ""),
        since: float | None = None,
        every_query: bool = False,
        concurrency: Callable[[], Mapping[str, int]] | None = None,
    ) -> Sample:
        """A time-window sample (``seconds``) or a fixed-work sample (``queries``).

        Fixed work: the first completion after the call marks the start (it is not counted,
        because the work before it began before the call); the sample then counts the next
        ``queries`` completions and is timed from the mark to the last of them.
        ``labels`` gives the query names to always report and the mix label.
        ``since`` (monotonic): queries started before it are ignored, e.g. the moment a new
        configuration took effect (a running query keeps the settings it started with).
        ``every_query``: fixed work also waits for one completion of every query of
        ``concurrency()`` (streams per query), so that the latency-based estimate exists.
        """
        if (seconds is None) == (queries is None):
            raise WorkloadError("a sample needs exactly one of seconds=... or queries=...")
        if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
            raise WorkloadError(f"a sample window must be > 0 seconds, but got {seconds!r}")
        if queries is not None and (
            isinstance(queries, bool) or not isinstance(queries, int) or queries < 1
        ):
            raise WorkloadError(f"a fixed-work sample needs queries >= 1, but got {queries!r}")
        if self._stopped.is_set():
            raise WorkloadError("the workload is stopped; start it before sampling")
        streams = dict(concurrency()) if concurrency is not None else {}
        every = frozenset(streams) if every_query and queries is not None else frozenset()
        if seconds is not None:
            window = _Window(start=time.monotonic(), target=None, since=since)
        else:
            window = _Window(start=None, target=queries, since=since, every=every)
        with self._lock:
            if seconds is not None:
                window.start = time.monotonic()
            self._windows.append(window)
        try:
            if seconds is not None:
                window.done.wait(seconds)
            elif not window.done.wait(timeout_s):
                raise WorkloadError(
                    f"a fixed-work sample of {queries} queries did not finish within "
                    f"{timeout_s} s ({len(window.completions)} completed, "
                    f"{len(window.errors)} errors); check the streams' errors in the log"
                )
        finally:
            with self._lock:
                self._windows.remove(window)
                if window.end is None:
                    window.end = time.monotonic()
                running = [(q, t) for q, t in self._running.values() if t < window.end
                           and (window.since is None or t >= window.since)]
                reported = bool(self._tokens)
                recent = {q: sum(v) / len(v) for q, v in self._latency.items() if v}
        if queries is not None and not window.complete() and window.failed >= queries:
            raise WorkloadError(
                f"{window.failed} queries failed before the fixed-work sample of {queries} "
                f"queries finished ({len(window.completions)} completed): the server is not "
                f"serving the workload (crashed or killed backends?); see the streams' errors "
                f"in the log"
            )
        if queries is not None and not window.complete():
            raise WorkloadError(
                f"the workload stopped before the fixed-work sample of {queries} queries "
                f"finished ({len(window.completions)} completed)"
            )
        assert window.start is not None and window.end is not None
        names, mix = labels()
        got = summarize(
            window.completions, window.errors, window.end - window.start, names, mix,
            concurrency=streams or None,
        )
        if not reported or got.seconds <= 0:
            return got

        def expected(query: str) -> float | None:  # this window's mean, else the latest
            stats = got.per_query.get(query)
            if stats is not None and stats.mean is not None:
                return stats.mean
            return recent.get(query)

        credit = progress_credit(window.start, window.end, window.spans,
                                 [(t, expected(q)) for q, t in running])
        return replace(got, progress_qpm=credit * 60.0 / got.seconds)
