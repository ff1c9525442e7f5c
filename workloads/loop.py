"""A small closed-loop workload: ``streams`` threads each run statements drawn by a function of
a random generator (e.g. seq scans of a random table, or skewed key lookups) back to back.

For experiments and tests that need a workload with a known access pattern; the TPC-H driver
and pgbench cover the shipped workloads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import psycopg

from harmony_base.errors import WorkloadError
from workloads.base import Workload
from workloads.sample import Sample, summarize

logger = logging.getLogger(__name__)

#: a statement and its parameters, drawn from the stream's generator
Statement = tuple[str, Sequence[object]]


class StatementLoop(Workload):
    """``streams`` threads, each running ``draw(rng)``'s statement, then the next, until stopped.

    Every completion counts as one query (label ``loop``) in the samples.
    """

    LABEL = "loop"

    def __init__(self, dsn: str, draw: Callable[[np.random.Generator], Statement], *,
                 streams: int = 2, seed: int = 0) -> None:
        if streams < 1:
            raise WorkloadError(f"a statement loop needs streams >= 1, but got {streams}")
        self.dsn, self.draw, self.streams, self.seed = dsn, draw, streams, seed
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._done: list[tuple[float, float]] = []  # (finished at, latency)
        self._errors = 0
        self._round = 0

    def start(self) -> None:
        if self._threads:
            return
        self._stop.clear()
        self._round += 1
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True,
                                          name=f"loop-{i}") for i in range(self.streams)]
        for thread in self._threads:
            thread.start()

    def _run(self, index: int) -> None:
        rng = np.random.default_rng([self.seed, self._round, index])
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self._stop.is_set():
                    text, params = self.draw(rng)
                    started = time.monotonic()
                    try:
                        conn.execute(text.encode(), params, prepare=True)
                    except psycopg.Error as exc:
                        logger.debug("loop stream %d: %s", index, exc)
                        with self._lock:
                            self._errors += 1
                        continue
                    now = time.monotonic()
                    with self._lock:
                        self._done.append((now, now - started))
        except psycopg.Error as exc:
            logger.warning("loop stream %d ended: %s", index, exc)

    def sample(self, seconds: float | None = None, *, queries: int | None = None,
               timeout_s: float | None = None, since: float | None = None,
               every_query: bool = False) -> Sample:
        """Completions over a ``seconds`` window (fixed-work samples are not offered)."""
        if seconds is None or queries is not None:
            raise WorkloadError("a statement loop samples time windows only (seconds=...)")
        if not self._threads:
            raise WorkloadError("the statement loop is not running; call start() first")
        with self._lock:
            errors0 = self._errors
        t0 = time.monotonic()
        time.sleep(seconds)
        t1 = time.monotonic()
        with self._lock:
            window = [lat for at, lat in self._done if t0 <= at < t1]
            errors = self._errors - errors0
            self._done = [d for d in self._done if d[0] >= t1]
        return summarize([(self.LABEL, lat) for lat in window], [self.LABEL] * errors,
                         t1 - t0, (self.LABEL,), "loop")

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads = []
