"""Collecting query completions into sample windows over a time span or a fixed amount of
work.

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
from dataclasses import dataclass, field, replace

from harmony_base.errors import WorkloadError
from workloads.sample import Sample, progress_credit, summarize

#: completions per query whose mean is a running query's expected duration (no completion of
#: that query in the window)
RECENT = 8


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
        _check_sample_request(seconds, queries)
        if self._stopped.is_set():
            raise WorkloadError("the workload is stopped; start it before sampling")
        streams = dict(concurrency()) if concurrency is not None else {}
        every = frozenset(streams) if every_query and queries is not None else frozenset()
        window = self._open_window(seconds, queries, since, every)
        running, reported, recent = self._wait_and_close(window, seconds, queries, timeout_s)
        _check_finished(window, queries)
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

    def _open_window(self, seconds: float | None, queries: int | None, since: float | None,
                     every: frozenset[str]) -> _Window:
        """A window the completions from now on land in: timed, or of ``queries`` work."""
        if seconds is not None:
            window = _Window(start=time.monotonic(), target=None, since=since)
        else:
            window = _Window(start=None, target=queries, since=since, every=every)
        with self._lock:
            if seconds is not None:
                window.start = time.monotonic()
            self._windows.append(window)
        return window

    def _wait_and_close(self, window: _Window, seconds: float | None, queries: int | None,
                        timeout_s: float | None
                        ) -> tuple[list[tuple[str, float]], bool, dict[str, float]]:
        """Wait until the window's seconds pass or its work is done, then close it; returns
        the queries still running at its end (started after its ``since``), whether drivers
        report starts, and each query's recent mean latency."""
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
        return running, reported, recent


def _check_sample_request(seconds: float | None, queries: int | None) -> None:
    """Exactly one of a positive window in seconds or a positive number of queries."""
    if (seconds is None) == (queries is None):
        raise WorkloadError("a sample needs exactly one of seconds=... or queries=...")
    if seconds is not None and not (math.isfinite(seconds) and seconds > 0):
        raise WorkloadError(f"a sample window must be > 0 seconds, but got {seconds!r}")
    if queries is not None and (
        isinstance(queries, bool) or not isinstance(queries, int) or queries < 1
    ):
        raise WorkloadError(f"a fixed-work sample needs queries >= 1, but got {queries!r}")


def _check_finished(window: _Window, queries: int | None) -> None:
    """A fixed-work window must have its work done: not failed, not cut short by a stop."""
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
