"""What a sample's value is: the estimators of throughput, their units, and the aggregate.

Pure functions of a workload :class:`~workloads.sample.Sample` and the readings beside it;
the measurer's parts supply the reference costs, the live mix's speed and the CPU time.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable

from harmony_base.errors import ConfigError, WorkloadError
from workloads.sample import Sample

logger = logging.getLogger(__name__)

#: what a sample's value (``SampleRecord.qpm``) is, per ``measure.estimator``
ESTIMATORS: dict[str, str] = {
    "count": "completed queries per minute",
    "concurrency": "streams / mean latency per query, per minute (Little's law)",
    "progress": "queries per minute, each query credited with the share of its run time inside "
                "the window (a query still running at the end by its elapsed part of its "
                "expected duration): the count without the counting noise at the window's "
                "ends (TPC-H and replayed workloads)",
    "work": "reference-seconds of work completed per second (each completion credited with "
            "its template's mean latency under the original configuration)",
    "work_per_cpu": "reference-seconds of work per CPU-second of the PostgreSQL server",
    "count_per_cpu": "completed queries per minute per core of the PostgreSQL server (its CPU "
                     "seconds over the window): the lowest CV at equal time on a saturated "
                     "machine (benchmarks: 3.1 % at 30 s, against 9.0 % for count), but blind "
                     "to a knob that changes how many cores the server uses",
    "latency": "live traffic's speed relative to the reference configuration: the reference's "
               "statement mix timed at this window's per-statement mean latencies, inverted "
               "(1.0 = as fast as the original configuration; see tuner_client.stats.mix)",
}
#: the estimators that credit completions with the reference configuration's costs
WORK_ESTIMATORS = frozenset({"work", "work_per_cpu"})
#: the estimators that measure the original configuration first (``Measurer.learn_reference``)
REFERENCE_ESTIMATORS = WORK_ESTIMATORS | {"latency"}
#: the estimators that divide by the server's CPU time (a local server only)
CPU_ESTIMATORS = frozenset({"work_per_cpu", "count_per_cpu"})


def check_estimator(estimator: str) -> None:
    """Raise :class:`ConfigError` unless ``estimator`` is one of :data:`ESTIMATORS`."""
    if estimator not in ESTIMATORS:
        raise ConfigError(f"measure.estimator must be one of {sorted(ESTIMATORS)}, but "
                          f"got {estimator!r}")


def objective_unit(estimator: str, workload: str) -> str:
    """The unit of a measured value under ``estimator`` for a workload of kind ``workload``
    (``tpch``, ``pgbench``, ``scripts``, ``replay``, ``observe``), as the outputs print it."""
    completions = "transactions/min" if workload in ("pgbench", "scripts") else "queries/min"
    return {"latency": "x the original's speed",
            "work": "reference-cost seconds/s",
            "work_per_cpu": "reference-cost seconds per server CPU-second",
            "count_per_cpu": f"{completions} per server CPU"}.get(estimator, completions)


def aggregate(values: list[float], how: str) -> float:
    """Best (max throughput), median or mean of the samples."""
    if not values:
        raise ConfigError("cannot aggregate zero samples")
    if how == "best":
        return max(values)
    if how == "median":
        return float(statistics.median(values))
    if how == "mean":
        return float(statistics.fmean(values))
    raise ConfigError(f"measure.aggregate must be best, median or mean, got {how!r}")


def sample_value(estimator: str, got: Sample, *, work: float | None, per_cpu: float | None,
                 server_cpu: float | None, live_speed: Callable[[], float]) -> float:
    """The value of sample ``got`` under ``estimator``: ``work`` (reference-seconds per
    second) and ``per_cpu`` (the same per server CPU-second) when known, ``server_cpu`` the
    cores the server used; ``live_speed`` is asked only by the ``latency`` estimator.

    Raises :class:`WorkloadError` naming the estimator when this sample cannot give it.
    """
    if estimator == "concurrency":
        if got.concurrency_qpm is not None:
            return float(got.concurrency_qpm)
        logger.warning("no completion of some query of the mix in a %.1f-s window: counted "
                       "throughput used for this sample (lengthen measure.seconds)", got.seconds)
    elif estimator in WORK_ESTIMATORS:
        chosen = work if estimator == "work" else per_cpu
        if chosen is None:
            why = ("no reference cost" if work is None
                   else "the server's CPU time is not readable (not a local server?)")
            raise WorkloadError(f"measure.estimator {estimator}: {why} for this sample; "
                                f"use measure.estimator count or work")
        return float(chosen)
    elif estimator == "latency":
        return live_speed()
    elif estimator == "progress":
        if got.progress_qpm is None:
            raise WorkloadError("measure.estimator progress: this workload's driver does not "
                                "report when queries start (pgbench, scripts and live "
                                "observation); use measure.estimator count")
        return float(got.progress_qpm)
    elif estimator == "count_per_cpu":
        if not server_cpu:
            raise WorkloadError("measure.estimator count_per_cpu: the server's CPU time is "
                                "not readable for this sample; use measure.estimator count")
        return float(got.qpm) / server_cpu
    return float(got.qpm)
