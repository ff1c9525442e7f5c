"""The measurer: one server's configurations applied safely and measured, composed of its
parts (connection, applying, sampling, reference, guardrail trips, the server's processes).

The phases use :class:`Measurer` as one object; each method delegates to the part that does
the job, and the few that span parts (:meth:`Measurer.apply`, :meth:`Measurer.measure`,
:meth:`Measurer.learn_reference`) say in which order the parts act.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import psycopg
from psycopg.rows import TupleRow

from harmony_base.errors import GuardrailTrip, HarmonyError
from harmony_base.jsontypes import JSON
from tuner_client.config import MeasureConfig
from tuner_client.knobs.in_force import InForce
from tuner_client.measurer.applying import Applier, ApplyOutcome
from tuner_client.measurer.connection import AdminConnection
from tuner_client.measurer.counters import StatsDelta, no_blocks
from tuner_client.measurer.estimators import (
    CPU_ESTIMATORS,
    REFERENCE_ESTIMATORS,
    aggregate,
    check_estimator,
)
from tuner_client.measurer.guardrails import Guardrail
from tuner_client.measurer.options import ApplyHooks, LiveWatch, ServerAccess
from tuner_client.measurer.records import PointRecord, SampleRecord
from tuner_client.measurer.reference import Reference
from tuner_client.measurer.sampling import POINT_FLUSH_WAIT_S, Sampler, SamplerParts
from tuner_client.measurer.server_process import ServerProcess
from tuner_client.measurer.traffic import Traffic
from tuner_client.measurer.trips import TripHandler
from tuner_client.stats.mix import MixReference
from workloads.base import Workload

logger = logging.getLogger(__name__)


class Measurer:
    """Applies configurations to one server and measures the workload's throughput on it.

    ``in_force`` is the tuner's view of the tuned knobs' current values (PostgreSQL strings
    with units); :meth:`apply` changes only what differs. ``hooks.feasible`` (optional)
    refuses a configuration that breaks the memory budget before it reaches the server;
    ``live`` brings live mode's guardrails and statement-mix options.
    """

    def __init__(self, server: ServerAccess, workload: Workload, config: MeasureConfig, *,
                 hooks: ApplyHooks | None = None, live: LiveWatch | None = None,
                 sample_timeout_s: float = 600.0) -> None:
        check_estimator(config.estimator)
        live = live if live is not None else LiveWatch()
        self.catalog = server.catalog
        self.workload = workload
        self.connection = AdminConnection(server.dsn, server.restart_timeout_s)
        self.traffic = Traffic(workload)
        self.settings = InForce(server.catalog)
        self.server = ServerProcess(self.connection)
        self.applier = Applier(server, hooks if hooks is not None else ApplyHooks(),
                               self.settings, self.connection, self.traffic,
                               prewarm=config.prewarm)
        self.trips = TripHandler(live, self.settings, self.applier)
        self.reference = Reference(live)
        self.windows = Sampler(config, SamplerParts(self.traffic, self.connection, self.server,
                                                    self.settings, self.reference, self.trips),
                               sample_timeout_s)
        if live.guard is not None and hasattr(workload, "watch"):
            workload.watch = self.trips.watch

    # -- the parts' state, as the phases read it ---------------------------------------------
    @property
    def in_force(self) -> dict[str, str]:
        """The tuned knobs' values in force (assignable: the run's starting values)."""
        return self.settings.values

    @in_force.setter
    def in_force(self, values: dict[str, str]) -> None:
        self.settings.values = values

    @property
    def config(self) -> MeasureConfig:
        """The measurement protocol (assignable between points)."""
        return self.windows.config

    @config.setter
    def config(self, config: MeasureConfig) -> None:
        self.windows.config = config
        self.applier.prewarm = config.prewarm

    @property
    def guard(self) -> Guardrail | None:
        return self.trips.guard

    @property
    def mix_reference(self) -> MixReference | None:
        return self.reference.mix


    # -- connection and workload -------------------------------------------------------------
    def conn(self) -> psycopg.Connection[TupleRow]:
        """An autocommit admin connection to the workload's database (reopened if broken)."""
        return self.connection.get()

    def live_conn(self) -> psycopg.Connection[TupleRow]:
        """:meth:`conn`, checked with a round trip (a dropped connection is replaced)."""
        return self.connection.live()

    def current_settings(self, names: list[str]) -> dict[str, str]:
        """``current_setting()`` of each knob in a session of this connection's role/db."""
        return self.connection.current_settings(names)

    def server_memory(self) -> int | None:
        """The server's memory in bytes (Pss of its processes; None when not local)."""
        return self.server.memory()

    def start(self) -> None:
        self.traffic.start()

    def stop(self) -> None:
        self.traffic.stop()

    def close(self) -> None:
        self.traffic.stop()
        self.connection.close()

    # -- applying and measuring --------------------------------------------------------------
    def apply(self, settings: Mapping[str, str], *, check_budget: bool = True,
              warm_up: bool = True, prewarm: bool = True) -> ApplyOutcome:
        """Put ``settings`` in force (a restart when an offline knob changes); warm up
        (``warm_up=False``: not, e.g. for a buffer probe that measures from a cold buffer).

        With ``measure.prewarm`` a restart is warm: the buffer's blocks are loaded back
        (``prewarm=False``: not for this apply), and the warm-up after it is
        ``measure.warmup_s`` (for what prewarming cannot restore) instead of
        ``measure.restart_warmup_s``.

        Returns what happened; a failure leaves the server running with its last good
        configuration (the controller rolls back a restart that does not come up). The first
        call learns the reference first when the estimator needs one.
        """
        estimator = self.config.estimator
        if estimator in REFERENCE_ESTIMATORS and self.reference.costs is None:
            self.learn_reference()
        self.trips.before_first_apply()
        if estimator in CPU_ESTIMATORS and not self.server.cpu_checked:
            self.server.check_cpu_readable(estimator)
        outcome, restarted = self.applier.change(settings, check_budget=check_budget,
                                                 prewarm=prewarm)
        warm = outcome.prewarm is not None and outcome.prewarm.blocks > 0
        if warm_up and outcome.changed and outcome.failure is None:
            try:
                self.windows.warm_up(self.config.restart_warmup_s
                                     if restarted and not warm else None)
            except GuardrailTrip as trip:
                self.trips.tripped(trip)
                outcome.failure = f"sampling failed: {trip.reason}"
        return outcome

    def sample(self) -> SampleRecord:
        """One throughput sample of the configuration in force (see :class:`Sampler`)."""
        return self.windows.sample()

    def point_window(self, wait_s: float = POINT_FLUSH_WAIT_S) -> StatsDelta | None:
        """The counters since the first sample under the configuration in force."""
        return self.windows.point_window(wait_s)

    def measure(self, session: str, point: Mapping[str, JSON], settings: Mapping[str, str],
                samples: int | None = None, *, check_budget: bool = True) -> PointRecord:
        """Apply ``settings``, warm up and take ``samples`` samples; the aggregate is ``value``.

        Used for the final default-vs-best comparison and for monitoring, where the same
        protocol as the sessions' must hold but no session aggregates.
        """
        record = PointRecord(session=session, point=dict(point), settings=dict(settings))
        outcome = self.apply(settings, check_budget=check_budget)
        record.restart_s, record.apply_s, record.failure = (outcome.restart_s, outcome.apply_s,
                                                            outcome.failure)
        record.prewarm = outcome.prewarm.to_dict() if outcome.prewarm is not None else None
        # every tuned knob's value in force (what was refused leaves the previous values)
        record.in_force = dict(self.in_force)
        if outcome.failure is not None:
            return record
        if not outcome.changed:
            try:
                self.windows.warm_up()  # same protocol whether or not anything changed
            except GuardrailTrip as trip:
                self.trips.tripped(trip)
                record.failure = f"sampling failed: {trip.reason}"
                return record
        for _ in range(samples or self.config.samples):
            try:
                record.samples.append(self.sample())
            except HarmonyError as exc:
                record.failure = f"sampling failed: {exc}"
                return record
        record.value = aggregate([s.qpm for s in record.samples], self.config.aggregate)
        if record.stats_total() is None or no_blocks(record.stats_total()):
            record.window = self.point_window()
        return record

    def restore(self, settings: Mapping[str, str], *, auto_conf: str | None = None) -> str:
        """Put ``settings`` back in force without warm-up or budget checks; say what was done
        (with ``auto_conf``, the original ``postgresql.auto.conf`` is written back)."""
        return self.applier.restore(settings, auto_conf=auto_conf)

    # -- the reference and the guardrails ----------------------------------------------------
    def learn_reference(self, samples: int | None = None) -> dict[str, float]:
        """Measure the configuration in force (the original one, before the first apply)
        and freeze each template's mean latency as its reference cost for the run.

        Warm-up, then ``samples`` (default ``measure.samples``) samples; fixed-work samples
        also wait for one completion of every query of the mix, so each template gets a
        cost. Called by the first :meth:`apply` when the estimator is work-weighted.
        """
        self.server.check_cpu_readable(self.config.estimator)
        taken, observed = self.windows.reference_samples(samples)
        return self.reference.learn(taken, observed, self.config.estimator)

    def forget_reference(self) -> None:
        """Drop the frozen reference (costs, statement mix): the next :meth:`apply` measures
        the configuration in force again (after a shift of the statement mix)."""
        self.reference.forget()
