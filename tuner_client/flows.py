"""The tuning flows: one-pass (offline then online) and multi-pass (repeated, detector-driven).

A flow drives Harmony sessions (on a server, or standalone in-process) with the PostgreSQL
measurements of :mod:`tuner_client.measure`:

* the **offline session** tunes the restart-only knobs (``shared_buffers``) with a 2-vertex
  simplex, capped by the memory budget; once three sizes are measured the Buffer Miss
  Equation prior is fitted and, when the fit is good, the search restarts inside the
  advised range from the advised size (on a poor fit the plain search goes on, and says so);
* the **online session** tunes the reload-only knobs under the online budget computed with
  the ``shared_buffers`` actually in force;
* the **multi-pass** flow repeats offline -> online while the local-minimum detector (online
  simplex stuck below the offline best) or the workload-shift detector (after convergence,
  measurements leaving the converged band) ask for it.

At the end the default and the best configuration are re-measured interleaved (A/B/A/B) with
the same protocol, and the best is written as ``ALTER SYSTEM`` statements and a
``postgresql.conf`` fragment. Whatever happens (an error, Ctrl-C, SIGTERM), the server is left
running with its original configuration (or the best one with ``final.apply_best``).

Every step updates a :class:`tuner_client.metrics.TunerMetrics` (served by ``harmony tune
--metrics-port``; otherwise kept on a private registry nobody reads). With ``warm_start`` in
the config, the first offline and online sessions start from the best points of compatible
prior sessions. The run's sessions are exported (``sessions/NAME.xml`` in the output
directory) with ``metadata["comparison"]`` (default vs tuned, and recommended when measured)
and, for the offline sessions, ``metadata["bme"]`` (the fit and its points), which
``harmony report NAME --from-xml FILE`` shows without further flags.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg

from harmony.definition import PluginSpec, SessionDefinition
from harmony.errors import ConfigError, ConstraintError, HarmonyError
from harmony.priordata import HostInfo, PriorSession, PriorTrial, dump
from harmony.warmstart import apply_warm_start
from strategies.space import EnumParam, IntParam, Space
from tuner_client.budget import ONLINE_MEMORY_KNOBS
from tuner_client.budget_view import BudgetView, make_budget_view
from tuner_client.client import HarmonyClient, Session, connect, host_metadata
from tuner_client.config import (
    KnobParam,
    KnobSpace,
    TunerConfig,
    format_bytes,
    resolve_knob_space,
)
from tuner_client.detectors import LocalMinimumDetector, WorkloadShiftDetector
from tuner_client.measure import Measurer, PointRecord, aggregate
from tuner_client.metrics import TunerMetrics
from tuner_client.target import Target, make_workload, open_target
from tuner_client.warm import load_priors

logger = logging.getLogger(__name__)

#: knobs the memory budget reads, tuned or not
BUDGET_KNOBS = ("shared_buffers", "work_mem", "maintenance_work_mem", "temp_buffers")
#: how long one fetch waits for a point before the session is considered idle (seconds)
FETCH_TIMEOUT_S = 10.0


@dataclass
class TuneResult:
    """What a run found: the best configuration, the A/B comparison, and where files went."""

    best_settings: dict[str, str]
    default_settings: dict[str, str]
    best_qpm: float | None
    default_qpm: float | None
    ab_rounds: list[dict[str, float | None]]
    passes: int
    evaluations: int
    output_dir: Path | None
    decisions: list[str] = field(default_factory=list)
    interrupted: bool = False
    #: the best aggregate found by the search (before the final re-measurement)
    search_best_qpm: float | None = None
    #: the BME recommendation's throughput, when ``final.recommended`` measured it
    recommended_qpm: float | None = None
    #: what ``harmony report`` shows as the comparison (qpm by label), when measured
    comparison: dict[str, Any] | None = None
    #: the BME fit of the offline measurements (parameters in bytes, r2, points), if any
    bme: dict[str, Any] | None = None
    #: the run's session names
    sessions: list[str] = field(default_factory=list)

    @property
    def improvement(self) -> float | None:
        """Best over default throughput, minus one (0.25 = 25 % more queries per minute)."""
        if not self.best_qpm or not self.default_qpm:
            return None
        return self.best_qpm / self.default_qpm - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"best_settings": self.best_settings, "default_settings": self.default_settings,
                "best_qpm": self.best_qpm, "default_qpm": self.default_qpm,
                "recommended_qpm": self.recommended_qpm, "search_best_qpm": self.search_best_qpm,
                "improvement": self.improvement, "ab_rounds": self.ab_rounds,
                "passes": self.passes, "evaluations": self.evaluations,
                "decisions": self.decisions, "interrupted": self.interrupted,
                "comparison": self.comparison, "bme": self.bme, "sessions": self.sessions}


def alter_system_sql(settings: Mapping[str, str], offline: set[str]) -> str:
    """``ALTER SYSTEM`` statements for ``settings`` (values quoted as SQL literals)."""
    lines = ["-- written by harmony tune: apply with psql as a superuser"]
    for name, value in settings.items():
        quoted = value.replace("'", "''")
        note = "  -- needs a restart" if name in offline else ""
        lines.append(f"ALTER SYSTEM SET {name} = '{quoted}';{note}")
    lines.append("SELECT pg_reload_conf();")
    if offline & set(settings):
        lines.append(f"-- then restart PostgreSQL for {', '.join(sorted(offline & set(settings)))}")
    return "\n".join(lines) + "\n"


def conf_fragment(settings: Mapping[str, str]) -> str:
    """The same settings as ``postgresql.conf`` lines."""
    body = "".join(f"{name} = '{value.replace(chr(39), chr(39) * 2)}'\n"
                   for name, value in settings.items())
    return "# written by harmony tune\n" + body


@dataclass
class PriorAdvice:
    """The BME prior's advice in session units: a start point and a narrowed range."""

    usable: bool
    reason: str
    start: dict[str, Any] = field(default_factory=dict)
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def range_text(self) -> str:
        return ", ".join(f"{n} {lo:g}..{hi:g}" for n, (lo, hi) in self.bounds.items())


class OfflinePrior:
    """Feeds offline measurements to the Buffer Miss Equation prior and converts its advice.

    Each measured shared_buffers size gives a point (size, buffer hits, buffer reads over the
    samples); with three distinct sizes the equation is fitted once. P* is estimated from the
    pages the database holds over the block accesses of the first window, when known.
    """

    def __init__(self, space: KnobSpace, max_bytes: int, min_r2: float,
                 relpages_bytes: int | None) -> None:
        from tuner_client.bme.prior import SharedBuffersPrior

        self.space = space
        self.param = space["shared_buffers"]
        self.max_bytes = max_bytes
        self.min_r2 = min_r2
        self.relpages_bytes = relpages_bytes
        self._prior_cls = SharedBuffersPrior
        self.prior: Any = None
        self.last: PriorAdvice | None = None
        self.fit: Any = None  # the BMEFit behind the last advice (good or poor), if any
        self.size_range: tuple[int, int] | None = None  # the bytes the advice searched in

    def add(self, record: PointRecord) -> None:
        stats = record.stats_total()
        if stats is None or record.value is None or "shared_buffers" not in record.in_force:
            return
        if self.prior is None:
            p_star = None
            if self.relpages_bytes and stats.blks_hit + stats.blks_read > 0:
                from tuner_client.bme import prior as prior_module

                helper = getattr(prior_module, "touched_pages_p_star", None)
                if helper is not None:
                    try:
                        p_star = helper(self.relpages_bytes // 8192,
                                        stats.blks_hit + stats.blks_read)
                    except HarmonyError as exc:
                        logger.info("no P* estimate for the BME prior: %s", exc)
            self.prior = self._prior_cls(p_star=p_star, min_r2=self.min_r2)
        size = int(self.param.knob.parse(record.in_force["shared_buffers"]))
        try:
            self.prior.add_point(size, stats.blks_hit, stats.blks_read)
        except HarmonyError as exc:
            # e.g. no block access counted yet: backends flush their stats about once a
            # second, so very short windows can miss them
            logger.info("BME prior: point at shared_buffers %s skipped: %s",
                        record.in_force["shared_buffers"], exc)

    def advice(self) -> PriorAdvice | None:
        """None until three sizes are measured; then the advice (usable or not, with why)."""
        if self.prior is None or not self.prior.ready:
            return None
        p = self.param.param
        if isinstance(p, EnumParam):
            return None
        lo_bytes = int(self.param.canonical(p.min))  # type: ignore[arg-type]
        hi_bytes = min(int(self.param.canonical(p.upper)), self.max_bytes)  # type: ignore[arg-type]
        self.size_range = (lo_bytes, hi_bytes)
        try:
            raw = self.prior.recommend(max_bytes=hi_bytes, min_bytes=lo_bytes)
        except HarmonyError as exc:
            self.last = PriorAdvice(False, f"fit failed: {exc}")
            return self.last
        self.fit = raw.fit
        if not raw.usable or raw.m_star_bytes is None:
            self.last = PriorAdvice(False, str(raw.reason))
            return self.last
        m_star = self.param.session_value(int(raw.m_star_bytes))
        lo, hi = float(p.min), float(p.upper)
        if raw.search_range is not None:
            lo = float(self.param.session_value(int(raw.search_range[0])))  # type: ignore[arg-type]
            hi = float(self.param.session_value(int(raw.search_range[1])))  # type: ignore[arg-type]
            if lo >= hi:
                lo, hi = float(p.min), float(p.upper)
        self.last = PriorAdvice(True, f"{raw.reason}; M* = {m_star}{self.param.unit or ''}"
                                f"{' (capped by the budget)' if raw.capped else ''}",
                                start={"shared_buffers": m_star},
                                bounds={"shared_buffers": (lo, hi)})
        return self.last

    def metadata(self) -> dict[str, Any] | None:
        """The fit for a session's ``metadata["bme"]``: parameters (bytes), r2, points."""
        if self.fit is None or self.prior is None:
            return None
        points = sorted(zip(self.prior.sizes, self.prior.misses, strict=True))
        return {**self.fit.params.to_dict(), "r2": float(self.fit.r2),
                "points": [[float(m), float(p)] for m, p in points],
                "usable": bool(self.last.usable) if self.last is not None else False,
                "reason": self.last.reason if self.last is not None else ""}


class Tuner:
    """One tuning run of a :class:`TunerConfig` (see the module docstring)."""

    def __init__(self, config: TunerConfig, *, server: str | None = None,
                 state_dir: Path | None = None, output_dir: Path | None = None,
                 client: HarmonyClient | None = None, target: Target | None = None,
                 run_id: str | None = None, metrics: TunerMetrics | None = None) -> None:
        self.config = config
        self.server = server if server is not None else config.server
        self.state_dir = state_dir
        self.output_dir = output_dir
        self.run_id = run_id or time.strftime("%Y%m%d-%H%M%S")
        self._client = client
        self._target = target
        self.records: list[PointRecord] = []
        self.decisions: list[str] = []
        self.best: PointRecord | None = None
        #: records before this index were measured under an earlier workload (a shift)
        self.ranked_from = 0
        self.original: dict[str, str] = {}
        self.measurer: Measurer | None = None
        self.budget: BudgetView | None = None
        self.offline_space: KnobSpace | None = None
        self.online_space: KnobSpace | None = None
        self.on_record: Callable[[PointRecord], None] | None = None
        self.original_auto_conf: str | None = None
        self.relpages_bytes: int | None = None
        # never None: without a metrics port the updates go to a registry nobody serves
        self.metrics = metrics if metrics is not None else TunerMetrics(
            [k.name for k in config.knob_specs()], tuner=config.name)
        self.priors: list[PriorSession] = []
        self.sessions: list[tuple[Session, str]] = []  # (session, offline | online)
        self.bme: dict[str, Any] | None = None
        self.recommended: dict[str, str] | None = None

    # -- top level -------------------------------------------------------------------------
    def run(self) -> TuneResult:
        """Run the configured flow, compare default vs best, write the outputs, clean up."""
        if self.config.warm_start.enabled:
            # read before anything starts: a missing file is a config error
            self.priors = load_priors(self.config.warm_start, source=self.config.source)
        own_target = self._target is None
        target = self._target or open_target(self.config, self.state_dir)
        own_client = self._client is None
        client = self._client or connect(self.server)
        interrupted = False
        result: TuneResult | None = None
        guard = getattr(target.controller, "safe_restart_guard", None)
        try:
            with guard(self.config.database.restart_timeout_s) if guard is not None \
                    else contextlib.nullcontext():
                # the guard turns SIGTERM into SystemExit and, on the way out, makes sure
                # the server is up (restoring the last good configuration if a restart was
                # cut short); the finally below then restores the original configuration
                self._prepare(target)
                passes = self._run_flow(client)
                result = self._finish(passes)
            return result
        except (KeyboardInterrupt, SystemExit):
            interrupted = True
            logger.warning("interrupted: restoring the original configuration")
            raise
        finally:
            self._cleanup(keep_best=bool(result is not None and self.config.final.apply_best),
                          interrupted=interrupted)
            self.metrics.set_phase("idle")
            if own_client:
                client.close()
            if own_target:
                target.close()

    def _prepare(self, target: Target) -> None:
        self._target = target
        cfg = self.config
        self.offline_space = resolve_knob_space(cfg.offline.knobs, target.catalog, kind="offline")
        self.online_space = resolve_knob_space(cfg.online.knobs, target.catalog, kind="online")
        self.budget = make_budget_view(cfg, target.catalog, self.offline_space,
                                       self.online_space, known_ram_bytes=target.ram_bytes)
        workload = make_workload(cfg, target.dsn)
        self.measurer = Measurer(target.dsn, target.catalog, workload, cfg.measure,
                                 controller=target.controller,
                                 restart_timeout_s=cfg.database.restart_timeout_s,
                                 feasible=self.budget.violation,
                                 on_restart=self._restarted)
        names = self.offline_space.names + self.online_space.names
        # the budget's knobs are tracked even when not tuned: the online budget needs them
        tracked = names + [n for n in BUDGET_KNOBS if n not in names]
        current = self.measurer.current_settings(tracked)
        self.original = {n: current[n] for n in names}
        self.measurer.in_force = dict(current)
        self._in_force_changed()
        try:
            self.original_auto_conf = target.controller.read_auto_conf()
        except (HarmonyError, OSError, AttributeError) as exc:
            logger.warning("cannot read postgresql.auto.conf (%s): the original configuration "
                           "will be restored with ALTER SYSTEM", exc)
        try:
            row = self.measurer.conn().execute(
                "SELECT sum(pg_relation_size(oid)) FROM pg_class WHERE relkind IN ('r', 'i', 'm') "
                "AND relnamespace NOT IN ('pg_catalog'::regnamespace, "
                "'information_schema'::regnamespace)").fetchone()
            self.relpages_bytes = int(row[0]) if row and row[0] else None
        except (HarmonyError, psycopg.Error) as exc:
            logger.info("database size unknown (%s)", exc)
        logger.info("tuning %s on %s: offline %s, online %s; original %s", cfg.name,
                    "the embedded cluster" if target.embedded else target.dsn,
                    self.offline_space.names, self.online_space.names, self.original)
        self.measurer.start()

    def _cleanup(self, *, keep_best: bool, interrupted: bool) -> None:
        measurer = self.measurer
        if measurer is None:
            return
        measurer.stop()
        wanted = dict(self.best.in_force) if keep_best and self.best is not None \
            else dict(self.original)
        what = "best" if keep_best and self.best is not None else "original"
        try:
            outcome = measurer.restore(wanted, auto_conf=None if keep_best
                                       else self.original_auto_conf)
            logger.info("left the server running with the %s configuration%s", what,
                        f" ({outcome})" if outcome else "")
            self._in_force_changed()
        except (HarmonyError, OSError) as exc:
            logger.error("could not restore the %s configuration: %s", what, exc)
        finally:
            measurer.close()

    # -- metrics ---------------------------------------------------------------------------
    def _restarted(self, seconds: float, ok: bool) -> None:
        self.metrics.record_restart(seconds, ok=ok)

    def _in_force_changed(self) -> None:
        """Export the knobs now in force and the budget slack they leave."""
        assert self.measurer is not None
        in_force = self.measurer.in_force
        self.metrics.set_knobs(in_force)
        slack = self._budget_slack(in_force)
        if slack is not None:
            self.metrics.set_budget_slack(slack)

    def _budget_slack(self, in_force: Mapping[str, str]) -> int | None:
        """Bytes the settings in force leave under the tightest budget inequality."""
        if self.budget is None or not all(n in in_force for n in BUDGET_KNOBS):
            return None
        budget = self.budget.in_bytes
        catalog = self.budget.catalog
        try:
            point = {n: float(catalog[n].parse(in_force[n]))
                     for n in ("shared_buffers", *ONLINE_MEMORY_KNOBS)}
            return budget.slack(point)
        except HarmonyError as exc:
            logger.debug("no budget slack for %s: %s", in_force, exc)
            return None

    # -- sessions --------------------------------------------------------------------------
    def _definition(self, label: str, space: KnobSpace, constraints: list[str],
                    strategy: str, options: Mapping[str, Any],
                    init_point: Mapping[str, Any] | None, *, warm: bool = False,
                    metadata: Mapping[str, Any] | None = None) -> SessionDefinition:
        """The session's definition; with ``warm`` (and prior sessions) the search starts
        from the priors' best points, else from ``init_point`` (when given)."""
        cfg = self.config
        sp = space.space
        opts = dict(options)
        plugins = []
        if constraints:
            plugins.append(PluginSpec("constraint", {"constraints": constraints}))
        plugins.append(PluginSpec("agg", {"times": cfg.measure.samples,
                                          "how": cfg.measure.aggregate}))
        definition = SessionDefinition(
            name=f"{cfg.name}-{self.run_id}-{label}"[:200], space=sp, strategy=strategy,
            strategy_options=opts, plugins=tuple(plugins), maximize=True, objective="qpm",
            seed=cfg.seed, lease_seconds=3600.0,
            metadata={"tuner": cfg.name, "run": self.run_id, "session": label,
                      "workload": str(cfg.workload.mix or cfg.workload.schedule or "pgbench"),
                      **dict(metadata or {})})
        if warm and self.priors:
            warmed = apply_warm_start(definition, self.priors, host=host_metadata())
            info = warmed.metadata.get("warm_start")
            if warmed is not definition and info is not None:
                self._decide(f"{label}: warm start from prior session(s) "
                             f"{', '.join(info['sessions'])}: first point {info['start']} "
                             f"({info['option']})")
                return warmed
            where = f"from {dict(init_point)}" if init_point else "as configured"
            self._decide(f"{label}: warm start: no compatible prior session has a point in "
                         f"range; starting {where}")
        if init_point is not None and "init_point" not in opts:
            opts["init_point"] = sp.snap(init_point)
            opts.setdefault("init_method", "point")
            definition = replace(definition, strategy_options=opts)
        return definition

    def _open_session(self, client: HarmonyClient, definition: SessionDefinition,
                      kind: str) -> Session:
        """Create (or join) the session and make it the one the metrics show."""
        session = client.create_session(definition, exist_ok=True)
        if all(s.name != session.name for s, _ in self.sessions):
            self.sessions.append((session, kind))
        self.metrics.start_session(session.name, kind)
        return session

    def _run_session(self, session: Session, space: KnobSpace, evaluations: int, label: str,
                     after_eval: Callable[[PointRecord], bool] | None = None) -> str:
        """Fetch, measure, report until converged, out of evaluations, or stopped by a hook.

        Every fetched trial is one throughput sample; the session's ``agg`` plugin asks for
        the same point ``samples`` times and aggregates. Returns why it stopped.
        """
        assert self.measurer is not None
        measurer, samples = self.measurer, self.config.measure.samples
        done = 0
        current: PointRecord | None = None
        idle = 0
        while done < evaluations:
            got = session.fetch(timeout=FETCH_TIMEOUT_S)
            if got is None:
                if session.converged:
                    logger.info("[%s] converged after %d evaluations", label, done)
                    return "converged"
                idle += 1
                if idle >= 3:
                    logger.warning("[%s] no point to measure after %d tries; ending the session",
                                   label, idle)
                    return "idle"
                continue
            idle = 0
            settings = space.settings(got.point)
            if current is None or current.point != got.point or len(current.samples) >= samples:
                current = PointRecord(session=label, point=dict(got.point), settings=settings)
                outcome = measurer.apply(settings)
                current.restart_s, current.apply_s = outcome.restart_s, outcome.apply_s
                if outcome.failure is not None:
                    current.failure = outcome.failure
                    current.in_force = dict(measurer.in_force)
                    session.report_failure(got.trial_id, outcome.failure)
                    logger.info("[%s] eval %d/%d %s failed: %s", label, done + 1, evaluations,
                                settings, outcome.failure)
                    done += 1
                    self._recorded(current)
                    current = None
                    continue
                current.in_force = dict(measurer.in_force)
            try:
                sample = measurer.sample()
            except HarmonyError as exc:
                current.failure = f"sampling failed: {exc}"
                session.report_failure(got.trial_id, current.failure)
                logger.warning("[%s] %s: %s", label, settings, current.failure)
                done += 1
                self._recorded(current)
                current = None
                continue
            current.samples.append(sample)
            session.report(got.trial_id, sample.qpm)
            best = self.best.value if self.best is not None else None
            logger.info("[%s] eval %d/%d %s sample %d/%d: %.1f qpm (best so far %s)", label,
                        done + 1, evaluations, settings, len(current.samples), samples,
                        sample.qpm, f"{best:.1f} qpm" if best is not None else "none")
            if len(current.samples) >= samples:
                if _no_block_counts(current):
                    current.window = measurer.point_window()
                current.value = aggregate([s.qpm for s in current.samples],
                                          self.config.measure.aggregate)
                done += 1
                self._recorded(current)
                finished, current = current, None
                if after_eval is not None and after_eval(finished):
                    return "stopped"
        return "budget"

    def _recorded(self, record: PointRecord) -> None:
        self.records.append(record)
        self.metrics.record_point(record, kind=_kind(record.session), restarts=False)
        self._in_force_changed()
        if record.value is not None and (self.best is None
                                         or record.value > (self.best.value or 0.0)):
            self.best = record
            logger.info("new best: %.1f qpm with %s", record.value, record.in_force)
        if self.on_record is not None:
            self.on_record(record)

    # -- the passes ------------------------------------------------------------------------
    def _run_flow(self, client: HarmonyClient) -> int:
        cfg = self.config
        passes = 0
        for n in range(1, cfg.flow.max_passes + 1):
            passes = n
            self.metrics.start_pass(n)
            logger.info("=== pass %d of at most %d (%s) ===", n, cfg.flow.max_passes,
                        cfg.flow.kind)
            offline_best = self._offline_pass(client, n)
            again = self._online_pass(client, n, offline_best)
            if cfg.flow.kind == "one-pass" or not again:
                break
            if n == cfg.flow.max_passes:
                self._decide(f"pass {n}: a restart was asked for, but max_passes "
                             f"{cfg.flow.max_passes} is reached")
        return passes

    def _decide(self, text: str) -> None:
        self.decisions.append(text)
        logger.info("decision: %s", text)

    def _offline_pass(self, client: HarmonyClient, n: int) -> float | None:
        assert self.measurer and self.offline_space and self.budget
        cfg, space = self.config, self.offline_space
        label = f"p{n}-offline"
        start = space.point_from_settings(self._best_or_current(space.names))
        self._make_room_for_shared_buffers(label, space, start)
        definition = self._definition(label, space,
                                      self.budget.offline_constraints(self.measurer.in_force),
                                      cfg.offline.strategy, cfg.offline.strategy_options, start,
                                      warm=n == 1)
        session = self._open_session(client, definition, "offline")
        first = len(self.records)
        prior = None
        if cfg.offline.prior and "shared_buffers" in space.names:
            try:
                prior = OfflinePrior(space, self.budget.shared_buffers_cap(self.measurer.in_force),
                                     cfg.offline.prior_min_r2, self.relpages_bytes)
            except ImportError as exc:
                self._decide(f"{label}: BME prior unavailable ({exc}); plain search")
        used_prior = False

        def after_eval(record: PointRecord) -> bool:
            nonlocal used_prior
            if prior is None or used_prior:
                return False
            prior.add(record)
            advice = prior.advice()
            if advice is None:
                return False
            used_prior = True
            self._note_bme(prior)
            if not advice.usable:
                self._decide(f"{label}: BME prior not used ({advice.reason}); the plain "
                             f"search goes on")
                return False
            self._decide(f"{label}: BME prior fitted ({advice.reason}); restarting the offline "
                         f"search in {advice.range_text} from {advice.start}")
            self.recommended = {**self.original, **space.settings(
                {**space.point_from_settings(self.original), **advice.start})}
            return True

        evaluations = cfg.offline.evaluations
        reason = self._run_session(session, space, evaluations, label, after_eval)
        if reason == "stopped" and used_prior:
            # the prior advised a range and start: a fresh session inside the advised range
            advice = prior.last if prior is not None else None
            assert advice is not None  # used_prior is only set with an advice
            narrowed = KnobSpace(tuple(p if p.name not in advice.bounds else
                                       _with_bounds(p, advice.bounds[p.name])
                                       for p in space.params))
            spent = len(self.records) - first
            label2 = f"p{n}-offline-bme"
            definition = self._definition(label2, narrowed,
                                          self.budget.offline_constraints(self.measurer.in_force),
                                          cfg.offline.strategy, cfg.offline.strategy_options,
                                          advice.start, metadata={"bme": self.bme}
                                          if self.bme is not None else None)
            session2 = self._open_session(client, definition, "offline")
            self._run_session(session2, narrowed, max(1, evaluations - spent), label2)
        best = self._best_of(self.records[first:])
        if best is None:
            self._decide(f"{label}: no offline point measured successfully; keeping "
                         f"{self._current(space.names)}")
            return None
        # put the offline best in force for the online session
        outcome = self.measurer.apply({k: best.in_force[k] for k in space.names})
        self._in_force_changed()
        if outcome.failure is not None:
            logger.warning("%s: could not put the offline best back in force: %s", label,
                           outcome.failure)
        logger.info("[%s] best %.1f qpm with %s", label, best.value or 0.0,
                    {k: best.in_force[k] for k in space.names})
        return best.value

    def _make_room_for_shared_buffers(self, label: str, space: KnobSpace,
                                      start: Mapping[str, Any]) -> None:
        """Lower the online memory knobs in force when, with them, the budget leaves less
        than the offline session's start (within the fraction cap) for shared_buffers: every
        offline point is measured with them in force, and none may break the budget."""
        assert self.measurer is not None and self.budget is not None
        if "shared_buffers" not in space.names:
            return
        knob = space["shared_buffers"]
        param = knob.param
        assert isinstance(param, IntParam), knob
        highest = min(int(knob.canonical(param.upper)),
                      self.budget.budget.shared_buffers_max_bytes)
        wanted = max(int(knob.canonical(param.min)),
                     min(int(knob.canonical(start["shared_buffers"])), highest))
        in_force = self.measurer.in_force
        if self.budget.shared_buffers_cap(in_force) >= wanted:
            return
        lowered = self.budget.fit_online(in_force, wanted)
        if not lowered:
            return
        # lowering memory knobs only frees memory: applied even while the shared_buffers in
        # force (the user's, before the first offline point) still breaks the budget
        outcome = self.measurer.apply(lowered, check_budget=False)
        self._in_force_changed()
        if outcome.failure is not None:
            raise ConstraintError(f"{label}: could not lower the online memory knobs to "
                                  f"{lowered} to make room for shared_buffers: "
                                  f"{outcome.failure}")
        self._decide(f"{label}: the online memory knobs in force left less than "
                     f"{format_bytes(wanted)} for shared_buffers under the memory budget; "
                     f"lowered to {lowered} before the offline search")

    def _online_pass(self, client: HarmonyClient, n: int, offline_best: float | None) -> bool:
        """Run the online session; True when a detector asks for another pass."""
        assert self.measurer and self.online_space and self.budget
        cfg, space = self.config, self.online_space
        label = f"p{n}-online"
        constraints = self.budget.online_constraints(self.measurer.in_force)
        start = space.point_from_settings(self._best_or_current(space.names)) if n > 1 else None
        options = dict(cfg.online.strategy_options)
        definition = self._definition(label, space, constraints, cfg.online.strategy, options,
                                      start, warm=n == 1)
        session = self._open_session(client, definition, "online")
        first = len(self.records)
        vertices = int(options.get("simplex_size", len(space.names) + 1))
        multi = cfg.flow.kind == "multi-pass"
        local_min = LocalMinimumDetector(cfg.flow.local_minimum_threshold)
        stuck = False

        def after_eval(record: PointRecord) -> bool:
            nonlocal stuck
            mine = self.records[first:]
            if not (multi and cfg.flow.local_minimum and offline_best is not None) \
                    or len(mine) < vertices:
                return False
            window = [r.value if r.value is not None else math.nan for r in mine[-vertices:]]
            if local_min.check(window, offline_best):
                stuck = True
                self.metrics.record_local_minimum()
                self._decide(f"{label}: local minimum: the last {vertices} online vertices "
                             f"{[round(v, 1) for v in window]} are all worse than the offline "
                             f"best {offline_best:.1f} by more than "
                             f"{100 * cfg.flow.local_minimum_threshold:.0f}%: back to offline")
                return True
            return False

        reason = self._run_session(session, space, cfg.online.evaluations, label, after_eval)
        mine = self.records[first:]
        best = self._best_of(mine)
        if best is not None:
            self.measurer.apply({k: best.in_force[k] for k in space.names})
            self._in_force_changed()
        if stuck:
            return True
        if not multi or cfg.flow.monitor == 0 or best is None:
            return False
        # after convergence (or the evaluation budget): watch for a workload shift
        values = [r.value for r in mine[-vertices:] if r.value is not None]
        if not values:
            return False
        shift = WorkloadShiftDetector(cfg.flow.shift_outside, cfg.flow.shift_margin)
        noise = sample_spread(mine[-vertices:])
        band = shift.arm(values, noise)
        self._decide(f"{label}: {reason}; workload-shift band [{band[0]:.1f}, {band[1]:.1f}] "
                     f"from the last {len(values)} vertices (widened by "
                     f"{100 * max(noise, cfg.flow.shift_margin):.0f}%: margin "
                     f"{100 * cfg.flow.shift_margin:.0f}%, sample spread {100 * noise:.0f}%); "
                     f"monitoring {cfg.flow.monitor} measurements of the best point")
        for i in range(cfg.flow.monitor):
            record = self.measurer.measure(f"{label}-monitor", best.point,
                                           {k: best.in_force[k] for k in space.names})
            record.in_force = dict(self.measurer.in_force)
            self.records.append(record)
            self.metrics.record_point(record, kind="online", restarts=False)
            self._in_force_changed()
            value = record.value if record.value is not None else math.nan
            logger.info("[%s-monitor] %d/%d: %.1f qpm", label, i + 1, cfg.flow.monitor, value)
            if shift.observe(value):
                self.metrics.record_workload_shift()
                self._decide(f"{label}: workload shift: {cfg.flow.shift_outside} consecutive "
                             f"measurements outside [{band[0]:.1f}, {band[1]:.1f}]: back to "
                             f"offline; the best so far was measured under the old workload "
                             f"and is forgotten")
                # values from before the shift do not rank configurations for the new workload
                self.best = None
                self.ranked_from = len(self.records)
                return True
        return False

    # -- helpers ---------------------------------------------------------------------------
    def _runners_up(self, best: Mapping[str, str], count: int) -> list[dict[str, str]]:
        """The ``count`` next-best distinct configurations measured under the current workload.

        A configuration that breaks the memory budget as a whole is skipped: an offline point
        was measured under the original online settings, which the online budget may refuse.
        """
        assert self.measurer is not None and self.budget is not None
        names = list(self.original)
        seen = {tuple(best[n] for n in names), tuple(self.original[n] for n in names)}
        out: list[dict[str, str]] = []
        ranked = sorted((r for r in self.records[self.ranked_from:]
                         if r.value is not None and not r.session.startswith("final")),
                        key=lambda r: r.value or 0.0, reverse=True)
        for record in ranked:
            if len(out) >= count:
                break
            settings = {n: record.in_force.get(n, self.original[n]) for n in names}
            key = tuple(settings[n] for n in names)
            if key in seen:
                continue
            seen.add(key)
            wanted = {**self.measurer.in_force, **record.in_force, **settings}
            reason = self.budget.violation(wanted, wanted)
            if reason is not None:
                logger.info("final: runner-up %s not re-measured: %s", settings, reason)
                continue
            out.append(settings)
        return out

    @staticmethod
    def _best_of(records: list[PointRecord]) -> PointRecord | None:
        done = [r for r in records if r.value is not None]
        return max(done, key=lambda r: r.value or 0.0) if done else None

    def _current(self, names: list[str]) -> dict[str, str]:
        assert self.measurer is not None
        return {n: self.measurer.in_force[n] for n in names}

    def _best_or_current(self, names: list[str]) -> dict[str, str]:
        if self.best is not None:
            return {n: self.best.in_force.get(n, self.original[n]) for n in names}
        return self._current(names)

    # -- the end ---------------------------------------------------------------------------
    def _note_bme(self, prior: OfflinePrior) -> None:
        """Export the prior's BME fit (metrics) and keep it for the sessions' metadata."""
        meta = prior.metadata()
        if meta is None:
            return
        self.bme = meta
        try:
            self.metrics.record_bme_fit(prior.fit.params, r2=float(prior.fit.r2),
                                        sizes=prior.size_range)
        except HarmonyError as exc:
            logger.info("BME fit not exported to the metrics: %s", exc)

    def _finish(self, passes: int) -> TuneResult:
        assert self.measurer is not None and self.offline_space is not None
        cfg = self.config
        best = ({n: self.best.in_force[n] for n in self.original} if self.best is not None
                else dict(self.original))
        candidates: list[tuple[str, dict[str, str]]] = [("default", self.original)]
        if cfg.final.recommended and self.recommended is not None:
            candidates.append(("recommended", self.recommended))
        # the original is measured once per round, as "default": measured again as "best"
        # it would be compared with itself, and noise alone would decide the ratio
        search_found_original = best == self.original
        if search_found_original:
            self._decide("final: the search's best is the original configuration")
        else:
            candidates.append(("best", best))
        if self.best is not None and cfg.final.rounds > 0:
            candidates += [(f"candidate-{i}", settings) for i, settings
                           in enumerate(self._runners_up(best, cfg.final.candidates - 1), 2)]
        rounds: list[dict[str, float | None]] = []
        if self.best is not None and cfg.final.rounds > 0:
            logger.info("=== %s, interleaved, %d rounds ===",
                        " vs ".join(w for w, _ in candidates), cfg.final.rounds)
            for r in range(cfg.final.rounds):
                row: dict[str, float | None] = {}
                for which, settings in candidates:
                    kind = "baseline" if which == "default" else "final"
                    self.metrics.set_phase(kind)
                    # the default is the user's own configuration: measured even when it
                    # breaks the budget the search was held to
                    record = self.measurer.measure(f"final-{which}", {}, settings,
                                                   check_budget=which != "default")
                    self.records.append(record)
                    self.metrics.record_point(record, kind=kind, restarts=False)
                    self._in_force_changed()
                    row[which] = record.value
                    logger.info("[final] round %d/%d %s: %s qpm%s", r + 1, cfg.final.rounds,
                                which, f"{record.value:.1f}" if record.value else "n/a",
                                f" ({record.failure})" if record.failure else "")
                rounds.append(row)

        def mean(which: str) -> float | None:
            vals = [row[which] for row in rounds if row.get(which) is not None]
            return sum(vals) / len(vals) if vals else None  # type: ignore[arg-type]

        # several candidates: the re-measured winner is the tuned configuration
        finalists = [(which, settings) for which, settings in candidates
                     if which not in ("default", "recommended") and mean(which) is not None]
        if finalists:
            which, best = max(finalists, key=lambda c: mean(c[0]) or 0.0)
            if len(finalists) > 1:
                self._decide(f"final: {len(finalists)} candidates re-measured over "
                             f"{len(rounds)} rounds; {which} has the best mean "
                             f"({mean(which):.1f} qpm)")
            if len(finalists) > 1 or which != "best":
                for row in rounds:  # the comparison reports the winner under "best"
                    row["search-best"] = row.get("best", row.get("default"))
                    row["best"] = row.get(which)
        elif search_found_original:
            for row in rounds:
                row["best"] = row.get("default")
        default_qpm, best_qpm = mean("default"), mean("best")
        if default_qpm is not None and best_qpm is not None and best_qpm <= default_qpm \
                and best != self.original:
            # measured side by side, the search found nothing better: never recommend a
            # configuration that lost to the one the server already had
            self._decide(f"final: the original configuration measured {default_qpm:.1f} qpm "
                         f"against {best_qpm:.1f} for the best candidate: no improvement "
                         f"found; the original configuration is the result")
            best, best_qpm = dict(self.original), default_qpm
        recommended_qpm = mean("recommended")
        if default_qpm is not None:
            self.metrics.record_default(default_qpm)
        comparison: dict[str, Any] | None = None
        if default_qpm is not None and best_qpm is not None:
            comparison = {"default": default_qpm, "tuned": best_qpm, "unit": "qpm"}
            if recommended_qpm is not None:
                comparison["recommended"] = recommended_qpm
        changed = {k: v for k, v in best.items() if v != self.original.get(k)}
        result = TuneResult(best_settings=best, default_settings=dict(self.original),
                            best_qpm=best_qpm, default_qpm=default_qpm,
                            ab_rounds=rounds, passes=passes,
                            evaluations=sum(1 for r in self.records
                                            if not r.session.startswith("final")),
                            output_dir=self.output_dir, decisions=list(self.decisions),
                            search_best_qpm=self.best.value if self.best is not None else None,
                            recommended_qpm=recommended_qpm, comparison=comparison,
                            bme=self.bme, sessions=[s.name for s, _ in self.sessions])
        if self.output_dir is not None:
            self._write_outputs(result, changed or best)
        return result

    def _write_outputs(self, result: TuneResult, settings: Mapping[str, str]) -> None:
        out = self.output_dir
        assert out is not None and self.offline_space is not None
        out.mkdir(parents=True, exist_ok=True)
        offline = set(self.offline_space.names)
        (out / "alter_system.sql").write_text(alter_system_sql(settings, offline))
        (out / "postgresql.conf.fragment").write_text(conf_fragment(settings))
        with (out / "trials.jsonl").open("w") as fh:
            for record in self.records:
                fh.write(json.dumps(record.to_dict(), default=str) + "\n")
        (out / "summary.json").write_text(json.dumps(result.to_dict(), indent=2, default=str)
                                          + "\n")
        exported = self._export_sessions(out / "sessions", result)
        logger.info("wrote %s", ", ".join(str(out / f) for f in (
            "alter_system.sql", "postgresql.conf.fragment", "trials.jsonl", "summary.json")))
        if exported:
            logger.info("exported %d session(s) to %s; e.g. harmony report %s --from-xml %s",
                        len(exported), out / "sessions", exported[0].stem, exported[0])

    def _export_sessions(self, directory: Path, result: TuneResult) -> list[Path]:
        """Each session of the run as prior data (XML), its metadata completed with the
        comparison and (offline sessions) the BME fit, for reports and later warm starts."""
        written = []
        for session, kind in self.sessions:
            try:
                prior = session_prior(session)
            except HarmonyError as exc:
                logger.warning("session %s not exported: %s", session.name, exc)
                continue
            metadata = dict(prior.definition.get("metadata") or {})
            if result.comparison is not None:
                metadata["comparison"] = result.comparison
            if kind == "offline" and self.bme is not None:
                metadata["bme"] = self.bme
            prior.definition = {**prior.definition, "metadata": metadata}
            written.append(dump(prior, directory / f"{_file_name(prior.name)}.xml"))
        return written


def session_prior(session: Session) -> PriorSession:
    """A session (on a server or standalone) as prior data; in standalone mode, where the
    session keeps no host records, this process's host stands for its one client."""
    described = session.status()
    rows = session.trials()
    hosts = [HostInfo(str(h["client_id"]), h.get("joined"), h.get("hostname"),
                      h.get("cpu_count"), h.get("ram_bytes"), h.get("os"), h.get("python"),
                      h.get("left"))
             for h in described.get("hosts") or [] if isinstance(h, Mapping)
             and h.get("client_id")]
    if not hosts:
        facts = host_metadata()
        hosts = [HostInfo(session.client_id, described.get("created"), facts.get("hostname"),
                          facts.get("cpu_count"), facts.get("ram_bytes"), facts.get("os"),
                          facts.get("python"))]
    trials = [PriorTrial(int(r["id"]), int(r["candidate"]), dict(r["point"]), r.get("client"),
                         str(r["status"]), r.get("value"), r.get("failure"), r.get("leased_at"),
                         r.get("reported_at")) for r in rows]
    return PriorSession(name=str(described.get("name", session.name)),
                        definition=dict(described["definition"]),
                        created=described.get("created"), trials=trials, hosts=hosts,
                        status=str(described.get("status", "live")))


def sample_spread(records: list[PointRecord]) -> float:
    """Median over ``records`` of each one's relative sample spread, (max − min) / median.

    How far repeated samples of one configuration already disagree: a drop of that size is
    noise, not a workload shift. 0 when no record has two positive samples.
    """
    spreads = []
    for record in records:
        qpm = [s.qpm for s in record.samples if s.qpm > 0]
        if len(qpm) >= 2:
            spreads.append((max(qpm) - min(qpm)) / statistics.median(qpm))
    return float(statistics.median(spreads)) if spreads else 0.0


def _no_block_counts(record: PointRecord) -> bool:
    """True when the samples' counters show no block access (not flushed yet)."""
    total = record.stats_total()
    return total is None or total.blks_hit + total.blks_read == 0


def _file_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _kind(label: str) -> str:
    """The metrics' evaluation kind of a record's session label."""
    if label.startswith("final-default"):
        return "baseline"
    if label.startswith("final"):
        return "final"
    return "offline" if "offline" in label else "online"


def _with_bounds(param: KnobParam, bounds: tuple[float, float]) -> KnobParam:
    """``param`` with its session range narrowed to ``bounds`` (on its grid)."""
    narrowed = Space((param.param,)).narrowed({param.name: bounds}).params[0]
    return replace(param, param=narrowed)


def run_tuning(config: TunerConfig, **kwargs: Any) -> TuneResult:
    """Convenience wrapper: ``Tuner(config, **kwargs).run()``."""
    if config.flow.kind not in ("one-pass", "multi-pass"):
        raise ConfigError(f"flow.kind must be one-pass or multi-pass, got {config.flow.kind!r}")
    return Tuner(config, **kwargs).run()
