"""Phase 2a, the offline pass: the restart-only knobs (``shared_buffers``) with a 2-vertex
simplex, capped by the memory budget with the online knobs in force.

Once three sizes are measured the Buffer Miss Equation is fitted and, on a good fit, the
search restarts inside the advised range from the advised size (on a poor fit the plain
search goes on, and says so). With ``bme.probes`` the pass probes first
(:mod:`tuner_client.phases.offline_probes`): a usable decision replaces that fit, the search runs in
the probes' window from their size with ``bme.evaluations`` (2) and a first step of 30 % of
that size, and from pass 2 (or with ``bme.target_miss``) only the equation's size is
measured. The pass ends with its best point in force.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from harmony_base.errors import ConstraintError, HarmonyError
from harmony_base.jsontypes import JSON
from harmony_base.space import Space
from strategies.base import Strategy
from strategies.simplex import SimplexStrategy
from tuner_client.config import KnobParam, KnobSpace, format_bytes
from tuner_client.measurer import PointRecord
from tuner_client.measurer.prewarm import prewarm_summary
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.offline_bme_fit import OfflineBMEFit
from tuner_client.phases.offline_probes import ProbeAdvice, probe_shared_buffers
from tuner_client.phases.session_loop import run_session
from tuner_client.phases.sessions import open_session, session_definition, session_references
from tuner_client.phases.state import RunContext, RunState

logger = logging.getLogger(__name__)


def offline_pass(ctx: RunContext, state: RunState, n: int) -> float | None:
    """Run pass ``n``'s offline session(s); returns the best value measured, if any."""
    space, measurer = ctx.offline_space, ctx.measurer
    label = f"p{n}-offline"
    if not space.names:
        state.decide(Decision.of(label, Kind.SKIPPED, step="offline search", reason=(
            "no restart-time knob to search (offline.knobs is empty, e.g. live mode outside "
            "a maintenance window)")))
        return None
    start = space.point_from_settings(state.best_or_current(ctx, space.names))
    make_room_for_shared_buffers(ctx, state, label, space, start)
    first = len(state.records)
    warm_from = len(measurer.applier.prewarms)
    try:
        return _offline_sessions(ctx, state, n, label, space, start, first)
    finally:
        said = prewarm_summary(measurer.applier.prewarms[warm_from:])
        if said is not None:
            state.decide(Decision.line(label, f"warm restarts (measure.prewarm): {said}",
                                       design=None))


def _offline_sessions(ctx: RunContext, state: RunState, n: int, label: str, space: KnobSpace,
                      start: dict[str, Any], first: int) -> float | None:
    """The pass's probes and sessions (with a usable probe decision, the probed search)."""
    cfg, measurer = ctx.config, ctx.measurer
    probed = probe_shared_buffers(ctx, state, label, space)
    if probed is not None:
        return _probed_search(ctx, state, n, label, space, probed, first)
    references = session_references(ctx, label, space)
    definition = session_definition(ctx, state, label, space,
                                    ctx.budget.offline_constraints(measurer.in_force),
                                    cfg.offline.strategy, cfg.offline.strategy_options, start,
                                    warm=n == 1, metadata=state.bme_metadata()
                                    if state.probe_decisions else None, references=references,
                                    evaluations=cfg.offline.evaluations)
    session = open_session(ctx, state, definition, "offline")
    bme_fit = None
    if cfg.offline.prior and "shared_buffers" in space.names:  # the config's name: BME advice
        bme_fit = OfflineBMEFit(space, ctx.budget.shared_buffers_cap(measurer.in_force),
                                cfg.offline.prior_min_r2, ctx.relpages_bytes)

    def after_eval(record: PointRecord) -> bool:
        """Feed the BME fit; True (stop) once it advises a range to restart in."""
        if bme_fit is None or bme_fit.last is not None:
            return False
        bme_fit.add(record)
        advice = bme_fit.advice()
        if advice is None:
            return False
        note_bme(ctx, state, bme_fit)
        if not advice.usable:
            state.decide(Decision.of(label, Kind.MODEL, step="BME", followed=False,
                                     reason=advice.reason))
            return False
        state.decide(Decision.of(label, Kind.MODEL, step="BME", followed=True,
                                 reason=advice.reason, values=advice.start,
                                 text=advice.range_text))
        state.recommend({**ctx.original, **space.settings(
            {**space.point_from_settings(ctx.original), **advice.start})})
        return True

    evaluations = cfg.offline.evaluations
    reason = run_session(ctx, state, session, space, evaluations, label, after_eval, references,
                         seconds=cfg.offline.seconds)
    advice = bme_fit.last if bme_fit is not None else None
    if reason == "stopped" and advice is not None and advice.usable:
        # a fresh session inside the advised range, from the advised size
        narrowed = KnobSpace(tuple(p if p.name not in advice.bounds else
                                   _with_bounds(p, advice.bounds[p.name])
                                   for p in space.params))
        spent = len(state.records) - first
        label2 = f"p{n}-offline-bme"
        # the first session's reference carries over (in a pool of one it is still in force)
        references2 = session_references(ctx, label2, narrowed, references.primary_reference
                                         if references is not None else None)
        definition = session_definition(ctx, state, label2, narrowed,
                                        ctx.budget.offline_constraints(measurer.in_force),
                                        cfg.offline.strategy, cfg.offline.strategy_options,
                                        advice.start, metadata={"bme": state.bme}
                                        if state.bme is not None else None,
                                        references=references2,
                                        evaluations=max(1, evaluations - spent))
        session2 = open_session(ctx, state, definition, "offline")
        run_session(ctx, state, session2, narrowed, max(1, evaluations - spent), label2,
                    references=references2)
    return _put_best_in_force(ctx, state, label, space, first)


def _probed_search(ctx: RunContext, state: RunState, n: int, label: str, space: KnobSpace,
                   probed: ProbeAdvice, first: int) -> float | None:
    """The offline search after usable probes: inside the window from the decided size. After
    a workload shift (pass 2 on) or with a target miss probability the equation gives the size,
    so only that size is measured: the probes replace the search."""
    cfg = ctx.config
    bounds = {"shared_buffers": (float(probed.bounds[0]), float(probed.bounds[1]))}
    narrowed = KnobSpace(tuple(p if p.name not in bounds else _with_bounds(p, bounds[p.name])
                               for p in space.params))
    start = {**space.point_from_settings(ctx.current(space.names)),
             "shared_buffers": probed.start}
    only_size = n > 1 or cfg.bme.target_miss is not None
    # the probes speak for shared_buffers only: other restart-time knobs keep the plain budget
    alone = list(space.names) == ["shared_buffers"]
    unit = space["shared_buffers"].unit or ""
    options = dict(cfg.offline.strategy_options)
    if only_size:
        evaluations = 1
        why = ("a re-probe after a workload shift" if n > 1 else
               f"the target miss probability {cfg.bme.target_miss:g}")
        state.decide(Decision.of(label, Kind.START, step="equation", why=why, count=1,
                                 settings={"start": {"shared_buffers": f"{probed.start}{unit}"}}))
    elif alone:
        evaluations = min(cfg.bme.evaluations, cfg.offline.evaluations)
        if issubclass(Strategy.registry.get_class(cfg.offline.strategy), SimplexStrategy):
            # the probes place the knee to within about RADIUS of the start: a first step
            # sized by the whole window would jump over it
            options.setdefault("init_radius", probed.radius)
        state.decide(Decision.of(
            label, Kind.START, step="BME probes", count=evaluations,
            settings={"start": {"shared_buffers": f"{probed.start}{unit}"}},
            values={"init_radius": float(options.get("init_radius", probed.radius))}))
    else:
        evaluations = cfg.offline.evaluations
    label2 = f"{label}-bme"
    references = session_references(ctx, label2, space)
    definition = session_definition(ctx, state, label2, narrowed,
                                    ctx.budget.offline_constraints(ctx.measurer.in_force),
                                    cfg.offline.strategy, options, start,
                                    metadata=state.bme_metadata(), references=references,
                                    evaluations=evaluations)
    session = open_session(ctx, state, definition, "offline")
    run_session(ctx, state, session, narrowed, evaluations, label2, references=references,
                seconds=cfg.offline.seconds)
    return _put_best_in_force(ctx, state, label, space, first)


def _put_best_in_force(ctx: RunContext, state: RunState, label: str, space: KnobSpace,
                       first: int) -> float | None:
    """Put the pass's best offline point in force for the online session; its value."""
    best = state.best_among(state.records[first:])
    if best is None:
        state.decide(Decision.of(label, Kind.SETTING, step="kept",
                                 reason="no offline point measured successfully",
                                 settings={"kept": ctx.current(space.names)}))
        return None
    # put the offline best in force for the online session
    outcome = ctx.apply({k: best.in_force[k] for k in space.names})
    if outcome.failure is not None:
        logger.warning("%s: could not put the offline best back in force: %s", label,
                       outcome.failure)
    logger.info("[%s] best %.4g %s with %s", label, best.value or 0.0, ctx.unit,
                {k: best.in_force[k] for k in space.names})
    return best.value


def make_room_for_shared_buffers(ctx: RunContext, state: RunState, label: str,
                                 space: KnobSpace, start: Mapping[str, JSON]) -> None:
    """Lower the online memory knobs in force when, with them, the budget leaves less than
    the offline session's start for shared_buffers
    (:meth:`tuner_client.budget.BudgetView.room_for_shared_buffers`)."""
    if "shared_buffers" not in space.names:
        return
    wanted, lowered = ctx.budget.room_for_shared_buffers(ctx.measurer.in_force,
                                                         space["shared_buffers"], start)
    if not lowered:
        return
    # lowering memory knobs only frees memory: applied even while the shared_buffers in force
    # (the user's, before the first offline point) still breaks the budget
    outcome = ctx.apply(lowered, check_budget=False)
    if outcome.failure is not None:
        raise ConstraintError(f"{label}: could not lower the online memory knobs to {lowered} "
                              f"to make room for shared_buffers: {outcome.failure}")
    state.decide(Decision.of(
        label, Kind.SETTING, step="lowered", settings={"lowered": lowered},
        reason=f"the online memory knobs in force left less than {format_bytes(wanted)} for "
               f"shared_buffers under the memory budget"))


def note_bme(ctx: RunContext, state: RunState, bme_fit: OfflineBMEFit) -> None:
    """Export the BME fit (metrics) and keep it for the sessions' metadata."""
    meta = bme_fit.metadata()
    if meta is None or bme_fit.fit is None:
        return
    # the prior now comes from throughput points; the probes' decision stays beside it
    state.note_bme_fit(meta)
    try:
        ctx.metrics.record_bme_fit(bme_fit.fit.params, r2=float(bme_fit.fit.r2),
                                   sizes=bme_fit.size_range)
    except HarmonyError as exc:
        logger.info("BME fit not exported to the metrics: %s", exc)


def _with_bounds(param: KnobParam, bounds: tuple[float, float]) -> KnobParam:
    """``param`` with its session range narrowed to ``bounds`` (on its grid)."""
    narrowed = Space((param.param,)).narrowed({param.name: bounds}).params[0]
    return replace(param, param=narrowed)
