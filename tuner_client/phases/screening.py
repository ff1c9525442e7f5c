"""Phase 1b, screening (``screening: {enabled: true}``): before the first online search, rank
the online knobs by their effect on throughput over the noise, and search only those whose
effect clears it; the others stay as they are, and the run says so. The design's predicted
best (each cleared knob at its better end) is where the online search starts, and it races in
the final rounds as ``screened``.

The design (:func:`tuner_client.stats.screening.screen`: Plackett–Burman or one at a time)
sets each knob to the ends of its configured range. Memory knobs' high ends share the online
budget's slack equally, so every combination of them fits and no run of the design is
refused. The default point (the settings in force) is measured between the
runs to correct the drift. The ranking goes to the run's decisions, ``summary.json``
(``screening``), the online session's metadata (the report draws it) and the metrics.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

from harmony.base.errors import HarmonyError
from harmony.base.space import EnumParam, IntParam, RealParam, Value
from tuner_client.budget import ONLINE_MEMORY_KNOBS
from tuner_client.config import KnobSpace
from tuner_client.phases.state import RunContext, RunState, record_point
from tuner_client.stats.screening import KnobLevels, Screening, screen

logger = logging.getLogger(__name__)


def screening_phase(ctx: RunContext, state: RunState) -> Screening | None:
    """Screen the online knobs and narrow ``ctx.online_space`` (and the budget's view of it)
    to those that cleared the noise; None when screening is off or nothing is to screen."""
    cfg = ctx.config.screening
    space = ctx.online_space
    if not cfg.enabled or len(space.names) < 2:
        if cfg.enabled:
            state.decide("screening: fewer than two online knobs; nothing to screen")
        return None
    ctx.metrics.set_phase("screening")
    default_settings = ctx.current(space.names)
    default = space.point_from_settings(default_settings)
    levels = _levels(ctx, space, default)

    def measure(point: dict[str, Any]) -> float | None:
        settings = space.settings(point)
        is_default = settings == default_settings
        record = ctx.measurer.measure("screening", point, settings, samples=cfg.samples,
                                      check_budget=not is_default)
        record_point(ctx, state, record, kind="screening", ranks=False)
        return record.value

    try:
        result = screen(levels, default, measure, design="pb" if cfg.design == "pb" else "oat",
                        replicates=cfg.replicates, z=cfg.z, seed=ctx.config.seed)
    except HarmonyError as exc:
        state.decide(f"screening failed ({exc}); every online knob is searched")
        return None
    finally:  # the search starts from the settings in force before the design
        ctx.apply(default_settings, check_budget=False)
    state.screening = result
    ctx.metrics.record_screening(result.effects)
    for line in result.lines():
        state.decide(f"screening: {line}")
    cleared = result.cleared
    if not cleared:
        state.decide(f"screening: no online knob's effect cleared the noise; the online search "
                     f"is skipped and {default_settings} stay as they are")
        _narrow(ctx, [])
        return result
    if len(cleared) == len(space.names):
        state.decide("screening: every online knob cleared the noise; all are searched")
    else:
        held = {n: default_settings[n] for n in space.names if n not in cleared}
        state.decide(f"screening: searching {cleared}; left as they are: {held}")
        _narrow(ctx, cleared)
    corner = result.predicted_best(default)
    # a knob left at its default keeps the setting's own spelling, so that a prediction of
    # the original is seen as the original ("4", not "4.0")
    predicted = {n: default_settings[n] if corner[n] == default[n] else v
                 for n, v in space.settings(corner).items()}
    state.screened = {**{n: ctx.measurer.in_force.get(n, v) for n, v in ctx.original.items()},
                      **predicted}
    state.decide(f"screening: the design predicts the best at "
                 f"{ {n: predicted[n] for n in cleared} }: the online search starts there, "
                 f"and it races in the final rounds")
    return result


def _levels(ctx: RunContext, space: KnobSpace, default: dict[str, Value]) -> list[KnobLevels]:
    """Each knob's two screening levels: its range's ends, except the memory knobs' high
    ends, which share the online budget's slack equally (with every memory knob at its low
    end, knob i alone could take the slack up to ``f_i`` of its range; it gets ``f_i / k`` of
    it), so every combination of highs fits and no knob's range collapses to nothing because
    another knob (work_mem, counted once per connection) needs most of the memory."""
    levels: list[KnobLevels] = []
    for p in space.params:
        if isinstance(p.param, EnumParam):
            values = list(p.param.values)
            levels.append(KnobLevels(p.name, values[0], values[-1]))
        else:
            levels.append(KnobLevels(p.name, p.param.min, p.param.snap(p.param.max)))
    memory = [lv for lv in levels if lv.name in ONLINE_MEMORY_KNOBS]
    if not memory:
        return levels
    lows = {**default, **{lv.name: lv.low for lv in memory}}

    def fits(point: dict[str, Value]) -> bool:
        return ctx.budget_violation(space.settings(point)) is None

    def at(lv: KnobLevels, f: float) -> Value:
        """The grid value at fraction ``f`` of the knob's range, never above it."""
        param = space[lv.name].param
        assert isinstance(param, IntParam | RealParam)
        target = lv.low + f * (lv.high - lv.low)
        value = param.snap(target)
        if value > target and param.step:
            value = param.snap(value - param.step)
        return max(value, lv.low)

    if not fits(lows):
        return levels  # nothing fits: the design's runs are refused and the phase says so
    shares: dict[str, float] = {}
    for lv in memory:
        lo, hi = 0.0, 1.0
        if not fits({**lows, lv.name: lv.high}):
            for _ in range(30):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if fits({**lows, lv.name: at(lv, mid)}) else (lo, mid)
            hi = lo
        shares[lv.name] = hi / len(memory)
    chosen = {lv.name: KnobLevels(lv.name, lv.low, at(lv, shares[lv.name])) for lv in memory}
    while not fits({**lows, **{n: lv.high for n, lv in chosen.items()}}):
        # rounding onto the grid overshot: lower every share a little
        shares = {n: f * 0.9 for n, f in shares.items()}
        chosen = {lv.name: KnobLevels(lv.name, lv.low, at(lv, shares[lv.name]))
                  for lv in memory}
    lowered = {n: lv.high for n, lv in chosen.items()
               if lv.high != next(m.high for m in memory if m.name == n)}
    if lowered:
        logger.info("screening: memory knobs' high ends share the online budget: %s", lowered)
    return [chosen.get(lv.name, lv) for lv in levels]


def _narrow(ctx: RunContext, names: list[str]) -> None:
    """Search only ``names`` online: the others are fixed at the values in force (the budget
    counts them as fixed)."""
    narrowed = KnobSpace(tuple(p for p in ctx.online_space.params if p.name in names))
    ctx.online_space = narrowed
    ctx.budget = replace(ctx.budget, online=narrowed)
