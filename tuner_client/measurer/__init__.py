"""Measuring one configuration: apply it safely, warm up, take throughput samples.

Online knobs go through :func:`tuner_client.knobs.apply.apply_online_knobs` (verified in a fresh
session); offline knobs through the controller's restart with rollback, the workload
stopped meanwhile. Each throughput sample comes from the workload driver (completed queries
per minute) with the ``pg_stat_database`` deltas beside it (transactions, buffer hits and
reads — the Buffer Miss Equation prior's input — and temp-file bytes). A point that the
memory budget forbids is never applied.

Live mode (``workload: {observe: ...}``) samples the application's own traffic instead
(:mod:`workloads.observe`), scores each window statement by statement against the original
configuration (estimator ``latency``, :mod:`tuner_client.stats.mix`) and lets the guardrails
(:mod:`tuner_client.measurer.guardrails`) restore the last good configuration within a sample.

One module per job: :mod:`~tuner_client.measurer.connection` (the admin connection),
:mod:`~tuner_client.knobs.in_force` (the settings in force),
:mod:`~tuner_client.measurer.applying` (apply, restart with rollback, restore),
:mod:`~tuner_client.measurer.sampling` (warm-up, samples, the point's window),
:mod:`~tuner_client.measurer.estimators` (a sample's value, the aggregate),
:mod:`~tuner_client.measurer.counters` (``pg_stat_database``),
:mod:`~tuner_client.measurer.reference` (reference and live-mix learning),
:mod:`~tuner_client.measurer.trips` (guardrail trips),
:mod:`~tuner_client.measurer.server_process` (the server's CPU time and memory),
:mod:`~tuner_client.measurer.records` (what is recorded), composed by
:class:`~tuner_client.measurer.measurer.Measurer` from the typed parts in
:mod:`~tuner_client.measurer.options`.
"""

from tuner_client.measurer.applying import ApplyOutcome
from tuner_client.measurer.counters import (
    StatsDelta,
    StatsSnapshot,
    read_database_stats,
    stats_delta,
)
from tuner_client.measurer.estimators import (
    CPU_ESTIMATORS,
    ESTIMATORS,
    REFERENCE_ESTIMATORS,
    WORK_ESTIMATORS,
    aggregate,
    objective_unit,
)
from tuner_client.measurer.measurer import Measurer
from tuner_client.measurer.options import ApplyHooks, LiveWatch, Restarter, ServerAccess
from tuner_client.measurer.records import PointRecord, SampleRecord
from tuner_client.measurer.sampling import POINT_FLUSH_WAIT_S
from workloads.base import Workload

__all__ = [
    "CPU_ESTIMATORS",
    "ESTIMATORS",
    "POINT_FLUSH_WAIT_S",
    "REFERENCE_ESTIMATORS",
    "WORK_ESTIMATORS",
    "ApplyHooks",
    "ApplyOutcome",
    "LiveWatch",
    "Measurer",
    "PointRecord",
    "Restarter",
    "SampleRecord",
    "ServerAccess",
    "StatsDelta",
    "StatsSnapshot",
    "Workload",
    "aggregate",
    "objective_unit",
    "read_database_stats",
    "stats_delta",
]
