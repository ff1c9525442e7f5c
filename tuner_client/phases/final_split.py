"""The final race split by what can be measured precisely (``final.restart_part: apart``, the
default), when the candidates differ in a restart-time knob (shared_buffers): issues 27, 45.

A restart-time knob can only be compared in whole-server windows around restarts, whose
per-round noise on the project's mixes (log sd 0.05–0.12) leaves a 1.1× unclaimable within
the close-call limit; the session-settable knobs can be compared per transaction to ±3 %.
A difference in shared_buffers (the offline search moves it, PGTune's rules always do) must
not drag the session knobs' comparison into windows. So each candidate is split in two parts,
and each part is claimed on its own interval:

1. **The session part**: every candidate with its restart-time knobs at the original's
   values, raced beside the original in the design the engine chooses for them
   (:func:`split_design`: per transaction, or by switchback when a knob with a system-wide
   side or a reload-time one differs or a candidate's work memory is past the line); its
   winner (else the original) is the base of stage 2. When the session parts too could only
   race in windows, the race is not split: it would gain nothing.
2. **The restart part**: the candidates' distinct restart-time values, each on top of that
   base, raced beside the base itself in whole-server windows around restarts
   (:mod:`tuner_client.phases.final`'s race, anytime-valid). It measures the restart part
   *given* the session part chosen, so the product of the two ratios is the ratio of the
   recommended configuration to the original: no interaction is assumed away.

Each stage runs at half the error rate (Bonferroni over the two), so the product of the two
simultaneous intervals is a 95 % interval for the whole recommendation. A part is taken only
when its own interval lies above 1; the other part then stays the original's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from tuner_client.engine.designs import (
    DUET,
    RESTART,
    WINDOWS,
    Choice,
    differing_knobs,
    knob_class,
)
from tuner_client.phases.design_choice import choose_for, race_in
from tuner_client.phases.final_per_transaction import decision_result
from tuner_client.phases.result import TuneResult
from tuner_client.phases.state import RunContext, RunState
from tuner_client.stats.decision import FinalDecision
from tuner_client.stats.paired import RatioInterval

#: the design summary.json names for a split race
SPLIT = "split"

#: the windows race of stage 2: (context at its level, candidates with "default" the base,
#: the option labels) → its decision (None: no decision, fewer than two rounds)
WindowsRace = Callable[[RunContext, Mapping[str, dict[str, str]], list[str]],
                       FinalDecision | None]


def restart_knobs(ctx: RunContext, configs: list[dict[str, str]]) -> list[str]:
    """The knobs differing between ``configs`` that only a restart changes."""
    catalog = ctx.budget.catalog
    return [n for n in differing_knobs(configs)
            if knob_class(n, catalog[n].context if n in catalog else "unknown") == RESTART]


def at_level(ctx: RunContext, level: float) -> RunContext:
    """``ctx`` with the final race's level set to ``level``."""
    final = dataclasses.replace(ctx.config.final, level=level)
    return dataclasses.replace(ctx, config=dataclasses.replace(ctx.config, final=final))


def split_design(ctx: RunContext, candidates: Mapping[str, dict[str, str]],
                 labels: list[str]) -> Choice | None:
    """The design of stage 1 when the race of ``labels`` (the first the original) is split
    (None: it is not: ``final.restart_part: together``, no restart-time knob differs, or the
    session parts too would race in windows or by duet, where splitting gains nothing)."""
    if ctx.config.final.restart_part != "apart":
        return None
    configs = [candidates[label] for label in labels]
    restart = restart_knobs(ctx, configs)
    if not restart:
        return None
    choice = choose_for(ctx, [session_part(ctx, candidates[label], restart) for label in labels])
    # a duet carries the restart part as well: two of them would gain nothing
    return None if choice.design in (WINDOWS, DUET) else choice


def session_part(ctx: RunContext, settings: Mapping[str, str],
                 restart: list[str]) -> dict[str, str]:
    """``settings`` with the ``restart`` knobs (:func:`restart_knobs`) at the original's
    values."""
    return {**settings, **{n: ctx.original[n] for n in restart}}


def split_race(ctx: RunContext, state: RunState, candidates: Mapping[str, dict[str, str]],
               labels: list[str], design: Choice, windows: WindowsRace) -> TuneResult:
    """Race ``labels`` (the first the original, "default") in two stages (see the module),
    stage 1 in ``design`` (:func:`split_design`)."""
    configs = [candidates[label] for label in labels]
    restart = restart_knobs(ctx, configs)
    half = at_level(ctx, 1.0 - (1.0 - ctx.config.final.level) / 2.0)
    state.decide(f"final: the race is split ({', '.join(restart)} only changes with a restart): "
                 f"the session part of each candidate by {design.text()}, then the restart "
                 f"part (by duet where a clone can run, else in whole-server windows) on top "
                 f"of the session part chosen; each stage at "
                 f"{100 * half.config.final.level:.1f} %, so that their product is a "
                 f"{100 * ctx.config.final.level:.0f} % interval")
    parts = {label: session_part(ctx, candidates[label], restart) for label in labels}
    stage1 = [labels[0]] + _distinct(parts, labels[1:], ctx.original)
    base, first, winner = dict(ctx.original), None, None
    if len(stage1) > 1:
        outcome = race_in(design.design, half, state, parts, stage1)
        if outcome is not None:
            first = outcome.to_final_decision()
            if outcome.winner is not None:
                winner = outcome.winner
                base = parts[winner]
    else:
        state.decide("final: stage 1: no candidate differs from the original in a "
                     "session-settable knob")
    # the restart values of the session part's winner (none without one: a runner-up whose
    # session part is the original's adds nothing), the search's best and PGTune's
    sources = [label for label in dict.fromkeys([winner, "best", "pgtune"]) if label in labels]
    options = {f"{label}-restart": {**base, **{n: candidates[label][n] for n in restart}}
               for label in sources}
    option_labels = _distinct(options, list(options), base)
    for label in list(option_labels):
        # only what the restart part changes is checked: the base may be the user's own
        # original, which a budget tighter than what they run today may refuse
        reason = ctx.budget.violation({**ctx.measurer.in_force, **options[label]},
                                      {n: options[label][n] for n in restart})
        if reason is not None:
            state.decide(f"final: stage 2: {label} {options[label]} breaks the memory "
                         f"budget ({reason}); not raced")
            option_labels.remove(label)
    second = None
    if option_labels:
        how = "by duet" if choose_for(ctx, [base, *(options[o] for o in option_labels)]
                                      ).design == DUET else "in windows"
        state.decide(f"final: stage 2: the restart part ({', '.join(restart)}) {how}: "
                     f"{', '.join(option_labels)} beside the base {base}")
        second = windows(half, {"default": base, **options}, option_labels)
    return _result(ctx, state, options, base, first, second)


def _distinct(configs: Mapping[str, dict[str, str]], labels: list[str],
              reference: Mapping[str, str]) -> list[str]:
    """``labels`` whose configuration differs from ``reference`` and every earlier one."""
    out: list[str] = []
    for label in labels:
        if configs[label] != dict(reference) and all(configs[label] != configs[o] for o in out):
            out.append(label)
    return out


def _claimed(decision: FinalDecision | None) -> RatioInterval | None:
    """The winner's simultaneous interval of a stage's decision (None: no winner)."""
    if decision is None or decision.winner is None or decision.improvement_ci is None:
        return None
    low, high = decision.improvement_ci
    plain = decision.intervals.get(decision.winner)
    return RatioInterval(1.0 + decision.improvement, 1.0 + low, 1.0 + high,
                         plain.n if plain is not None else decision.rounds,
                         decision.decision_level, decision.method)


def product(parts: list[RatioInterval | None], level: float) -> RatioInterval | None:
    """The claimed parts' intervals multiplied (None: none claimed): each holds at
    ``1 - (1 - level) / 2``, so both at once hold at ``level`` at least (Bonferroni), and
    then the product of the ratios lies between the products of their bounds."""
    claimed = [p for p in parts if p is not None]
    if not claimed:
        return None
    ratio = low = high = 1.0
    for p in claimed:
        ratio, low, high = ratio * p.ratio, low * p.low, high * p.high
    return RatioInterval(ratio, low, high, sum(p.n for p in claimed), level, "anytime")


def _result(ctx: RunContext, state: RunState, options: Mapping[str, dict[str, str]],
            base: dict[str, str], first: FinalDecision | None,
            second: FinalDecision | None) -> TuneResult:
    """The run's result: the base (the session part's winner, else the original) with the
    restart part's winner on top, and the product of the claimed parts' intervals."""
    one, two = _claimed(first), _claimed(second)
    best = dict(options[second.winner]) if second is not None and second.winner else base
    intervals: dict[str, RatioInterval | None] = {}
    for stage, decision in (("session part", first), ("restart part", second)):
        for label, iv in (decision.intervals.items() if decision is not None else ()):
            intervals[f"{label} ({stage})"] = iv
    lines = [*(first.lines if first is not None else ()),
             *(f"restart part: {line}" for line in (second.lines if second is not None else ()))]
    winner = None
    whole = product([one, two], ctx.config.final.level)
    if whole is not None:
        winner = "tuned"
        intervals[winner] = whole
        changed = {n: v for n, v in best.items() if ctx.original.get(n) != v}
        lines.append(f"recommending {changed}: {whole.ratio:.2f}× the original "
                     f"({100 * whole.level:.0f} % CI {whole.low:.2f}–{whole.high:.2f}, the "
                     f"product of the claimed parts' intervals, each at half the error rate)")
    else:
        lines.append("no part measured clearly better than the original; keeping the "
                     "original")
    state.decide(f"final: {lines[-1]}")
    shown = intervals.get("tuned")
    decision = FinalDecision(
        winner=winner, reference="default",
        best=winner or (f"{first.best} (session part)" if first and first.best else None),
        intervals=intervals, unstable={}, lines=tuple(lines),
        rounds=second.rounds if second is not None else 0, level=ctx.config.final.level,
        decision_level=ctx.config.final.level,
        improvement=shown.ratio - 1.0 if shown is not None else 0.0,
        improvement_ci=(shown.low - 1.0, shown.high - 1.0) if shown is not None else None,
        method="anytime", design=SPLIT,
        transactions=first.transactions if first is not None else None,
        method_text="session part: its design's interval; restart part: anytime-valid "
                    "confidence sequence over paired windows; product of the two")
    return decision_result(ctx, state, decision, best if winner else dict(ctx.original))
