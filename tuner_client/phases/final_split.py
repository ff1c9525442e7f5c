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
   (:func:`split_choice`: per transaction, or by switchback when a knob with a system-wide
   side or a reload-time one differs or a candidate's work memory is past the line); its
   winner (else the original) is the base of stage 2. When the session parts too could only
   race in windows, the race is not split: it would gain nothing.
2. **The restart part**: the candidates' distinct restart-time values, each on top of that
   base, raced beside the base itself by duet where a clone of the server can run beside it
   (:mod:`tuner_client.duet`), else in whole-server windows around restarts
   (:class:`~tuner_client.phases.final_windows.Windows`, anytime-valid). A restart value
   that is not the stage 1 winner's own (the search's best's, PGTune's) is raced only inside
   the range ``offline.knobs`` searches: the user said where the knob may go. It measures the
   restart part *given* the session part chosen, so the product of the two ratios is the
   ratio of the recommended configuration to the original: no interaction is assumed away.

Each stage runs at half the error rate (Bonferroni over the two), so the product of the two
simultaneous intervals is a 95 % interval for the whole recommendation. A part is taken only
when its own interval lies above 1; the other part then stays the original's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from harmony_base.params import IntParam, RealParam
from tuner_client.config.model import RESTART_STAGE
from tuner_client.engine.designs import RESTART, Choice, differing_knobs, knob_class
from tuner_client.engine.protocol import RaceRequest, Traced
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.final_design import FinalDesign, FinalRun
from tuner_client.phases.state import RunContext
from tuner_client.stats.decision import FinalDecision, split_decision
from tuner_client.stats.levels import simultaneous_level
from tuner_client.stats.paired import Method, RatioInterval
from tuner_client.stats.trace import RaceTrace

#: the design summary.json names for a split race
SPLIT = "split"

#: the engine's choice of a design for a list of configurations (the first the reference)
ChooseFor = Callable[[list[dict[str, str]]], Choice]


def restart_knobs(ctx: RunContext, configs: list[dict[str, str]]) -> list[str]:
    """The knobs differing between ``configs`` that only a restart changes."""
    catalog = ctx.budget.catalog
    return [n for n in differing_knobs(configs)
            if knob_class(n, catalog[n].context if n in catalog else "unknown") == RESTART]


def split_choice(ctx: RunContext, choose: ChooseFor, request: RaceRequest) -> Choice | None:
    """The design of stage 1 when the race of ``request`` (the reference the original) is
    split (None: it is not: ``final.restart_part: together``, no restart-time knob differs,
    or the session parts too would race in a design that carries a restart-time difference
    (windows, or a duet, which carries both parts at once), where splitting gains nothing);
    ``choose``: the engine's choice for a list of configurations."""
    if ctx.config.final.restart_part != "apart":
        return None
    restart = restart_knobs(ctx, request.settings())
    if not restart:
        return None
    choice = choose([session_part(ctx, c, restart) for c in request.settings()])
    return None if choice.carries_restart else choice


def session_part(ctx: RunContext, settings: Mapping[str, str],
                 restart: list[str]) -> dict[str, str]:
    """``settings`` with the ``restart`` knobs (:func:`restart_knobs`) at the original's
    values."""
    return {**settings, **{n: ctx.original[n] for n in restart}}


@dataclass(frozen=True)
class SplitOutcome:
    """A split race: the decision over both parts, the configuration it recommends, and the
    race of the last part that ran, step by step (the restart part's, else the session
    part's; None when that part's design traced none)."""

    decision: FinalDecision
    settings: dict[str, str]
    last: RaceTrace | None = None

    def trace(self) -> RaceTrace | None:
        return self.last

    @property
    def winner(self) -> str | None:
        return self.decision.winner

    def to_final_decision(self) -> FinalDecision:
        return self.decision

    def recommended(self) -> Mapping[str, str] | None:
        return self.settings if self.decision.winner is not None else None


class Split(FinalDesign, name=SPLIT):
    """The session part in ``session`` (the design :func:`split_choice` chose, ``choice``),
    then the restart part in ``restart`` on top of the session part chosen (see the
    module)."""

    def __init__(self, session: FinalDesign, restart: FinalDesign, choice: Choice,
                 restart_how: str = "in whole-server windows") -> None:
        self.session, self.restart, self.choice = session, restart, choice
        #: how the restart part is measured, in words (by duet where a clone can run)
        self.restart_how = restart_how

    def race(self, run: FinalRun, request: RaceRequest) -> SplitOutcome:
        ctx, state = run.ctx, run.state
        labels = list(request.labels)
        restart = restart_knobs(ctx, request.settings())
        level = simultaneous_level(request.level, 2)
        state.decide(Decision.note(
            f"final: the race is split ({', '.join(restart)} only changes with a restart): "
            f"the session part of each candidate by {self.choice.text()}, then the restart "
            f"part {self.restart_how} on top of the session part chosen; each stage at "
            f"{100 * level:.1f} %, so that their product is a {100 * request.level:.0f} % "
            f"interval", design=SPLIT, labels=request.labels, level=level,
            why=self.choice.text()))
        parts = {label: session_part(ctx, request.configurations[label], restart)
                 for label in labels}
        stage1 = [labels[0]] + _distinct(parts, labels[1:], ctx.original)
        base, first, winner = dict(ctx.original), None, None
        traced: RaceTrace | None = None
        if len(stage1) > 1:
            outcome = self.session.race(run, RaceRequest(parts, tuple(stage1), level))
            traced = outcome.trace() if isinstance(outcome, Traced) else None
            if outcome is not None:
                first = outcome.to_final_decision()
                if outcome.winner is not None:
                    winner = outcome.winner
                    base = parts[winner]
        else:
            state.decide(Decision.note("final: stage 1: no candidate differs from the "
                                       "original in a session-settable knob", design=SPLIT,
                                       stage="session part"))
        options, option_labels = restart_options(run, request, winner, base, restart)
        second = None
        if option_labels:
            state.decide(Decision.note(
                f"final: stage 2: the restart part ({', '.join(restart)}) "
                f"{self.restart_how.replace('whole-server ', '')}: "
                f"{', '.join(option_labels)} beside the base {base}", design=SPLIT,
                stage=RESTART_STAGE, labels=("default", *option_labels),
                settings={"default": base, **{o: options[o] for o in option_labels}}))
            raced = self.restart.race(run, RaceRequest(
                {"default": base, **options}, ("default", *option_labels), level,
                stage=RESTART_STAGE))
            second = raced.to_final_decision() if raced is not None else None
            if isinstance(raced, Traced) and (restart_trace := raced.trace()) is not None:
                traced = replace(restart_trace, note="the restart part's race: each option "
                                                     "beside the session part chosen")
            if second is None:
                state.decide(Decision.of(
                    "final", Kind.NO_INTERVAL, design=SPLIT, stage=RESTART_STAGE,
                    text="; the restart-time knobs stay the original's"))
        return _outcome(ctx, run, options, base, first, second, request.level, traced)


def restart_options(run: FinalRun, request: RaceRequest, winner: str | None,
                    base: Mapping[str, str], restart: list[str]
                    ) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Stage 2's options (each restart value on top of ``base``, the session part chosen)
    and the labels that race, each left out said why: the same as the base or an earlier
    one, outside the searched range (a value not the stage 1 ``winner``'s own), or beyond
    the memory budget."""
    ctx, state, labels = run.ctx, run.state, list(request.labels)
    # the restart values of the session part's winner (none without one: a runner-up
    # whose session part is the original's adds nothing), the search's best and PGTune's
    sources = [label for label in dict.fromkeys([winner, "best", "pgtune"])
               if label in labels]
    options = {f"{label}-restart": {**base, **{n: request.configurations[label][n]
                                               for n in restart}}
               for label in sources}
    option_labels = _distinct(options, list(options), base)
    for label in list(option_labels):
        # a rule of thumb's restart value on top of another's session part is raced only
        # inside the range the config searches (the winner's own is raced wherever it
        # lies: it is the configuration that won)
        outside = [] if winner is not None and label == f"{winner}-restart" \
            else outside_range(ctx, options[label], restart)
        if outside:
            state.decide(Decision.note(
                f"final: stage 2: {label} is not raced: {'; '.join(outside)}, outside "
                f"the range offline.knobs searches, and it is not the session part's "
                f"winner's own", design=SPLIT, stage=RESTART_STAGE, labels=(label,),
                reason="outside the searched range"))
            option_labels.remove(label)
            continue
        # only what the restart part changes is checked: the base may be the user's own
        # original, which a budget tighter than what they run today may refuse
        reason = ctx.budget.violation({**ctx.measurer.in_force, **options[label]},
                                      {n: options[label][n] for n in restart})
        if reason is not None:
            state.decide(Decision.note(
                f"final: stage 2: {label} {options[label]} breaks the memory budget "
                f"({reason}); not raced", design=SPLIT, stage=RESTART_STAGE,
                labels=(label,), reason=reason))
            option_labels.remove(label)
    return options, option_labels


def outside_range(ctx: RunContext, settings: Mapping[str, str],
                   knobs: list[str]) -> list[str]:
    """Which of ``knobs`` in ``settings`` lie outside the offline search's range, in words
    (a knob the search does not tune has no range to leave)."""
    space = ctx.offline_space
    out = []
    for name in knobs:
        if name not in space.names or name not in settings:
            continue
        param = space[name]
        if not isinstance(param.param, IntParam | RealParam):
            continue
        value = param.session_value(param.knob.parse(settings[name]), snap=False)
        if not isinstance(value, int | float):
            continue
        if not param.param.min <= value <= param.param.max:
            out.append(f"{name} {settings[name]} lies outside "
                       f"{param.setting(param.param.min)}–{param.setting(param.param.max)}")
    return out


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
    ``simultaneous_level(level, 2)``, so both at once hold at ``level`` at least, and
    then the product of the ratios lies between the products of their bounds."""
    claimed = [p for p in parts if p is not None]
    if not claimed:
        return None
    ratio = low = high = 1.0
    for p in claimed:
        ratio, low, high = ratio * p.ratio, low * p.low, high * p.high
    # "anytime" only when every part is a confidence sequence; a part read at its race's
    # time limit is a fixed-horizon interval, and so is the product
    method: Method = "anytime" if all(p.method == "anytime" for p in claimed) else "t"
    return RatioInterval(ratio, low, high, sum(p.n for p in claimed), level, method)


def _outcome(ctx: RunContext, run: FinalRun, options: Mapping[str, dict[str, str]],
             base: dict[str, str], first: FinalDecision | None,
             second: FinalDecision | None, level: float, traced: RaceTrace | None
             ) -> SplitOutcome:
    """The base (the session part's winner, else the original) with the restart part's
    winner on top, and the product of the claimed parts' intervals."""
    best = dict(options[second.winner]) if second is not None and second.winner else base
    whole = product([_claimed(first), _claimed(second)], level)
    changed = {n: v for n, v in best.items() if ctx.original.get(n) != v}
    decision = split_decision(first, second, whole, changed, level=level, design=SPLIT)
    run.state.decide(Decision.verdict("final", decision, line=-1) if whole is not None
                     else Decision.line("final", decision.lines[-1], design=SPLIT))
    return SplitOutcome(decision, best, traced)
