"""The interface every workload driver offers the tuner: start, take a sample, stop."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

from workloads.sample import Sample


class Workload(ABC):
    """A running load on the database that throughput samples can be taken from.

    Used as a context manager, it is started on entry and stopped on exit.
    """

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
