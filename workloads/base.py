"""The interface every workload driver offers the tuner: start, take a sample, stop."""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from types import TracebackType
from typing import Protocol, Self

import psycopg
from psycopg.rows import TupleRow

from workloads.sample import Sample

logger = logging.getLogger(__name__)


class Workload(ABC):
    """A running load on the database that throughput samples can be taken from.

    Used as a context manager, it is started on entry and stopped on exit.
    """

    #: the shortest fixed-work window the tuner's measurer keeps for this workload: one
    #: shorter is taken again as a time window this long, and so are the run's later ones
    #: (0: fixed work as asked; see :class:`workloads.pgbench.PgbenchWorkload`)
    MIN_WINDOW_S: float = 0.0

    @abstractmethod
    def start(self) -> None:
        """Start the load (threads, connections or a subprocess)."""

    @abstractmethod
    def sample(self, seconds: float | None = None, *, queries: int | None = None,
               timeout_s: float | None = None, since: float | None = None,
               every_query: bool = False) -> Sample:
        """Measure over a time window (``seconds``) or a fixed number of completions.

        ``since`` (``time.monotonic()``): work started before it does not count (it ran
        under an earlier configuration). ``every_query``: a fixed-work sample also waits for
        one completion of every query of the mix (for :attr:`Sample.concurrency_qpm`).
        """

    @abstractmethod
    def stop(self) -> None:
        """Stop the load promptly; stopping twice is harmless."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class Cancellable(Protocol):
    """A client thread whose running query another thread can cancel."""

    name: str

    def cancel(self) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...

    def is_alive(self) -> bool: ...


def cancel_and_join(threads: Sequence[Cancellable], timeout_s: float) -> list[str]:
    """Cancel the threads' running queries and join them, re-cancelling stragglers until
    ``timeout_s`` has passed; the names of the threads still alive then."""
    deadline = time.monotonic() + timeout_s
    pending = [t for t in threads if t.is_alive()]
    while pending and time.monotonic() < deadline:
        for thread in pending:
            thread.cancel()
        for thread in pending:
            thread.join(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
        pending = [t for t in pending if t.is_alive()]
    return [t.name for t in pending]


def cancel_running(conn: psycopg.Connection[TupleRow] | None, name: str) -> None:
    """Ask the server to cancel ``conn``'s running query, if any; safe from another thread
    (a failure is logged at debug level: the query may just have finished)."""
    if conn is None or conn.closed:
        return
    try:
        conn.cancel_safe(timeout=2.0)
    except (psycopg.Error, OSError) as exc:
        logger.debug("cancelling %s failed: %s", name, exc)
