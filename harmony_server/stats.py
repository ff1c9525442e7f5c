"""Plain counters and latency histograms kept by the server and its store.

They hold raw numbers only; the observability layer turns them into Prometheus metrics.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from dataclasses import dataclass, field

#: upper bounds (seconds) of the latency histogram buckets; the last bucket is +inf
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)


@dataclass
class LatencyHistogram:
    """Cumulative-friendly histogram of durations: per-bucket counts, total count and sum."""

    buckets: tuple[float, ...] = LATENCY_BUCKETS
    counts: list[int] = field(default_factory=list)
    count: int = 0
    total: float = 0.0
    maximum: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, seconds: float) -> None:
        """Record one duration."""
        index = bisect.bisect_left(self.buckets, seconds)
        with self._lock:
            self.counts[index] += 1
            self.count += 1
            self.total += seconds
            if seconds > self.maximum:
                self.maximum = seconds

    def quantile(self, q: float) -> float:
        """An upper estimate of the ``q`` quantile (the bound of the bucket that holds it)."""
        with self._lock:
            if self.count == 0:
                return 0.0
            rank = q * self.count
            seen = 0
            for bound, n in zip((*self.buckets, self.maximum), self.counts, strict=True):
                seen += n
                if seen >= rank:
                    return min(bound, self.maximum)
            return self.maximum

    def snapshot(self) -> HistogramSnapshot:
        """A consistent copy: bucket bounds, counts (non-cumulative), count, sum, max."""
        with self._lock:
            return HistogramSnapshot(tuple(self.buckets), tuple(self.counts), self.count,
                                     self.total, self.maximum)


@dataclass(frozen=True)
class HistogramSnapshot:
    """A :class:`LatencyHistogram` at one moment; ``counts`` has one more entry than
    ``buckets`` (the +inf bucket)."""

    buckets: tuple[float, ...]
    counts: tuple[int, ...]
    count: int
    sum: float
    max: float


@dataclass
class StoreStats:
    """What the durable store did: transactions written, rows, failures, write latency."""

    writes: int = 0
    commands: int = 0
    trial_rows: int = 0
    failures: int = 0
    write_latency: LatencyHistogram = field(default_factory=LatencyHistogram)


#: the server's supervised background tasks (label values of their metrics)
BACKGROUND_TASKS: tuple[str, ...] = ("lease_sweeper",)


@dataclass
class ServerStats:
    """Request and session counters of one server process."""

    requests: Counter[str] = field(default_factory=Counter)  # by route name
    errors: Counter[str] = field(default_factory=Counter)  # by error kind
    fetch_trials: int = 0
    fetch_waits: int = 0
    reports: int = 0
    duplicate_reports: int = 0
    leases_expired: int = 0
    #: errors a background task caught and survived (one session's step), by task
    background_errors: Counter[str] = field(default_factory=Counter)
    #: times a background task crashed and was started again, by task
    background_restarts: Counter[str] = field(default_factory=Counter)
    request_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    #: latency of the operations that carry the tuning load ("fetch", "report")
    route_latency: dict[str, LatencyHistogram] = field(default_factory=lambda: {
        "fetch": LatencyHistogram(), "report": LatencyHistogram()})
