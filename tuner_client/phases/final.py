"""Phase 3, the final rounds: the decision, with an interval, between the original
configuration, the rules of thumb and the search's best candidates.

The candidates: ``default`` (the user's own configuration, even when it breaks the budget the
search was held to), the baselines (``pgtune``: PGTune's rules for the tuned knobs, when the
budget allows them; PGTune's rules race like a searched candidate, :func:`decision_labels`: a
tuner that measured them clearly above the default should not keep the default), the BME
recommendation when asked for (measured beside the race, only reported), and the search's
best plus its runners-up (the best distinct feasible configurations other than the original)
and the screening's predicted best (``screened``).

How they are raced is the measurement engine's choice for the knobs that differ
(:func:`tuner_client.phases.design_choice.choose_for`, the rules in
:mod:`tuner_client.engine.designs`), run by the design that implements it
(:func:`~tuner_client.phases.design_choice.final_design`, every design behind
:class:`tuner_client.engine.protocol.Design`); this module never asks which one it holds.
Every design ends in one :class:`~tuner_client.stats.decision.FinalDecision` and one result
(:func:`tuner_client.phases.final_result.conclude`). How a decision is made reads in the
engine's table, the chosen design's module, and :mod:`tuner_client.stats.decision`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

from tuner_client.engine.protocol import RaceRequest
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.design_choice import choose_for, final_design
from tuner_client.phases.final_candidates import (
    baseline_settings,
    ranked_candidates,
    screened_races,
)
from tuner_client.phases.final_design import FinalRun
from tuner_client.phases.final_result import conclude
from tuner_client.phases.final_split import outside_range, restart_knobs, split_choice
from tuner_client.phases.final_ties import lighter_on_tie
from tuner_client.phases.final_windows import NAMES, baseline_round, decision_labels
from tuner_client.phases.result import TuneResult
from tuner_client.phases.state import RunContext, RunState

logger = logging.getLogger(__name__)

__all__ = ["NAMES", "FinalInputs", "decision_labels", "final_inputs", "final_rounds"]


@dataclass(frozen=True)
class FinalInputs:
    """What the final race is given: every configuration by label (``default`` the
    original), the baselines measured beside it (PGTune's rules, the BME recommendation) and
    the search's candidates, the best first."""

    configurations: dict[str, dict[str, str]]
    baselines: list[str]
    searched: list[str]

    def request(self, level: float) -> RaceRequest:
        """The race: the original, the searched candidates and the eligible baselines; the
        other baselines measured beside it for the report."""
        racing, reported = decision_labels(self.searched, self.baselines)
        return RaceRequest(self.configurations, ("default", *racing), level,
                           reported=tuple(reported), searched=tuple(self.searched))


def final_inputs(ctx: RunContext, state: RunState) -> FinalInputs:
    """The candidates and baselines of the final race, from what the run has learnt (the
    search's records and best, the screening's prediction, the BME recommendation); the
    ones left out are said why."""
    cfg = ctx.config
    candidates: dict[str, dict[str, str]] = {"default": dict(ctx.original)}
    baselines = [label for label in cfg.final.baselines
                 if (settings := baseline_settings(ctx, state, label)) is not None
                 and candidates.setdefault(label, settings) is settings]
    if cfg.final.recommended and state.recommended is not None:
        candidates["recommended"] = state.recommended
        baselines.append("recommended")
    searched: list[str] = []
    if state.best is not None and cfg.final.rounds > 0:
        # the original is measured once per round, as "default": measured again as "best" it
        # would be compared with itself, and noise alone would decide the ratio
        ranked = ranked_candidates(ctx, state, cfg.final.candidates)
        if {n: state.best.in_force.get(n) for n in ctx.original} == ctx.original:
            then = ("the next best it measured races as \"best\"" if ranked
                    else "no other configuration it measured can race")
            state.decide(Decision.note("final: the search's best is the original "
                                       f"configuration (raced as the reference, \"default\"); "
                                       f"{then}", labels=("best",)))
        for i, settings in enumerate(ranked, 1):
            label = "best" if i == 1 else f"candidate-{i}"
            candidates[label] = settings
            searched.append(label)
        if screened_races(ctx, state, candidates):
            candidates["screened"] = dict(state.screened or {})
            searched.append("screened")
    return FinalInputs(candidates, baselines, searched)


def final_rounds(ctx: RunContext, state: RunState) -> TuneResult:
    """Race the final candidates in the design the engine chooses, decide, and summarise
    the run."""
    inputs = final_inputs(ctx, state)
    candidates, baselines = inputs.configurations, inputs.baselines
    run = FinalRun(ctx, state)
    if not inputs.searched:
        # without a candidate one round still measures the default (and the baselines)
        measured = baseline_round(run, ["default", *baselines], candidates) \
            if state.best is not None and ctx.config.final.rounds > 0 else None
        return conclude(run, candidates, measured, baselines)
    request = in_range(ctx, state, inputs.request(ctx.config.final.level))
    choice = choose_for(ctx, request.settings())
    state.decide(Decision.of("final", Kind.DESIGN, labels=request.labels, design=choice.design,
                             why=choice.text()))
    # what each label is, so a reader (or the user's own benchmark) can check any of them
    state.decide(Decision.of("final", Kind.RACED, labels=request.candidates, settings={
        label: _differing(candidates[label], ctx.original) for label in request.candidates}))
    if ctx.managed is not None and not choice.per_transaction:
        state.decide(Decision.of(
            "final", Kind.SKIPPED, step="final race", design=choice.design, why=choice.text(),
            reason=f"not raced: managed mode measures per transaction only, and "
                   f"{choice.text()}; the original configuration stays"))
        return conclude(run, candidates, None, baselines)
    # managed mode never changes the server: no fallback on a whole-server design
    outcome = final_design(ctx, request, choice, fallback=ctx.managed is None).race(run, request)
    outcome = lighter_on_tie(outcome, candidates, ctx.budget_slack, state.decide)
    if outcome is None and ctx.managed is not None:
        state.decide(Decision.of(
            "final", Kind.SKIPPED, step="final race", design=choice.design,
            reason="not raced: the per-transaction race failed, and managed mode measures in "
                   "no other design; the original stays"))
    return conclude(run, candidates, outcome, baselines)


def in_range(ctx: RunContext, state: RunState, request: RaceRequest) -> RaceRequest:
    """``request`` without the rules of thumb whose restart-time values lie outside the range
    ``offline.knobs`` searches, where the race carries the restart-time difference whole (not
    split: a split's restart part applies the same rule, :func:`~tuner_client.phases.
    final_split.restart_options`, and its session part races them all). Each is said. An A/A
    of server-wide knobs (shared_buffers searched in 256MB-1GB) raced PGTune's 6 GB beside
    the best by duet: half the race's segments, Bonferroni over two, and the best's interval
    ±6.3 % where one candidate has them all."""
    choice = choose_for(ctx, request.settings())
    if not choice.carries_restart or \
            split_choice(ctx, lambda configs: choose_for(ctx, configs), request) is not None:
        return request
    restart = restart_knobs(ctx, request.settings())
    keep = [request.reference]
    for label in request.candidates:
        outside = [] if label in request.searched else \
            outside_range(ctx, request.configurations[label], restart)
        if not outside:
            keep.append(label)
            continue
        state.decide(Decision.note(
            f"final: {label} is not raced: {'; '.join(outside)}, outside the range "
            f"offline.knobs searches (a restart-time value the search was held from)",
            labels=(label,), reason="outside the searched range"))
    return replace(request, labels=tuple(keep)) if len(keep) >= 2 else request


def _differing(settings: Mapping[str, str], original: Mapping[str, str]) -> dict[str, str]:
    """The settings that differ from the original (all of them when none do)."""
    return {n: v for n, v in settings.items() if original.get(n) != v} or dict(settings)
