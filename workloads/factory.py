"""The workload driver a ``workload:`` section names, and the connections it opens.

The tuner's ``WorkloadConfig`` sits above this package, so what is read of it is stated as a
protocol (:class:`WorkloadSpec`): the tuner passes its config section, a test a stand-in.
"""

from __future__ import annotations

from typing import Protocol

from harmony_base.errors import ConfigError
from workloads.base import Workload
from workloads.driver import WorkloadDriver
from workloads.mix import MixSpec, parse_mix
from workloads.observe import ObservedWorkload
from workloads.pgbench import PgbenchWorkload
from workloads.schedule import ScheduledDriver, ScheduleSpec, parse_schedule
from workloads.user_workload import UserWorkloadSpec, make_user_workload, user_workload_clients


class ObserveSpec(Protocol):
    """Live mode's part of the section: how often the observer polls."""

    @property
    def poll_s(self) -> float: ...


class WorkloadSpec(UserWorkloadSpec, Protocol):
    """What the factory reads of the tuner's ``WorkloadConfig``."""

    @property
    def scale(self) -> float: ...
    @property
    def mix(self) -> MixSpec | None: ...
    @property
    def schedule(self) -> ScheduleSpec | None: ...
    @property
    def observe(self) -> ObserveSpec | None: ...
    @property
    def builtin(self) -> str: ...


def make_workload(wl: WorkloadSpec, dsn: str, *, seed: int = 0) -> Workload:
    """The configured workload driver on ``dsn``: a TPC-H mix or schedule, pgbench, the
    user's scripts or a captured replay, or the live traffic (observe)."""
    if wl.observe is not None:
        return ObservedWorkload(dsn, poll_s=wl.observe.poll_s)
    if wl.kind in ("scripts", "replay"):
        return make_user_workload(wl, dsn, seed=seed)
    if wl.kind == "pgbench":
        return PgbenchWorkload(dsn, clients=wl.clients, scale=int(wl.scale), builtin=wl.builtin)
    if wl.schedule is not None:
        return ScheduledDriver(dsn, wl.schedule, seed=seed,
                               statement_timeout_s=wl.statement_timeout_s)
    return WorkloadDriver(dsn, tpch_mix(wl), seed=seed,
                          statement_timeout_s=wl.statement_timeout_s)


def stream_count(wl: WorkloadSpec) -> int:
    """Concurrent connections the workload opens (the budget's ``m`` when set to auto);
    0 for live traffic, whose connections the server's ``max_connections`` bounds. A replay
    without ``clients`` reads its file for the captured concurrency."""
    if wl.observe is not None:
        return 0
    if wl.kind in ("scripts", "replay"):
        return user_workload_clients(wl)
    if wl.kind == "pgbench":
        return wl.clients
    if wl.schedule is not None:
        schedule = parse_schedule(wl.schedule)
        return max(phase.mix.total_streams for phase in schedule.phases)
    return parse_mix(tpch_mix(wl)).total_streams


def tpch_mix(wl: WorkloadSpec) -> MixSpec:
    """The TPC-H workload's mix as written (a schedule-less TPC-H workload needs one)."""
    if wl.mix is None:
        raise ConfigError("workload.tpch needs a mix or a schedule, but has neither")
    return wl.mix
