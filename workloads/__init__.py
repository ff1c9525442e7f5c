"""Workloads the tuner measures: TPC-H query mixes and schedules, and pgbench.

The tuner's interface is :class:`Workload`: ``start()`` / ``sample(seconds | queries=)`` /
``stop()``, offered by :class:`WorkloadDriver`, :class:`ScheduledDriver` and
:class:`PgbenchWorkload`.
"""

from workloads.base import Workload
from workloads.driver import WorkloadDriver
from workloads.mix import Mix, parse_mix
from workloads.pgbench import PgbenchWorkload
from workloads.sample import QueryStats, Sample
from workloads.schedule import Schedule, ScheduledDriver, parse_schedule
from workloads.tpch.load import LoadResult, load_tpch

__all__ = [
    "LoadResult",
    "Mix",
    "PgbenchWorkload",
    "QueryStats",
    "Sample",
    "Schedule",
    "ScheduledDriver",
    "Workload",
    "WorkloadDriver",
    "load_tpch",
    "parse_mix",
    "parse_schedule",
]
