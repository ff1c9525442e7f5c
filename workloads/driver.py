"""The workload driver the tuner measures with: start a TPC-H mix, sample throughput, stop.

Each stream of the mix is a thread with its own connection looping its query with fresh
parameters (:mod:`workloads.stream`); samples come from a shared recorder
(:mod:`workloads.sample`). Query results stay inside libpq, so the Python side costs a
small fraction of a core.
"""

from __future__ import annotations

import logging
import math
import threading

from harmony_base.errors import WorkloadError
from workloads.base import Workload, cancel_and_join
from workloads.connect import connect, describe_dsn
from workloads.mix import Mix, MixSpec, parse_mix
from workloads.recorder import Recorder
from workloads.sample import QueryStats, Sample
from workloads.stream import QueryStream
from workloads.tpch.load import loaded_scale

__all__ = ["QueryStats", "Sample", "StreamSet", "WorkloadDriver", "check_tpch_database"]

logger = logging.getLogger(__name__)

STOP_TIMEOUT_S = 10.0


def check_tpch_database(dsn: str) -> float:
    """The scale factor of the TPC-H data in ``dsn``; raise if unreachable or not loaded."""
    with connect(dsn) as conn:
        scale = loaded_scale(conn)
    if scale is None:
        raise WorkloadError(
            f"{describe_dsn(dsn)} holds no finished TPC-H load; run "
            "`harmony tpch load --dsn ... --scale ...` first"
        )
    return scale


def _check_timeout(statement_timeout_s: float | None) -> None:
    if statement_timeout_s is not None and not (
        math.isfinite(statement_timeout_s) and statement_timeout_s > 0
    ):
        raise WorkloadError(
            f"statement_timeout_s must be > 0 seconds or None, but got {statement_timeout_s!r}"
        )


class StreamSet:
    """The running streams of one mix; stopping cancels their queries and joins them."""

    def __init__(
        self,
        dsn: str,
        mix: Mix,
        *,
        seed: int,
        scale: float,
        recorder: Recorder,
        statement_timeout_s: float | None,
    ) -> None:
        self.mix = mix
        self._stop_event = threading.Event()
        self.streams = [
            QueryStream(
                dsn, query, index,
                seed=seed, scale=scale, recorder=recorder,
                stop_event=self._stop_event, statement_timeout_s=statement_timeout_s,
            )
            for query, count in mix
            for index in range(count)
        ]  # fmt: skip

    def start(self) -> None:
        for stream in self.streams:
            stream.start()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Cancel running queries and join the threads (re-cancelling stragglers)."""
        self._stop_event.set()
        pending = cancel_and_join(self.streams, timeout_s)
        if pending:
            logger.warning("streams %s did not stop within %.1f s", pending, timeout_s)

    @property
    def reconnects(self) -> int:
        return sum(s.reconnects for s in self.streams)


class WorkloadDriver(Workload):
    """Runs a TPC-H mix against ``dsn`` and measures its throughput on request."""

    def __init__(
        self,
        dsn: str,
        mix: MixSpec,
        *,
        seed: int = 0,
        statement_timeout_s: float | None = None,
    ) -> None:
        self.dsn = dsn
        self.mix = parse_mix(mix)
        self.seed = seed
        _check_timeout(statement_timeout_s)
        self.statement_timeout_s = statement_timeout_s
        self.scale: float | None = None
        self._recorder = Recorder()
        self._streams: StreamSet | None = None

    @property
    def running(self) -> bool:
        return self._streams is not None

    @property
    def reconnects(self) -> int:
        """How many times a stream lost its connection and reconnected."""
        return self._streams.reconnects if self._streams else 0

    def start(self) -> None:
        """Check the database, then start one thread + connection per stream."""
        if self._streams is not None:
            raise WorkloadError("the workload driver is already running; stop() it first")
        self.scale = check_tpch_database(self.dsn)
        self._recorder.reset()
        self._streams = StreamSet(
            self.dsn, self.mix,
            seed=self.seed, scale=self.scale, recorder=self._recorder,
            statement_timeout_s=self.statement_timeout_s,
        )  # fmt: skip
        self._streams.start()
        logger.info(
            "started TPC-H mix %s (%d streams, scale %s) on %s",
            self.mix, self.mix.total_streams, self.scale, describe_dsn(self.dsn),
        )

    def sample(
        self,
        seconds: float | None = None,
        *,
        queries: int | None = None,
        timeout_s: float | None = None,
        since: float | None = None,
        every_query: bool = False,
    ) -> Sample:
        """Throughput over a ``seconds`` window, or over exactly ``queries`` completions.

        A fixed-work sample starts at the first completion after the call and ends at the
        ``queries``-th completion after that one; ``timeout_s`` bounds the wait.
        """
        if self._streams is None:
            raise WorkloadError("the workload driver is not running; call start() first")
        return self._recorder.sample(
            seconds, queries=queries, timeout_s=timeout_s,
            labels=lambda: (self.mix.queries, str(self.mix)),
            since=since, every_query=every_query, concurrency=lambda: dict(self.mix.streams),
        )  # fmt: skip

    def stop(self) -> None:
        """Cancel the running queries and join the stream threads; idempotent."""
        streams, self._streams = self._streams, None
        if streams is None:
            return
        self._recorder.stop()
        streams.stop()
        logger.info("stopped TPC-H mix %s", self.mix)

