"""Phase 1, prepare: the knob spaces, the memory budget, the measurer on the target and the
pool of replicas (of one without others); and, at the very end of a run, every database of the
pool left with its original (or best) configuration.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

import psycopg

from harmony_base.errors import ConfigError, HarmonyError
from harmony_core.priordata import PriorSession
from tuner_client.api.client import HarmonyClient
from tuner_client.budget import BUDGET_KNOBS, BudgetView, make_budget_view
from tuner_client.config import TunerConfig, resolve_knob_space
from tuner_client.measurer import (
    ApplyHooks,
    LiveWatch,
    Measurer,
    PointRecord,
    ServerAccess,
    Workload,
)
from tuner_client.measurer.guardrails import Guardrail, Trip
from tuner_client.measurer.prewarm import drop_leftover_extensions
from tuner_client.metrics.exporter import TunerMetrics
from tuner_client.phases.state import RunContext
from tuner_client.plan.managed import managed_knobs
from tuner_client.plan.proposals import choose_online_knobs
from tuner_client.replicas import Replica, ReplicaPool
from tuner_client.servers.target import Target
from workloads.factory import make_workload

logger = logging.getLogger(__name__)


def prepare(config: TunerConfig, *, run_id: str, client: HarmonyClient, target: Target,
            metrics: TunerMetrics, priors: list[PriorSession],
            workload: Workload | None = None, replicas: Sequence[Replica] = (),
            lease_s: float = 120.0, remote: int = 0) -> RunContext:
    """Resolve the spaces against the server's catalog, build the budget and the measurer,
    read the original configuration, start the workload, and join ``replicas`` (more
    databases measured at once, each with its own measurer; ``remote`` more are expected
    from other hosts) to the run's pool after ``target``."""
    offline_knobs = config.offline.knobs
    online_knobs, proposals = (choose_online_knobs(config, target) if config.online.auto
                               else (config.online.knobs, []))
    managed = None
    if target.managed is not None:  # a session's knobs only; the rest said, not measured
        online_knobs, managed = managed_knobs(config, target.catalog, target.managed,
                                              offline_knobs, online_knobs)
        offline_knobs = ()
    offline_space = resolve_knob_space(offline_knobs, target.catalog, kind="offline")
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
    drop_leftovers(measurer)
    primary = Replica("replica-1", target, measurer=measurer)
    pool = ReplicaPool([primary, *replicas], lease_s=lease_s, remote=remote)
    ctx = RunContext(config=config, run_id=run_id, client=client, target=target,
                     measurer=measurer, budget=budget, offline_space=offline_space,
                     online_space=online_space, original={n: current[n] for n in names},
                     metrics=metrics, pool=pool, priors=priors, knob_proposals=proposals,
                     managed=managed)
    ctx.in_force_changed()
    try:
        primary.original_auto_conf = target.controller.read_auto_conf()
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
    try:
        for replica in pool.replicas[1:]:
            _join(ctx, replica)
    except BaseException:
        leave_server(ctx, None, keep_best=False)
        raise
    if pool.replicated:
        logger.info("tuning on %d replicas: %s", len(pool.replicas),
                    ", ".join(f"{r.name} ({r.target.dsn})" for r in pool.replicas))
    return ctx


def _join(ctx: RunContext, replica: Replica) -> None:
    """Give ``replica`` its own measurer (same knobs, budget and workload kind as the
    primary's) and check it starts from the primary's configuration."""
    measurer = make_measurer(ctx.config, replica.target, ctx.budget, ctx.metrics)
    try:
        current = measurer.current_settings(list(ctx.measurer.in_force))
    except BaseException:
        measurer.close()
        raise
    measurer.in_force = dict(current)
    differs = {n: (current[n], ctx.original[n]) for n in ctx.original
               if current[n] != ctx.original[n]}
    if differs:
        measurer.close()
        raise ConfigError(f"replica {replica.name} does not start from the primary's "
                          f"configuration (knob: (replica, primary)): {differs}; "
                          f"replicas must be identical")
    with contextlib.suppress(HarmonyError, OSError, AttributeError):
        replica.original_auto_conf = replica.target.controller.read_auto_conf()
    replica.measurer = measurer
    measurer.start()


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
                        workload if workload is not None else make_workload(
                            config.workload, target.dsn, seed=config.seed),
                        config.measure, hooks=ApplyHooks(budget.violation, restarted), live=live)
    if guard is not None:
        guard.memory_used = measurer.server_memory
    return measurer


def drop_leftovers(measurer: Measurer) -> None:
    """Drop the extensions an earlier run created for warm restarts and died before dropping
    (the database is left as the user had it; issue 31)."""
    try:
        drop_leftover_extensions(measurer.live_conn())
    except (HarmonyError, psycopg.Error) as exc:
        logger.warning("could not look for extensions left by an earlier run: %s", exc)


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


def leave_server(ctx: RunContext, best: PointRecord | None, *, keep_best: bool) -> bool:
    """Stop the workload and leave every database of the pool running with the original
    configuration (the user's ``postgresql.auto.conf`` restored), or with the best one when
    ``keep_best``; a replica that no longer answers is only reported. True when every
    database was left so (the run's completion mark may then be written)."""
    keep = keep_best and best is not None
    wanted = dict(best.in_force) if keep and best is not None else dict(ctx.original)
    what = "best" if keep else "original"
    left = True
    for replica in ctx.pool.replicas:
        measurer = replica.measurer
        if measurer is None:
            continue
        if replica is not ctx.pool.primary and not replica.answers():
            logger.error("replica %s does not answer; its configuration cannot be "
                         "restored (it was dropped: %s)", replica.name, replica.dropped)
            measurer.close()
            left = False
            continue
        left = _leave(replica, measurer, wanted, what, keep) and left
    ctx.in_force_changed()
    return left


def _leave(replica: Replica, measurer: Measurer, wanted: dict[str, str], what: str,
           keep: bool) -> bool:
    """Leave one database with ``wanted`` in force, its measurer closed; False on failure."""
    measurer.stop()
    try:
        outcome = measurer.restore(wanted, auto_conf=None if keep
                                   else replica.original_auto_conf)
        logger.info("left %s running with the %s configuration%s", replica.target.dsn, what,
                    f" ({outcome})" if outcome else "")
        return True
    except (HarmonyError, OSError) as exc:
        logger.error("could not restore the %s configuration of %s: %s", what,
                     replica.target.dsn, exc)
        return False
    finally:
        measurer.close()
