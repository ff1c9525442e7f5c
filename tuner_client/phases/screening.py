"""Phase 1b, screening (``screening: {enabled: true}``): before the first online search, rank
the online knobs by their effect on throughput over the noise, and search only those whose
effect clears it; the others stay as they are, and the run says so. The design's predicted
best (each cleared knob at its better end) is where the online search starts, and it races in
the final rounds as ``screened``.

The design (:func:`tuner_client.stats.screening.screen`: Plackett–Burman or one at a time)
sets each knob to the ends of its configured range. Memory knobs' high ends share the online
budget's slack equally, so every combination of them fits and no run of the design is
refused. In windows (:func:`_screen_in_windows`) the runs are measured one after another and
the default point (the settings in force) between them to correct the drift; with
``measure.design: per-transaction`` the rows are the arms of one randomized run instead
(:func:`_screen_per_transaction`), where every row shares the drift, and each knob is moved
from its setting in force to either end (searched when a move gains). The ranking goes to the
run's decisions, ``summary.json`` (``screening``), the online session's metadata (the report
draws it) and the metrics.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from harmony_base.errors import HarmonyError
from harmony_base.space import EnumParam, IntParam, RealParam, Value
from tuner_client.budget import ONLINE_MEMORY_KNOBS
from tuner_client.config import KnobSpace
from tuner_client.engine.designs import (
    PER_TRANSACTION,
    SYSTEM_WIDE,
    SYSTEM_WIDE_KNOBS,
    UNIVERSAL,
    VALIDITY,
    universal_requested,
)
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.design_choice import choose_for
from tuner_client.phases.search_stops import LOOK_RESAMPLES, SETTLED_HALF_WIDTH
from tuner_client.phases.state import RunContext, RunState, record_point
from tuner_client.stats.per_transaction import MIN_SLICE_S, MIN_SLICES
from tuner_client.stats.screening import KnobLevels, Screening, screen
from tuner_client.stats.screening_designs import plackett_burman
from tuner_client.stats.screening_per_transaction import (
    column_comparison,
    design_rows,
    level_of,
    screen_from_default,
)
from workloads.per_transaction.from_config import make_assignment
from workloads.per_transaction.trace import Trace

logger = logging.getLogger(__name__)


def screening_phase(ctx: RunContext, state: RunState) -> Screening | None:
    """Screen the online knobs and narrow ``ctx.online_space`` (and the budget's view of it)
    to those that cleared the noise; None when screening is off or nothing is to screen."""
    cfg = ctx.config.screening
    space = ctx.online_space
    if not cfg.enabled or len(space.names) < 2:
        if cfg.enabled:
            state.decide(Decision.of("screening", Kind.SKIPPED, step="screening",
                                     reason="fewer than two online knobs; nothing to screen"))
        return None
    ctx.metrics.set_phase("screening")
    default_settings = ctx.current(space.names)
    default = space.point_from_settings(default_settings)
    reason = _why_windows(ctx, space, default)
    # per transaction, an unmoved knob stays exactly at its setting in force
    start = default if reason is not None else space.point_from_settings(default_settings,
                                                                         snap=False)
    levels = _levels(ctx, space, start, from_default=reason is None)
    if reason is not None and not universal_requested(ctx.config.measure.design):
        state.decide(Decision.note(f"screening: measured in windows, not per transaction: "
                                   f"{reason}", design=UNIVERSAL, why=reason))
    try:
        result = (_screen_in_windows(ctx, state, space, levels, default, default_settings)
                  if reason is not None
                  else _screen_per_transaction(ctx, state, space, levels, start))
    except HarmonyError as exc:
        state.decide(Decision.of("screening", Kind.FAILED, step="screening", reason=str(exc),
                                 text="every online knob is searched"))
        return None
    finally:  # the search starts from the settings in force before the design
        ctx.apply(default_settings, check_budget=False)
    state.note_screening(result)
    ctx.metrics.record_screening(result.effects)
    for line in result.lines():
        state.decide(Decision.line("screening", line, design=None))
    cleared = result.cleared
    if not cleared:
        state.decide(Decision.of("screening", Kind.KNOBS, step="screening",
                                 settings={"held": default_settings}))
        ctx.narrow_online([])
        return result
    if len(cleared) == len(space.names):
        state.decide(Decision.of("screening", Kind.KNOBS, step="screening", labels=cleared))
    else:
        held = {n: default_settings[n] for n in space.names if n not in cleared}
        state.decide(Decision.of("screening", Kind.KNOBS, step="screening", labels=cleared,
                                 settings={"held": held}))
        ctx.narrow_online(cleared)
    corner, left_out = result.predicted_best(
        default, lambda point: ctx.budget_violation(space.settings(point)))
    for knob, reason in left_out.items():
        state.decide(Decision.note(
            f"screening: {knob} at its better end breaks the memory budget beside the larger "
            f"effects' moves ({reason}); the predicted best keeps {default_settings[knob]}",
            labels=("screened",), reason=reason))
    # a knob left at its default keeps the setting's own spelling, so that a prediction of
    # the original is seen as the original ("4", not "4.0")
    predicted = {n: default_settings[n] if corner[n] == default[n] else v
                 for n, v in space.settings(corner).items()}
    state.predict_best({**{n: ctx.measurer.in_force.get(n, v)
                            for n, v in ctx.original.items()}, **predicted})
    state.decide(Decision.of("screening", Kind.START, step="screening",
                             settings={"start": {n: predicted[n] for n in cleared}}))
    return result


def _screen_in_windows(ctx: RunContext, state: RunState, space: KnobSpace,
                       levels: list[KnobLevels], default: dict[str, Value],
                       default_settings: dict[str, str]) -> Screening:
    """The design's runs one after another, a throughput sample each, the default between
    them (:func:`tuner_client.stats.screening.screen`)."""
    cfg = ctx.config.screening

    def measure(point: dict[str, Any]) -> float | None:
        settings = space.settings(point)
        is_default = settings == default_settings
        record = ctx.measurer.measure("screening", point, settings, samples=cfg.samples,
                                      check_budget=not is_default)
        record_point(ctx, state, record, kind="screening", ranks=False)
        return record.value

    return screen(levels, default, measure, design="pb" if cfg.design == "pb" else "oat",
                  replicates=cfg.replicates, z=cfg.z, seed=ctx.config.seed)


def _rows(space: KnobSpace, levels: list[KnobLevels], default: dict[str, Value]
          ) -> tuple[np.ndarray, list[dict[str, str]]]:
    """The PB design for ``levels`` and the settings of the per-transaction run's rows (its up
    design's, then its down design's: :func:`design_rows`)."""
    matrix = plackett_burman(len(levels))
    return matrix, [space.settings(row) for row in design_rows(levels, default, matrix)]


def _why_windows(ctx: RunContext, space: KnobSpace, default: dict[str, Value]) -> str | None:
    """Why the screening is measured in windows (None: in one per-transaction run)."""
    # every knob moves from the setting in force in some row, whatever its levels
    choice = choose_for(ctx, [space.settings(default), {}], search=True)
    if not choice.per_transaction:
        return choice.text()
    if ctx.config.screening.design != "pb":
        return "a per-transaction screening runs the Plackett–Burman design (design: pb)"
    # unlike a search session, the screening has no window blocks for a system-wide knob
    wide = [n for n in space.names if n in SYSTEM_WIDE_KNOBS]
    return f"{', '.join(wide)}: {VALIDITY[SYSTEM_WIDE][PER_TRANSACTION]}" if wide else None


def _screen_per_transaction(ctx: RunContext, state: RunState, space: KnobSpace,
                            levels: list[KnobLevels], default: dict[str, Value]) -> Screening:
    """Two PB designs, each knob moved from its setting in force up to its high level or down
    to its low one, as the arms of one randomized per-transaction run; a knob is searched
    when a move gains (:mod:`tuner_client.stats.screening_per_transaction`). The run lasts
    ``measure.per_transaction_s`` × ``replicates`` and ends sooner once every move's interval
    is within ±3 % (on its width alone, never on where it lies)."""
    cfg = ctx.config.screening
    matrix, rows = _rows(space, levels, default)
    for settings in rows:
        violation = ctx.budget_violation(settings)
        if violation is not None:
            raise HarmonyError(f"the design's row {settings} breaks the memory budget: "
                               f"{violation}")
    level = level_of(cfg.z)
    moves = [(j, offset) for j, lv in enumerate(levels)
             for offset, end in ((0, lv.high), (len(matrix), lv.low)) if end != default[lv.name]]

    def precise(trace: Trace) -> bool:
        try:
            return all(column_comparison(trace, matrix, j, level=level, offset=offset,
                                         seed=ctx.config.seed, resamples=LOOK_RESAMPLES
                                         ).half_width <= SETTLED_HALF_WIDTH
                       for j, offset in moves)
        except HarmonyError:
            return False

    seconds = max(1, round(ctx.config.measure.per_transaction_s * cfg.replicates))
    ctx.measurer.stop()  # the windows' workload must not run beside this one
    assignment = make_assignment(ctx.config.workload, ctx.target.dsn, rows,
                                 seed=ctx.config.seed)
    logger.info("screening: %d design rows per transaction for up to %d s", len(rows), seconds)
    trace = assignment.run(seconds, settled=precise, min_s=MIN_SLICES * MIN_SLICE_S)
    result, spare = screen_from_default(trace, levels, default, matrix, z=cfg.z,
                                        seed=ctx.config.seed)
    state.decide(Decision.of(
        "screening", Kind.MEASURED, step="screening", design=PER_TRANSACTION,
        count=len(matrix), seconds=trace.seconds, level=level,
        values={"transactions": len(trace), "max seconds": seconds,
                "settled half width": SETTLED_HALF_WIDTH}))
    if spare:
        state.decide(Decision.line(
            "screening", "the designs' spare columns (no knob; interactions and noise only, "
            "an A/A check): " + ", ".join(i.text() for i in spare)
            + ("" if all(i.low <= 1.0 <= i.high for i in spare) else
               ": one excludes 1, so knobs interact or the run drifted unevenly; the search "
               "still starts from the main effects' best"), design=None))
    return result


def _levels(ctx: RunContext, space: KnobSpace, default: dict[str, Value], *,
            from_default: bool = False) -> list[KnobLevels]:
    """Each knob's two screening levels: its range's ends, except the memory knobs' high
    ends, which share the online budget's slack equally (with every memory knob at its low
    end, knob i alone could take the slack up to ``f_i`` of its range; it gets ``f_i / k`` of
    it), so every combination of highs fits and no knob's range collapses to nothing because
    another knob (work_mem, counted once per connection) needs most of the memory. With
    ``from_default`` (rows that move knobs from their settings in force) the slack is what the
    settings in force leave, and a memory knob's high end is its share of the way from its
    setting in force to its range's end, so every mix of settings in force and high ends
    fits."""
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
    base = dict(default) if from_default else {**default, **{lv.name: lv.low for lv in memory}}
    start = {lv.name: max(base[lv.name], lv.low) for lv in memory}

    def fits(point: dict[str, Value]) -> bool:
        return ctx.budget_violation(space.settings(point)) is None

    def at(lv: KnobLevels, f: float) -> Value:
        """The grid value at fraction ``f`` of the way from its start to its range's end, never
        above that point nor below the start."""
        param = space[lv.name].param
        assert isinstance(param, IntParam | RealParam)
        low = start[lv.name]
        target = low + f * (max(lv.high, low) - low)
        value = param.snap(target)
        if value > target and param.step:
            value = param.snap(value - param.step)
        return max(value, low)

    if not fits(base):
        return levels  # nothing fits: the design's runs are refused and the phase says so
    shares: dict[str, float] = {}
    for lv in memory:
        lo, hi = 0.0, 1.0
        if not fits({**base, lv.name: at(lv, 1.0)}):
            for _ in range(30):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if fits({**base, lv.name: at(lv, mid)}) else (lo, mid)
            hi = lo
        shares[lv.name] = hi / len(memory)
    chosen = {lv.name: KnobLevels(lv.name, lv.low, at(lv, shares[lv.name])) for lv in memory}
    while not fits({**base, **{n: lv.high for n, lv in chosen.items()}}):
        # rounding onto the grid overshot: lower every share a little
        shares = {n: f * 0.9 for n, f in shares.items()}
        chosen = {lv.name: KnobLevels(lv.name, lv.low, at(lv, shares[lv.name]))
                  for lv in memory}
    lowered = {n: lv.high for n, lv in chosen.items()
               if lv.high != next(m.high for m in memory if m.name == n)}
    if lowered:
        logger.info("screening: memory knobs' high ends share the online budget: %s", lowered)
    return [chosen.get(lv.name, lv) for lv in levels]
