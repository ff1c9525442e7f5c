"""Phase 1, prepare: the knob spaces, the memory budget and the measurer on the target; and,
at the very end of a run, the server left with its original (or best) configuration.
"""

from __future__ import annotations

import logging

import psycopg

from harmony.base.errors import HarmonyError
from harmony.core.priordata import PriorSession
from tuner_client.budget_view import BudgetView, make_budget_view
from tuner_client.client import HarmonyClient
from tuner_client.config import TunerConfig, resolve_knob_space
from tuner_client.guardrails import Guardrail, Trip
from tuner_client.knob_proposals import choose_online_knobs
from tuner_client.measurer import (
    ApplyHooks,
    LiveWatch,
    Measurer,
    PointRecord,
    ServerAccess,
    Workload,
)
from tuner_client.metrics import TunerMetrics
from tuner_client.phases.state import BUDGET_KNOBS, RunContext
from tuner_client.target import Target, make_workload

logger = logging.getLogger(__name__)


def prepare(config: TunerConfig, *, run_id: str, client: HarmonyClient, target: Target,
            metrics: TunerMetrics, priors: list[PriorSession],
            workload: Workload | None = None) -> RunContext:
    """Resolve the spaces against the server's catalog, build the budget and the measurer,
    read the original configuration, and start the workload."""
    offline_space = resolve_knob_space(config.offline.knobs, target.catalog, kind="offline")
    online_knobs, proposals = (choose_online_knobs(config, target) if config.online.auto
                               else (config.online.knobs, []))
    online_space = resolve_knob_space(online_knobs, target.catalog, kind="online")
    budget = make_budget_view(config, target.catalog, offline_space, online_space,
                              known_ram_bytes=target.ram_bytes)

    measurer = make_measurer(config, target, budget, metrics, workload)
    names = offline_space.names + online_space.names
    # the budget's knobs are tracked even when not tuned: the online budget needs them
    tracked = names + [n for n in BUDGET_KNOBS if n not in names]
    try:
        current = measurer.current_settings(tracked)
    except BaseException:
        measurer.close()
        raise
    measurer.in_force = dict(current)
    ctx = RunContext(config=config, run_id=run_id, client=client, target=target,
                     measurer=measurer, budget=budget, offline_space=offline_space,
                     online_space=online_space, original={n: current[n] for n in names},
                     metrics=metrics, priors=priors, knob_proposals=proposals)
    ctx.in_force_changed()
    try:
        ctx.original_auto_conf = target.controller.read_auto_conf()
    except (HarmonyError, OSError, AttributeError) as exc:
        logger.warning("cannot read postgresql.auto.conf (%s): the original configuration "
                       "will be restored with ALTER SYSTEM", exc)
    ctx.relpages_bytes = _database_bytes(measurer)
    logger.info("tuning %s on %s: offline %s, online %s; original %s", config.name,
                "the embedded cluster" if target.embedded else target.dsn,
                offline_space.names, online_space.names, ctx.original)
    try:
        # a user's scripted workload checks its statements here: a bad one stops the run
        # before any knob is touched
        measurer.start()
    except BaseException:
        measurer.close()
        raise
    return ctx


def make_measurer(config: TunerConfig, target: Target, budget: BudgetView,
                  metrics: TunerMetrics, workload: Workload | None = None) -> Measurer:
    """The measurer of ``target``: the configured workload on it, its controller, the budget,
    and in live mode its own guardrails."""

    def restarted(seconds: float, ok: bool) -> None:
        metrics.record_restart(seconds, ok=ok)

    def tripped(trip: Trip) -> None:
        metrics.record_guardrail_trip(trip.kind, (trip.detected_after_s or 0.0) + trip.revert_s)

    observe = config.workload.observe
    guard = None
    if observe is not None:
        b = budget.budget
        guard = Guardrail(observe.guard,
                          memory_limit_bytes=max(0, b.ram_bytes - b.os_reserved_bytes))
    live = (LiveWatch(guard, tripped, observe.min_calls, observe.min_coverage)
            if observe is not None else LiveWatch(guard, tripped))
    measurer = Measurer(ServerAccess(target.dsn, target.catalog, target.controller,
                                     config.database.restart_timeout_s),
                        workload if workload is not None else make_workload(config, target.dsn),
                        config.measure, hooks=ApplyHooks(budget.violation, restarted), live=live)
    if guard is not None:
        guard.memory_used = measurer.server_memory
    return measurer


def _database_bytes(measurer: Measurer) -> int | None:
    """Bytes of the user relations, indexes and materialized views, if readable."""
    try:
        row = measurer.conn().execute(
            "SELECT sum(pg_relation_size(oid)) FROM pg_class WHERE relkind IN ('r', 'i', 'm') "
            "AND relnamespace NOT IN ('pg_catalog'::regnamespace, "
            "'information_schema'::regnamespace)").fetchone()
        return int(row[0]) if row and row[0] else None
    except (HarmonyError, psycopg.Error) as exc:
        logger.info("database size unknown (%s)", exc)
        return None


def leave_server(ctx: RunContext, best: PointRecord | None, *, keep_best: bool) -> None:
    """Stop the workload and leave the server running with the original configuration (the
    user's ``postgresql.auto.conf`` restored), or with the best one when ``keep_best``."""
    measurer = ctx.measurer
    measurer.stop()
    keep = keep_best and best is not None
    wanted = dict(best.in_force) if keep and best is not None else dict(ctx.original)
    what = "best" if keep else "original"
    try:
        outcome = measurer.restore(wanted, auto_conf=None if keep else ctx.original_auto_conf)
        logger.info("left the server running with the %s configuration%s", what,
                    f" ({outcome})" if outcome else "")
        ctx.in_force_changed()
    except (HarmonyError, OSError) as exc:
        logger.error("could not restore the %s configuration: %s", what, exc)
    finally:
        measurer.close()
