"""Phase 2b, the online pass: the reload-only knobs under the online budget computed with the
``shared_buffers`` in force, and the multi-pass detectors.

In a multi-pass flow the local-minimum detector (the online simplex stuck below the offline
best) ends the session early, and after convergence the workload-shift detector watches the
best point: either asks the orchestrator for another pass.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Mapping

from tuner_client.measurer import PointRecord
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.detectors import (
    LocalMinimumDetector,
    MixShiftDetector,
    WorkloadShiftDetector,
)
from tuner_client.phases.search_design import session_runner
from tuner_client.phases.sessions import open_session, session_definition, session_references
from tuner_client.phases.state import RunContext, RunState, record_point
from tuner_client.stats.mix import pool, time_shares

logger = logging.getLogger(__name__)


def online_pass(ctx: RunContext, state: RunState, n: int, offline_best: float | None) -> bool:
    """Run pass ``n``'s online session; True when a detector asks for another pass."""
    cfg, space = ctx.config, ctx.online_space
    label = f"p{n}-online"
    if not space.names:
        state.decide(Decision.of(label, Kind.SKIPPED, step="online search",
                                 reason="no online knob to search (screening held them all)"))
        return False
    constraints = ctx.budget.online_constraints(ctx.measurer.in_force)
    if n > 1:
        start = space.point_from_settings(state.best_or_current(ctx, space.names))
    elif state.screened is not None:  # where the screening's main effects point
        start = space.point_from_settings({k: state.screened[k] for k in space.names})
    else:
        start = None
    options = dict(cfg.online.strategy_options)
    if state.screening is not None and "simplex_size" in options:
        # fewer knobs after screening: no more vertices than the configured simplex had
        options["simplex_size"] = min(int(options["simplex_size"]), len(space.names) + 1)
    metadata = {"screening": state.screening.to_dict()} if state.screening is not None else {}
    references = session_references(ctx, label, space)
    definition = session_definition(ctx, state, label, space, constraints, cfg.online.strategy,
                                    options, start, warm=n == 1, metadata=metadata,
                                    references=references, evaluations=cfg.online.evaluations)
    session = open_session(ctx, state, definition, "online")
    first = len(state.records)
    vertices = int(options.get("simplex_size", len(space.names) + 1))
    multi = cfg.flow.kind == "multi-pass"
    local_min = LocalMinimumDetector(cfg.flow.local_minimum_threshold)
    stuck = False

    def after_eval(record: PointRecord) -> bool:
        """True (stop) when the last ``vertices`` values sit below the offline best."""
        nonlocal stuck
        mine = state.records[first:]
        if not (multi and cfg.flow.local_minimum and offline_best is not None) \
                or len(mine) < vertices:
            return False
        window = [r.value if r.value is not None else math.nan for r in mine[-vertices:]]
        # a drop within the measurement noise is not a local minimum
        noise = references.noise() if references is not None else None
        local_min.threshold = max(cfg.flow.local_minimum_threshold, 2.0 * (noise or 0.0))
        if local_min.check(window, offline_best):
            stuck = True
            ctx.metrics.record_local_minimum()
            state.decide(Decision.of(label, Kind.SHIFT, step="local minimum", count=vertices,
                                     series=window, values={
                                         "offline best": offline_best,
                                         "threshold": local_min.threshold,
                                         "configured threshold":
                                             cfg.flow.local_minimum_threshold,
                                         "noise": noise or 0.0}))
            return True
        return False

    run = session_runner(ctx, state, label, space)  # windows or per transaction
    reason = run(ctx, state, session, space, cfg.online.evaluations, label, after_eval,
                 references, seconds=cfg.online.seconds)
    mine = state.records[first:]
    best = state.best_among(mine)
    if best is not None:
        ctx.apply({k: best.in_force[k] for k in space.names})
    if stuck:
        return True
    if not multi or cfg.flow.monitor == 0 or best is None:
        return False
    noise = references.noise() if references is not None else None
    return _watch_for_shift(ctx, state, label, reason, mine[-vertices:], best, noise)


def _watch_for_shift(ctx: RunContext, state: RunState, label: str, reason: str,
                     last: list[PointRecord], best: PointRecord, noise: float | None) -> bool:
    """After convergence (or the evaluation budget): measure the best point ``flow.monitor``
    times; True when the workload-shift detector fires. The band is widened by the larger of
    the samples' spread and twice the reference's measured noise (``noise``)."""
    cfg, space = ctx.config, ctx.online_space
    values = [r.value for r in last if r.value is not None]
    if not values:
        return False
    shift = WorkloadShiftDetector(cfg.flow.shift_outside, cfg.flow.shift_margin)
    observe = cfg.workload.observe
    mix = MixShiftDetector(cfg.flow.shift_outside, observe.shift_distance) if observe else None
    if mix is not None:
        costs = ctx.measurer.mix_reference.costs if ctx.measurer.mix_reference else None
        # a switchback search keeps no windows of its candidates: the mix they ran on is the
        # reference's, learnt in its window
        tuned_on = pooled_shares(last, costs) or (
            dict(ctx.measurer.mix_reference.shares) if ctx.measurer.mix_reference else {})
        if tuned_on:
            mix.arm(tuned_on)
    noise = max(sample_spread(last), 2.0 * (noise or 0.0))
    band = shift.arm(values, noise)
    state.decide(Decision.of(label, Kind.SHIFT, step="band", reason=reason, count=len(values),
                             series=values, values={
                                 "band low": band[0], "band high": band[1], "noise": noise,
                                 "margin": cfg.flow.shift_margin, "monitor": cfg.flow.monitor}))
    for i in range(cfg.flow.monitor):
        record = ctx.measurer.measure(f"{label}-monitor", best.point,
                                      {k: best.in_force[k] for k in space.names})
        record_point(ctx, state, record, kind="online", ranks=False)
        value = record.value if record.value is not None else math.nan
        logger.info("[%s-monitor] %d/%d: %.4g %s", label, i + 1, cfg.flow.monitor, value,
                    ctx.unit)
        if mix is not None and mix.observe(pooled_shares([record], costs)):
            ctx.metrics.record_workload_shift()
            state.decide(Decision.of(
                label, Kind.SHIFT, step="statement mix", count=cfg.flow.shift_outside,
                series=mix.evidence,
                values={"distance": observe.shift_distance if observe else 0.0}))
            state.forget_best()
            ctx.measurer.forget_reference()
            return True
        if shift.observe(value):
            ctx.metrics.record_workload_shift()
            state.decide(Decision.of(label, Kind.SHIFT, step="workload",
                                     count=cfg.flow.shift_outside, series=[value],
                                     values={"band low": band[0], "band high": band[1]}))
            state.forget_best()
            return True
    return False


def pooled_shares(records: list[PointRecord], costs: Mapping[str, float] | None = None
                  ) -> dict[str, float]:
    """The statements' time shares over all samples of ``records`` (live traffic), calls
    priced at ``costs`` where known (:func:`tuner_client.stats.mix.time_shares`)."""
    pooled = pool(s.per_query for record in records for s in record.samples)
    return time_shares({q: (n, t / n) for q, (n, t) in pooled.items()}, costs)


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
