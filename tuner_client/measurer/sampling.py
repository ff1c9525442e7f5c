"""The measurer's windows on the configuration in force: warm-up, throughput samples with the
``pg_stat_database`` deltas and the server's CPU time beside them, and the point's whole
window.

Each sample's value is the configured estimator's (:mod:`tuner_client.measurer.estimators`);
in live mode the guardrails watch every sample and a trip restores the last good
configuration before the sample fails (:mod:`tuner_client.measurer.trips`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import psycopg

from harmony_base.errors import DatabaseError, GuardrailTrip
from tuner_client.config import MeasureConfig
from tuner_client.knobs.in_force import InForce
from tuner_client.measurer.connection import AdminConnection
from tuner_client.measurer.counters import (
    StatsDelta,
    StatsSnapshot,
    read_database_stats,
    stats_delta,
)
from tuner_client.measurer.estimators import sample_value
from tuner_client.measurer.records import SampleRecord
from tuner_client.measurer.reference import Reference
from tuner_client.measurer.server_cpu import CpuReading
from tuner_client.measurer.server_process import ServerProcess, cores_used
from tuner_client.measurer.traffic import Traffic
from tuner_client.measurer.trips import TripHandler
from workloads.sample import Sample

logger = logging.getLogger(__name__)

#: how long a point's counters are waited for when its samples counted no block access
POINT_FLUSH_WAIT_S = 1.5


@dataclass(frozen=True)
class _Opened:
    """The readings at a sample's start: the counters and the server's CPU time."""

    before: StatsSnapshot | None
    cpu: CpuReading | None
    cpu_started: float  # time.monotonic()


@dataclass
class SamplerParts:
    """The measurer's other parts a sampler reads: the workload, the admin connection, the
    server's processes, the settings in force, the reference and live mode's trip handler."""

    traffic: Traffic
    connection: AdminConnection
    server: ServerProcess
    in_force: InForce
    reference: Reference
    trips: TripHandler


class Sampler:
    """Takes samples under ``config`` (fixed work of ``measure.queries``, given
    ``sample_timeout_s``, or time windows of ``measure.seconds``)."""

    def __init__(self, config: MeasureConfig, parts: SamplerParts,
                 sample_timeout_s: float = 600.0) -> None:
        self.config = config
        self.parts = parts
        self.sample_timeout_s = sample_timeout_s
        #: the counters when the configuration in force started being measured
        self.point_start: StatsSnapshot | None = None
        #: the seconds of the latest warm-up (``measure.restart_warmup_s`` after a restart)
        self.last_warmup_s: float | None = None
        #: a fixed-work sample took less than the workload's MIN_WINDOW_S: the run's samples
        #: are time windows that long from then on
        self.short_work_s: float | None = None

    def warm_up(self, seconds: float | None = None) -> None:
        """Let caches settle under the workload (a discarded time window of ``seconds``,
        default ``measure.warmup_s``)."""
        seconds = self.config.warmup_s if seconds is None else seconds
        self.last_warmup_s = seconds
        if seconds > 0:
            self.parts.traffic.start()
            sample = self.parts.traffic.workload.sample(seconds=seconds)
            logger.info("warm-up %.1f s: %.0f qpm (discarded)", seconds, float(sample.qpm))
        self.point_start = None  # the next sample starts the point's window

    def point_window(self, wait_s: float = POINT_FLUSH_WAIT_S) -> StatsDelta | None:
        """The counters since the first sample under the configuration in force.

        Backends flush their statistics about once a second, so a window of fast queries
        may show no block access yet; the workload keeps running under the same
        configuration, so this waits up to ``wait_s`` for the counters to arrive.
        """
        if self.point_start is None:
            return None
        deadline = time.monotonic() + wait_s
        while True:
            now = self._read_stats("for the point's window")
            if now is None:
                return None
            delta = stats_delta(self.point_start, now)
            if delta is None or delta.blks_hit + delta.blks_read > 0 \
                    or time.monotonic() >= deadline or not self.parts.traffic.running:
                return delta
            time.sleep(0.2)

    def reference_samples(self, samples: int | None = None) -> tuple[list[Sample], list[object]]:
        """Warm up, then ``samples`` (default ``measure.samples``) samples of the
        configuration in force, and the live workload's observed window beside each;
        fixed-work samples also wait for one completion of every query of the mix."""
        workload = self.parts.traffic.workload
        self.parts.traffic.start()
        self.warm_up()
        taken: list[Sample] = []
        observed = []
        for _ in range(samples or self.config.samples):
            taken.append(self._window(every_query=True))
            observed.append(getattr(workload, "last_window", None))
        self.point_start = None
        return taken, observed

    def sample(self) -> SampleRecord:
        """One throughput sample (fixed work or a time window) with the counters' deltas
        and the server's CPU time; ``qpm`` holds the configured estimator's value."""
        opened = self._open()
        try:
            got = self._take()
        except GuardrailTrip as trip:
            self.parts.trips.tripped(trip)
            raise
        self.parts.trips.sample_finished()
        return self._record(opened, got)

    def _open(self) -> _Opened:
        self.parts.traffic.start()
        before = self._read_stats("before the sample")
        if self.point_start is None:
            self.point_start = before
        return _Opened(before, self.parts.server.read_cpu(), time.monotonic())

    def _take(self) -> Sample:
        latency = self.config.estimator == "concurrency"
        # the latency estimate counts only queries started under this configuration
        since = self.parts.in_force.applied_at if latency else None
        return self._window(since=since, every_query=latency)

    def _window(self, *, since: float | None = None, every_query: bool = False) -> Sample:
        """One sample: ``measure.queries`` completions (a time window of the workload's
        ``MIN_WINDOW_S`` once such a sample took less), else ``measure.seconds``."""
        workload = self.parts.traffic.workload
        if self.config.queries is None:
            return workload.sample(seconds=self.config.seconds, since=since)
        if self.short_work_s is None:
            got = workload.sample(queries=self.config.queries, timeout_s=self.sample_timeout_s,
                                  since=since, every_query=every_query)
            least = workload.MIN_WINDOW_S
            if got.seconds >= least:
                return got
            self.short_work_s = least
            logger.info("%d queries took %.2f s, under the workload's %g s: this run's "
                        "samples are %g-s windows", got.completed, got.seconds, least, least)
        return workload.sample(seconds=self.short_work_s, since=since)

    def _record(self, opened: _Opened, got: Sample) -> SampleRecord:
        parts = self.parts
        server_cpu, cpu_source = cores_used(opened.cpu, parts.server.read_cpu(),
                                            time.monotonic() - opened.cpu_started)
        work = parts.reference.work_per_s(got)
        per_cpu = work / server_cpu if work is not None and server_cpu else None
        value = sample_value(self.config.estimator, got, work=work, per_cpu=per_cpu,
                             server_cpu=server_cpu,
                             live_speed=lambda: parts.reference.live_speed(
                                 got, parts.trips.at_original))
        delta = None
        if opened.before is not None:
            after = self._read_stats("after the sample")
            delta = stats_delta(opened.before, after) if after is not None else None
        return SampleRecord(qpm=value, completed=int(got.completed), errors=int(got.errors),
                            seconds=float(got.seconds), stats=delta, count_qpm=float(got.qpm),
                            concurrency_qpm=got.concurrency_qpm,
                            estimator=self.config.estimator, work_per_s=work,
                            server_cpu=server_cpu, cpu_source=cpu_source, work_per_cpu=per_cpu,
                            per_query={q: (st.completed, st.mean)
                                       for q, st in got.per_query.items()},
                            per_statement=dict(got.per_statement),
                            progress_qpm=got.progress_qpm)

    def _read_stats(self, when: str) -> StatsSnapshot | None:
        """The database's counters now, or None (logged) when they cannot be read."""
        try:
            return read_database_stats(self.parts.connection.get())
        except (DatabaseError, psycopg.Error) as exc:
            logger.warning("pg_stat_database not readable %s: %s", when, exc)
            return None
