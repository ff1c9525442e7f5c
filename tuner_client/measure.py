"""Measuring one configuration: apply it safely, warm up, take throughput samples.

Online knobs go through :func:`tuner_client.apply.apply_online_knobs` (verified in a fresh
session); offline knobs through the controller's restart with rollback, the workload
stopped meanwhile. Each throughput sample comes from the workload driver (completed queries
per minute) with the ``pg_stat_database`` deltas beside it (transactions, buffer hits and
reads — the Buffer Miss Equation prior's input — and temp-file bytes). A point that the
memory budget forbids is never applied.

Live mode (``workload: {observe: ...}``) samples the application's own traffic instead
(:mod:`workloads.observe`), scores each window statement by statement against the original
configuration (estimator ``latency``, :mod:`tuner_client.stats.mix`) and lets the guardrails
(:mod:`tuner_client.guardrails`) restore the last good configuration within a sample.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol

import psycopg

from harmony.base.errors import (
    ConfigError,
    DatabaseError,
    GuardrailTrip,
    HarmonyError,
    KnobApplyError,
    WorkloadError,
)
from tuner_client.apply import apply_online_knobs, reload_and_wait
from tuner_client.config import MeasureConfig
from tuner_client.controllers.base import RestartReport
from tuner_client.guardrails import Guardrail, Trip, server_memory_bytes
from tuner_client.knobs import KnobCatalog
from tuner_client.server_cpu import PROC, CpuReading, parent_pid, read_server_cpu
from tuner_client.stats.mix import MixReference
from workloads.base import Workload
from workloads.sample import Sample, reference_costs

logger = logging.getLogger(__name__)

#: how long a point's counters are waited for when its samples counted no block access
POINT_FLUSH_WAIT_S = 1.5


class Restarter(Protocol):
    """What the measurer needs of a controller: restart with new offline values, or roll back."""

    def restart_with(self, offline_values: Mapping[str, Any],
                     timeout_s: float) -> RestartReport: ...


# ---------------------------------------------------------------------------------------------
# pg_stat_database counters


@dataclass(frozen=True)
class StatsSnapshot:
    """The database's cumulative counters at one moment."""

    xact_commit: int
    blks_hit: int
    blks_read: int
    temp_bytes: int
    stats_reset: datetime | None
    taken: float  # time.monotonic()


@dataclass(frozen=True)
class StatsDelta:
    """Counter increments over a window (``None`` fields never: a reset voids the whole delta)."""

    xact_commit: int
    blks_hit: int
    blks_read: int
    temp_bytes: int
    seconds: float

    @property
    def miss_ratio(self) -> float | None:
        """``blks_read / (blks_read + blks_hit)``: P for the shared_buffers in force."""
        total = self.blks_hit + self.blks_read
        return self.blks_read / total if total else None

    @property
    def xact_per_minute(self) -> float:
        return 60.0 * self.xact_commit / self.seconds if self.seconds > 0 else 0.0


def read_database_stats(conn: psycopg.Connection[Any]) -> StatsSnapshot:
    """Counters of the connection's database, read after dropping any cached stats snapshot."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(
        "SELECT xact_commit, blks_hit, blks_read, temp_bytes, stats_reset "
        "FROM pg_stat_database WHERE datname = current_database()").fetchone()
    if row is None:
        raise DatabaseError("pg_stat_database has no row for the current database")
    return StatsSnapshot(int(row[0]), int(row[1]), int(row[2]), int(row[3]), row[4],
                         time.monotonic())


def stats_delta(before: StatsSnapshot, after: StatsSnapshot) -> StatsDelta | None:
    """``after - before``, or ``None`` when the counters were reset in between."""
    fields = ("xact_commit", "blks_hit", "blks_read", "temp_bytes")
    diffs = {f: getattr(after, f) - getattr(before, f) for f in fields}
    if after.stats_reset != before.stats_reset or any(v < 0 for v in diffs.values()):
        logger.warning("pg_stat_database counters were reset during the window (stats_reset "
                       "%s -> %s); its deltas are not recorded", before.stats_reset,
                       after.stats_reset)
        return None
    return StatsDelta(seconds=after.taken - before.taken, **diffs)


# ---------------------------------------------------------------------------------------------
# records


@dataclass
class SampleRecord:
    """One throughput sample: the driver's count and the server's counters beside it.

    ``qpm`` is the value the tuner ranks by: the configured estimator's (named by
    ``estimator``; for ``work`` and ``work_per_cpu`` it is not in queries per minute, see
    :data:`ESTIMATORS`). Every other estimate of the same completions is kept beside it for
    comparisons: ``count_qpm`` (completed queries per minute, the study's measure),
    ``concurrency_qpm`` (Little's law), ``work_per_s`` (reference-seconds of work per wall
    second) and ``work_per_cpu`` (per CPU-second of the server, ``server_cpu`` being the
    cores the server used on average over the sample, read from ``cpu_source``).
    ``per_query`` holds each template's ``[completed, mean latency s]``, so that any
    estimator can be recomputed later.
    """

    qpm: float
    completed: int
    errors: int
    seconds: float
    stats: StatsDelta | None = None
    count_qpm: float | None = None
    concurrency_qpm: float | None = None
    estimator: str = "count"
    work_per_s: float | None = None
    server_cpu: float | None = None
    cpu_source: str | None = None
    work_per_cpu: float | None = None
    per_query: dict[str, tuple[int, float | None]] = field(default_factory=dict)
    #: each statement's mean latency (s) of a scripted or replayed workload (``file, line N``)
    per_statement: dict[str, float] = field(default_factory=dict)
    #: queries per minute credited by their run time inside the window (``progress``)
    progress_qpm: float | None = None


@dataclass
class PointRecord:
    """Everything measured for one configuration (one candidate of a session)."""

    session: str
    point: dict[str, Any]
    settings: dict[str, str]
    in_force: dict[str, str] = field(default_factory=dict)
    samples: list[SampleRecord] = field(default_factory=list)
    restart_s: float | None = None
    apply_s: float | None = None
    failure: str | None = None
    value: float | None = None  # the aggregate of the samples
    started: float = field(default_factory=time.time)
    #: the counters over the whole point (after warm-up to after the last sample, waiting
    #: for the backends to flush them): see :meth:`Measurer.point_window`
    window: StatsDelta | None = None
    #: paired measurement: the candidate/reference ratio of the block, and the reference's
    #: values measured just before and after the candidate (``value`` is then the ratio
    #: times the reference's running level: see :mod:`tuner_client.phases.blocks`)
    ratio: float | None = None
    reference: list[float] = field(default_factory=list)
    #: the replica (its client id) that measured it, in a run over several replicas
    replica: str | None = None

    def stats_total(self) -> StatsDelta | None:
        """The samples' counters summed (None when any sample lost its counters); when
        they counted no block access (short samples end before the backends flush their
        statistics, about once a second) the point's whole window instead, if known."""
        deltas = [s.stats for s in self.samples]
        summed = None
        if deltas and all(d is not None for d in deltas):
            summed = StatsDelta(*(sum(getattr(d, f) for d in deltas)  # type: ignore[misc]
                                  for f in ("xact_commit", "blks_hit", "blks_read",
                                            "temp_bytes", "seconds")))
        if self.window is not None and (summed is None
                                        or summed.blks_hit + summed.blks_read == 0):
            return self.window
        return summed

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for sample, raw in zip(self.samples, out["samples"], strict=True):
            if sample.stats is not None:
                raw["stats"]["miss_ratio"] = sample.stats.miss_ratio
        return out


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
#: the estimators that measure the original configuration first (:meth:`learn_reference`)
REFERENCE_ESTIMATORS = WORK_ESTIMATORS | {"latency"}
#: the estimators that divide by the server's CPU time (a local server only)
CPU_ESTIMATORS = frozenset({"work_per_cpu", "count_per_cpu"})


def objective_unit(estimator: str, workload: str) -> str:
    """The unit of a measured value under ``estimator`` for a workload of kind ``workload``
    (``tpch``, ``pgbench``, ``scripts``, ``replay``, ``observe``), as the outputs print it."""
    completions = "transactions/min" if workload in ("pgbench", "scripts") else "queries/min"
    return {"latency": "x the original's speed",
            "work": "reference-cost seconds/s",
            "work_per_cpu": "reference-cost seconds per server CPU-second",
            "count_per_cpu": f"{completions} per server CPU"}.get(estimator, completions)


def _is_postgres(pid: int) -> bool:
    try:
        return (PROC / str(pid) / "comm").read_text().strip().startswith("postgres")
    except OSError:
        return False


def _no_blocks(delta: StatsDelta | None) -> bool:
    return delta is None or delta.blks_hit + delta.blks_read == 0


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


# ---------------------------------------------------------------------------------------------
# the measurer


@dataclass
class ApplyOutcome:
    changed: bool
    restart_s: float | None = None
    apply_s: float | None = None
    failure: str | None = None


class Measurer:
    """Applies configurations to one server and measures the workload's throughput on it.

    ``in_force`` is the tuner's view of the tuned knobs' current values (PostgreSQL strings
    with units); :meth:`apply` changes only what differs. ``feasible(wanted, changed)``
    (optional) returns a reason when a configuration breaks the memory budget: such a
    configuration is refused and never reaches the server.
    """

    def __init__(self, dsn: str, catalog: KnobCatalog, workload: Workload, config: MeasureConfig,
                 *, controller: Restarter | None = None, restart_timeout_s: float = 60.0,
                 feasible: Callable[[Mapping[str, str], Mapping[str, str]], str | None]
                 | None = None,
                 sample_timeout_s: float = 600.0,
                 on_restart: Callable[[float, bool], None] | None = None,
                 guard: Guardrail | None = None, min_calls: int = 20,
                 min_coverage: float = 0.5,
                 on_guard_trip: Callable[[Trip], None] | None = None) -> None:
        self.dsn = dsn
        self.catalog = catalog
        self.workload = workload
        self.config = config
        self.controller = controller
        self.restart_timeout_s = restart_timeout_s
        self.feasible = feasible
        self.sample_timeout_s = sample_timeout_s
        #: told of every server restart this measurer makes: (seconds, succeeded)
        self.on_restart = on_restart
        self.in_force: dict[str, str] = {}
        self.applied_log: list[dict[str, str]] = []  # every configuration sent to the server
        self._conn: psycopg.Connection[Any] | None = None
        self._running = False
        self._stats: StatsSnapshot | None = None
        #: the counters when the configuration in force started being measured
        self._point_start: StatsSnapshot | None = None
        #: when the configuration in force took effect (monotonic); queries started
        #: earlier ran under the previous one
        self._applied_at: float | None = None
        #: the seconds of the latest warm-up (``measure.restart_warmup_s`` after a restart)
        self.last_warmup_s: float | None = None
        if config.estimator not in ESTIMATORS:
            raise ConfigError(f"measure.estimator must be one of {sorted(ESTIMATORS)}, but "
                              f"got {config.estimator!r}")
        #: each template's reference cost (mean latency s under the original configuration),
        #: learned by :meth:`learn_reference` and frozen for the run; a template the
        #: reference never completed gets the mean latency of its first completion
        self.reference_costs: dict[str, float] | None = None
        self._cpu_checked = False
        self._postmaster: int | None = None
        self._changed_at: float | None = None
        #: live traffic (estimator ``latency``): the reference's per-statement costs and
        #: shares, learned by :meth:`learn_reference`; ``min_calls`` / ``min_coverage`` say
        #: which statements a window compares (``workload.observe``)
        self.mix_reference: MixReference | None = None
        self.min_calls, self.min_coverage = min_calls, min_coverage
        #: live mode's guardrails, checked on partial windows during every sample; a trip
        #: restores :attr:`last_good` at once (:meth:`guard_tripped`)
        self.guard = guard
        self.on_guard_trip = on_guard_trip
        #: the last configuration that finished a sample without tripping a guardrail
        self.last_good: dict[str, str] | None = None
        self._original: dict[str, str] = {}  # in force before the first apply
        if guard is not None and hasattr(workload, "watch"):
            workload.watch = self._watch

    # -- connection ----------------------------------------------------------------------
    def conn(self) -> psycopg.Connection[Any]:
        """An autocommit admin connection to the workload's database (reopened if broken)."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        deadline = time.monotonic() + self.restart_timeout_s
        while True:
            try:
                self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
                return self._conn
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise DatabaseError(f"cannot connect to the database being tuned: "
                                        f"{exc}") from exc
                time.sleep(0.5)

    def live_conn(self) -> psycopg.Connection[Any]:
        """:meth:`conn`, checked with a round trip: a connection the server dropped (a crash
        and restart, e.g. a backend OOM-killed while the last point was measured) only shows
        as broken when used, so it is replaced here rather than failing the next apply."""
        conn = self.conn()
        try:
            conn.execute("SELECT 1")
            return conn
        except psycopg.OperationalError as exc:
            logger.info("admin connection lost (%s); reconnecting", str(exc).strip())
            conn.close()
            self._conn = None
            return self.conn()

    def current_settings(self, names: list[str]) -> dict[str, str]:
        """``current_setting()`` of each knob in a session of this connection's role/db."""
        rows = self.conn().execute(
            "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s)",
            [names]).fetchall()
        return {r[0]: r[1] for r in rows}

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        if not self._running:
            self.workload.start()
            self._running = True

    def stop(self) -> None:
        if self._running:
            self.workload.stop()
            self._running = False

    def close(self) -> None:
        self.stop()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    # -- applying ------------------------------------------------------------------------
    def _same(self, name: str, a: str | None, b: str | None) -> bool:
        if a is None or b is None:
            return a == b
        knob = self.catalog[name]
        try:
            x, y = knob.parse(a), knob.parse(b)
        except ConfigError:
            return a == b
        if isinstance(x, float) or isinstance(y, float):
            return math.isclose(float(x), float(y), rel_tol=1e-9)
        return x == y

    def apply(self, settings: Mapping[str, str], *, check_budget: bool = True,
              warm_up: bool = True) -> ApplyOutcome:
        """Put ``settings`` in force (a restart when an offline knob changes); warm up
        (``warm_up=False``: not, e.g. for a buffer probe that measures from a cold buffer).

        Returns what happened; a failure leaves the server running with its last good
        configuration (the controller rolls back a restart that does not come up).
        """
        if self.config.estimator in REFERENCE_ESTIMATORS and self.reference_costs is None:
            self.learn_reference()
        if self.last_good is None:
            self.last_good = dict(self.in_force)
            self._original = dict(self.in_force)
        if self.config.estimator in CPU_ESTIMATORS and not self._cpu_checked:
            self._check_cpu_readable()
        changed = {n: v for n, v in settings.items() if not self._same(n, v, self.in_force.get(n))}
        if not changed:
            return ApplyOutcome(changed=False)
        wanted = {**self.in_force, **settings}
        if self.feasible is not None and check_budget:
            reason = self.feasible(wanted, changed)
            if reason is not None:
                logger.warning("refusing to apply %s: %s", changed, reason)
                return ApplyOutcome(changed=False, failure=f"infeasible: {reason}")
        offline = {n: v for n, v in changed.items() if self.catalog[n].kind == "offline"}
        online = {n: v for n, v in changed.items() if n not in offline}
        outcome = ApplyOutcome(changed=True)
        if offline:
            outcome.restart_s, failure = self._restart(offline)
            if failure is not None:
                outcome.failure = failure
                return outcome
        if online:
            started = time.monotonic()
            self.applied_log.append(dict(online))
            try:
                apply_online_knobs(self.live_conn(), self.catalog, online)
            except (KnobApplyError, ConfigError, DatabaseError, psycopg.Error) as exc:
                outcome.failure = f"applying {online} failed: {exc}"
                logger.warning("%s", outcome.failure)
                self._refresh_in_force(list(online))
                return outcome
            outcome.apply_s = time.monotonic() - started
            self.in_force.update(online)
        self._applied_at = self._changed_at = time.monotonic()
        if warm_up:
            try:
                self.warm_up(self.config.restart_warmup_s if offline else None)
            except GuardrailTrip as trip:
                self.guard_tripped(trip)
                outcome.failure = f"sampling failed: {trip.reason}"
        return outcome

    def _restart(self, offline: dict[str, str]) -> tuple[float, str | None]:
        if self.controller is None:
            return 0.0, (f"offline knobs {sorted(offline)} need a restart, but no controller "
                         f"is configured")
        logger.info("restarting PostgreSQL with %s", offline)
        self.applied_log.append(dict(offline))
        was_running = self._running
        self.stop()
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        started = time.monotonic()
        failure: str | None = None
        try:
            report = self.controller.restart_with(offline, self.restart_timeout_s)
            if not report.ok:
                failure = f"restart with {offline} failed: {report.reason or report}"
        except HarmonyError as exc:
            failure = f"restart with {offline} failed: {exc}"
        elapsed = time.monotonic() - started
        self._restarted(elapsed, failure is None)
        if failure is None:
            self.in_force.update(offline)
            logger.info("restart with %s took %.1f s", offline, elapsed)
        else:
            logger.warning("%s (after %.1f s); the controller restored the last good "
                           "configuration", failure, elapsed)
            self._refresh_in_force(list(offline))
        if was_running:
            self.start()
        return elapsed, failure

    def _restarted(self, seconds: float, ok: bool) -> None:
        if self.on_restart is not None:
            self.on_restart(seconds, ok)

    def _refresh_in_force(self, names: list[str]) -> None:
        try:
            self.in_force.update(self.current_settings(names))
        except (DatabaseError, psycopg.Error) as exc:
            logger.warning("could not read the settings in force: %s", exc)

    def warm_up(self, seconds: float | None = None) -> None:
        """Let caches settle under the workload (a discarded time window of ``seconds``,
        default ``measure.warmup_s``)."""
        seconds = self.config.warmup_s if seconds is None else seconds
        self.last_warmup_s = seconds
        if seconds > 0:
            self.start()
            sample = self.workload.sample(seconds=seconds)
            logger.info("warm-up %.1f s: %.0f qpm (discarded)", seconds, float(sample.qpm))
        self._point_start = None  # the next sample starts the point's window

    def point_window(self, wait_s: float = POINT_FLUSH_WAIT_S) -> StatsDelta | None:
        """The counters since the first sample under the configuration in force.

        Backends flush their statistics about once a second, so a window of fast queries
        may show no block access yet; the workload keeps running under the same
        configuration, so this waits up to ``wait_s`` for the counters to arrive.
        """
        if self._point_start is None:
            return None
        deadline = time.monotonic() + wait_s
        while True:
            try:
                delta = stats_delta(self._point_start, read_database_stats(self.conn()))
            except (DatabaseError, psycopg.Error) as exc:
                logger.warning("pg_stat_database not readable for the point's window: %s", exc)
                return None
            if delta is None or delta.blks_hit + delta.blks_read > 0 \
                    or time.monotonic() >= deadline or not self._running:
                return delta
            time.sleep(0.2)

    # -- the work reference ----------------------------------------------------------------
    def _check_cpu_readable(self) -> None:
        """A CPU estimator needs the server's CPU time: a clear error before anything runs."""
        estimator = self.config.estimator
        if estimator in CPU_ESTIMATORS and self._read_cpu() is None:
            instead = "work" if estimator == "work_per_cpu" else "count"
            raise ConfigError(f"measure.estimator {estimator} needs the PostgreSQL server's "
                              "CPU time, which is readable only when the server runs on this "
                              "machine (its backends' processes are not visible here); use "
                              f"measure.estimator {instead}")
        self._cpu_checked = True

    def learn_reference(self, samples: int | None = None) -> dict[str, float]:
        """Measure the configuration in force (the original one, before the first apply)
        and freeze each template's mean latency as its reference cost for the run.

        Warm-up, then ``samples`` (default ``measure.samples``) samples; fixed-work samples
        also wait for one completion of every query of the mix, so each template gets a
        cost. Called by the first :meth:`apply` when the estimator is work-weighted.
        """
        self._check_cpu_readable()
        self.start()
        self.warm_up()
        taken: list[Sample] = []
        observed = []
        for _ in range(samples or self.config.samples):
            if self.config.queries is not None:
                taken.append(self.workload.sample(queries=self.config.queries,
                                                  timeout_s=self.sample_timeout_s,
                                                  every_query=True))
            else:
                taken.append(self.workload.sample(seconds=self.config.seconds))
            observed.append(getattr(self.workload, "last_window", None))
        self._point_start = None
        if self.config.estimator == "latency":
            self._learn_mix(taken, observed)
        costs = reference_costs(taken)
        if not costs:
            raise WorkloadError("the reference configuration completed no query in "
                               f"{sum(s.seconds for s in taken):.0f} s: no work reference; "
                                "lengthen measure.seconds or measure.queries")
        self.reference_costs = costs
        logger.info("work reference (mean latency s under the original configuration, "
                    "frozen for the run): %s", {q: round(c, 4) for q, c in costs.items()})
        return costs

    def forget_reference(self) -> None:
        """Drop the frozen reference (costs, statement mix): the next :meth:`apply` measures
        the configuration in force again (after a shift of the statement mix)."""
        self.reference_costs = None
        self.mix_reference = None
        if self.guard is not None:
            self.guard.reference, self.guard.level = None, 1.0

    def _learn_mix(self, taken: list[Sample], observed: list[Any]) -> None:
        """Freeze the reference's statement costs and shares (live traffic), and its error
        rate for the guardrail."""
        windows = [{q: (st.completed, st.mean) for q, st in s.per_query.items()} for s in taken]
        self.mix_reference = MixReference.learn(windows, min_calls=self.min_calls,
                                                min_coverage=self.min_coverage,
                                                seconds=sum(s.seconds for s in taken))
        ref = self.mix_reference
        if ref.ignored:
            logger.info("live reference: %d statements with fewer than %d calls per window "
                        "are left out (%d calls in all): %s", len(ref.ignored), self.min_calls,
                        sum(ref.ignored.values()), dict(list(ref.ignored.items())[:10]))
        logger.info("live reference: %d statements compared (%d calls), time shares %s",
                    len(ref.shares), ref.calls,
                    {q: round(w, 3) for q, w in sorted(ref.shares.items(),
                                                        key=lambda kv: -kv[1])[:10]})
        if self.guard is not None:
            self.guard.reference = ref
            seen = [w for w in observed if w is not None]
            errors = sum(w.xact_rollback + w.deadlocks for w in seen)
            finished = sum(w.xact_commit + w.xact_rollback for w in seen)
            self.guard.baseline_error_rate = errors / finished if finished else 0.0
            logger.info("guardrail baseline: %.2f %% of %d transactions rolled back or "
                        "deadlocked under the reference", 100 * self.guard.baseline_error_rate,
                        finished)

    def _costs_for(self, got: Sample) -> dict[str, float]:
        """The frozen reference costs, plus first-sight costs of templates the reference
        never completed (frozen from then on)."""
        costs = self.reference_costs if self.reference_costs is not None else {}
        for query, stats in got.per_query.items():
            if stats.completed and stats.mean is not None and query not in costs:
                logger.info("work reference: %s never completed under the reference "
                            "configuration; its cost is frozen at its first mean latency "
                            "%.3f s", query, stats.mean)
                costs[query] = stats.mean
        if self.reference_costs is not None:
            self.reference_costs = costs
        return costs

    def _live_speed(self, got: Sample) -> float:
        """The latency estimator's value of a live window (see :mod:`tuner_client.stats.mix`)."""
        if self.mix_reference is None:
            raise WorkloadError("measure.estimator latency: no reference statement costs yet")
        per_query = {q: (st.completed, st.mean) for q, st in got.per_query.items()}
        score = self.mix_reference.score(per_query)
        if score is None:
            raise self.mix_reference.coverage_error(per_query, got.seconds)
        if self.guard is not None and self._is(self._original):
            self.guard.level = score.ratio  # the guardrail follows the original's drift
        if score.left_out:
            logger.info("%d of %d reference statements had fewer than %d calls in this "
                        "window and are left out (%.0f %% of the reference's time compared)",
                        len(score.left_out), len(self.mix_reference.shares),
                        self.mix_reference.min_calls, 100 * score.covered)
        return score.speed

    # -- guardrails ------------------------------------------------------------------------
    def _watch(self, window: Any) -> None:
        """The live workload's hook on partial windows: the guardrails judge every
        configuration that has not yet finished a sample cleanly, except the original one
        (what the server runs without the tuner: reverting it would have nowhere to go)."""
        if self.guard is None or self.last_good is None:
            return
        if not (self._is(self.last_good) or self._is(self._original)):
            self.guard.check(window)

    def _is(self, settings: Mapping[str, str]) -> bool:
        """Whether ``settings`` are the values in force."""
        return all(self._same(n, v, self.in_force.get(n)) for n, v in settings.items())

    def guard_tripped(self, trip: GuardrailTrip) -> Trip:
        """Restore the last good configuration now (reload-time knobs by ALTER SYSTEM +
        reload, restart-time knobs by a restart), and record the trip."""
        detected = time.monotonic()
        tried = dict(self.in_force)
        good = dict(self.last_good or {})
        back = {n: v for n, v in good.items() if not self._same(n, v, self.in_force.get(n))}
        logger.warning("%s with %s: restoring the last good configuration %s", trip.reason,
                       {n: tried.get(n) for n in back}, back)
        failure = None
        offline = {n: v for n, v in back.items() if self.catalog[n].kind == "offline"}
        online = {n: v for n, v in back.items() if n not in offline}
        try:
            if online:
                apply_online_knobs(self.live_conn(), self.catalog, online)
                self.in_force.update(online)
            if offline:
                _, failure = self._restart(offline)
        except (KnobApplyError, ConfigError, DatabaseError, psycopg.Error) as exc:
            failure = f"restoring {online} failed: {exc}"
            self._refresh_in_force(list(online))
        if failure is not None:
            logger.error("guardrail: %s", failure)
        self._applied_at = time.monotonic()
        record = Trip(kind=trip.kind, reason=trip.reason, settings={n: tried.get(n, "")
                                                                  for n in back},
                      restored=back, revert_s=time.monotonic() - detected, failure=failure,
                      detected_after_s=(detected - self._changed_at
                                        if self._changed_at is not None else None))
        if self.guard is not None:
            self.guard.trips.append(record)
        if self.on_guard_trip is not None:
            self.on_guard_trip(record)
        logger.warning("guardrail: reverted in %.3f s (%.2f s after the configuration took "
                       "effect)", record.revert_s, record.detected_after_s or math.nan)
        return record

    # -- server CPU ------------------------------------------------------------------------
    def server_memory(self) -> int | None:
        """The server's memory in bytes (Pss of its processes; None when not local)."""
        pid = self._postmaster_pid()
        return server_memory_bytes(pid) if pid is not None else None

    def _postmaster_pid(self) -> int | None:
        """The postmaster's PID when the server runs on this machine, else None."""
        pid = self._postmaster
        if pid is None or parent_pid(pid) is None:
            try:
                backend = int(self.conn().info.backend_pid)
            except (DatabaseError, psycopg.Error):
                return None
            pid = parent_pid(backend)
            if pid is None or not _is_postgres(backend):
                return None  # another host or PID namespace
            self._postmaster = pid
        return pid

    def _read_cpu(self) -> CpuReading | None:
        """The server's cumulative CPU time (None when the server is not local)."""
        pid = self._postmaster_pid()
        return read_server_cpu(pid) if pid is not None else None

    # -- sampling ------------------------------------------------------------------------
    def sample(self) -> SampleRecord:
        """One throughput sample (fixed work or a time window) with the counters' deltas
        and the server's CPU time; ``qpm`` holds the configured estimator's value."""
        self.start()
        try:
            before = read_database_stats(self.conn())
        except (DatabaseError, psycopg.Error) as exc:
            logger.warning("pg_stat_database not readable before the sample: %s", exc)
            before = None
        if self._point_start is None:
            self._point_start = before
        estimator = self.config.estimator
        latency = estimator == "concurrency"
        # the latency estimate counts only queries started under this configuration
        since = self._applied_at if latency else None
        cpu_before, cpu_started = self._read_cpu(), time.monotonic()
        try:
            if self.config.queries is not None:
                got = self.workload.sample(queries=self.config.queries,
                                           timeout_s=self.sample_timeout_s, since=since,
                                           every_query=latency)
            else:
                got = self.workload.sample(seconds=self.config.seconds, since=since)
        except GuardrailTrip as trip:
            self.guard_tripped(trip)
            raise
        if self.guard is not None:
            self.last_good = dict(self.in_force)
        cpu_after, cpu_wall = self._read_cpu(), time.monotonic() - cpu_started
        server_cpu, cpu_source = None, None
        if (cpu_before is not None and cpu_after is not None and cpu_wall > 0
                and cpu_before.source == cpu_after.source
                and cpu_before.postmaster == cpu_after.postmaster):
            server_cpu = (cpu_after.cpu_s - cpu_before.cpu_s) / cpu_wall
            cpu_source = cpu_after.source
        work = (got.work_per_s(self._costs_for(got)) if self.reference_costs is not None
                else None)
        per_cpu = work / server_cpu if work is not None and server_cpu else None
        value = float(got.qpm)
        if latency:
            if got.concurrency_qpm is not None:
                value = float(got.concurrency_qpm)
            else:
                logger.warning("no completion of some query of the mix in a %.1f-s window: "
                               "counted throughput used for this sample (lengthen "
                               "measure.seconds)", got.seconds)
        elif estimator in WORK_ESTIMATORS:
            chosen = work if estimator == "work" else per_cpu
            if chosen is None:
                why = ("no reference cost" if work is None
                       else "the server's CPU time is not readable (not a local server?)")
                raise WorkloadError(f"measure.estimator {estimator}: {why} for this sample; "
                                    f"use measure.estimator count or work")
            value = float(chosen)
        elif estimator == "latency":
            value = self._live_speed(got)
        elif estimator == "progress":
            if got.progress_qpm is None:
                raise WorkloadError("measure.estimator progress: this workload's driver does not "
                                    "report when queries start (pgbench, scripts and live "
                                    "observation); use measure.estimator count")
            value = float(got.progress_qpm)
        elif estimator == "count_per_cpu":
            if not server_cpu:
                raise WorkloadError("measure.estimator count_per_cpu: the server's CPU time is "
                                    "not readable for this sample; use measure.estimator count")
            value = float(got.qpm) / server_cpu
        delta = None
        if before is not None:
            try:
                delta = stats_delta(before, read_database_stats(self.conn()))
            except (DatabaseError, psycopg.Error) as exc:
                logger.warning("pg_stat_database not readable after the sample: %s", exc)
        return SampleRecord(qpm=value, completed=int(got.completed), errors=int(got.errors),
                            seconds=float(got.seconds), stats=delta, count_qpm=float(got.qpm),
                            concurrency_qpm=got.concurrency_qpm, estimator=estimator,
                            work_per_s=work, server_cpu=server_cpu,
                            cpu_source=cpu_source,
                            work_per_cpu=per_cpu,
                            per_query={q: (st.completed, st.mean)
                                       for q, st in got.per_query.items()},
                            per_statement=dict(got.per_statement),
                            progress_qpm=got.progress_qpm)

    def measure(self, session: str, point: Mapping[str, Any], settings: Mapping[str, str],
                samples: int | None = None, *, check_budget: bool = True) -> PointRecord:
        """Apply ``settings``, warm up and take ``samples`` samples; the aggregate is ``value``.

        Used for the final default-vs-best comparison and for monitoring, where the same
        protocol as the sessions' must hold but no session aggregates.
        """
        record = PointRecord(session=session, point=dict(point), settings=dict(settings))
        outcome = self.apply(settings, check_budget=check_budget)
        record.restart_s, record.apply_s, record.failure = (outcome.restart_s, outcome.apply_s,
                                                            outcome.failure)
        # every tuned knob's value in force (what was refused leaves the previous values)
        record.in_force = dict(self.in_force)
        if outcome.failure is not None:
            return record
        if not outcome.changed:
            try:
                self.warm_up()  # same protocol whether or not anything changed
            except GuardrailTrip as trip:
                self.guard_tripped(trip)
                record.failure = f"sampling failed: {trip.reason}"
                return record
        for _ in range(samples or self.config.samples):
            try:
                record.samples.append(self.sample())
            except HarmonyError as exc:
                record.failure = f"sampling failed: {exc}"
                return record
        record.value = aggregate([s.qpm for s in record.samples], self.config.aggregate)
        if record.stats_total() is None or _no_blocks(record.stats_total()):
            record.window = self.point_window()
        return record

    # -- leaving the server as it was ------------------------------------------------------
    def restore(self, settings: Mapping[str, str], *, auto_conf: str | None = None) -> str:
        """Put ``settings`` back in force without warm-up or budget checks; say what was done.

        With ``auto_conf`` (the original ``postgresql.auto.conf`` text) and a controller that
        can write it, the file itself is restored, so knobs that were at their defaults go
        back to *not set* rather than to an explicit value.
        """
        self.stop()
        differs = {n: v for n, v in settings.items() if not self._same(n, v, self.in_force.get(n))}
        offline = {n: v for n, v in differs.items() if self.catalog[n].kind == "offline"}
        controller = self.controller
        if auto_conf is not None and controller is not None and hasattr(controller,
                                                                        "write_auto_conf"):
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            try:
                controller.write_auto_conf(auto_conf)  # type: ignore[attr-defined]
            except (HarmonyError, OSError) as exc:
                logger.warning("could not write postgresql.auto.conf back (%s); restoring "
                               "with ALTER SYSTEM instead", exc)
            else:
                if offline:
                    started = time.monotonic()
                    controller.stop_server(self.restart_timeout_s)  # type: ignore[attr-defined]
                    controller.start_server(self.restart_timeout_s)  # type: ignore[attr-defined]
                    self._restarted(time.monotonic() - started, True)
                elif not reload_and_wait(self.conn(), self.restart_timeout_s):
                    logger.warning("the reload after restoring postgresql.auto.conf was not "
                                   "seen within %.0f s", self.restart_timeout_s)
                self._refresh_in_force(list(settings))
                still = {n: v for n, v in settings.items()
                         if not self._same(n, v, self.in_force.get(n))}
                if not still:
                    return ("postgresql.auto.conf restored" + (", restarted" if offline else
                                                                ", reloaded"))
                logger.warning("after restoring postgresql.auto.conf %s differ from %s",
                               sorted(still), {n: settings[n] for n in still})
                differs = still
                offline = {n: v for n, v in differs.items() if self.catalog[n].kind == "offline"}
        if not differs:
            return "nothing to change"
        if offline:
            _, failure = self._restart(offline)
            if failure is not None:
                raise HarmonyError(f"could not restore {offline}: {failure}")
        online = {n: v for n, v in differs.items() if n not in offline}
        if online:
            apply_online_knobs(self.live_conn(), self.catalog, online)
            self.in_force.update(online)
        return f"set {differs} with ALTER SYSTEM"
