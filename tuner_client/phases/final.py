"""Phase 3, the final rounds: the decision, with an interval, between the original
configuration, the rules of thumb and the search's best candidates.

How it is measured is the measurement engine's choice for the knobs that differ
(:func:`tuner_client.phases.design_choice.choose_for`, the rules in
:mod:`tuner_client.engine.designs`): per transaction or by switchback
(:func:`~tuner_client.phases.design_choice.race_in`), split off from a restart-time
difference (:mod:`tuner_client.phases.final_split`), or the windows race below. Every design
ends in one :class:`~tuner_client.stats.decision.FinalDecision`. How a decision is made reads
in four modules: the engine's table, this dispatch, the race of the design chosen, and
:mod:`tuner_client.stats.decision`.

Every round measures each label once, interleaved (the order reversed every other round so
that a drift within a round favours nobody): ``default`` (the user's own configuration, even
when it breaks the budget the search was held to), the baselines (``pgtune``: PGTune's rules
for the tuned knobs, when the budget allows them), the BME recommendation when asked for, and
the search's best plus its runners-up (the best distinct feasible configurations other than
the original) and the screening's predicted best (``screened``). The candidates, PGTune's
rules among them, race (:class:`tuner_client.stats.racing.Race`): after
``max(2, final.rounds)`` rounds, one whose paired interval lies below the default's, or
wholly below another candidate's, is dropped; the rounds end when one candidate is left and
clearly above the default, or at ``final.max_rounds`` (``final.close_call_rounds`` while the
leader's fixed-n interval is above the default but no winner is declared: rounds spent where
a lead may settle, not a claim), or at ``final.max_seconds``; with ``final.until: claim``
(the default) also as soon as the decision below would recommend a candidate: the rounds
after that would only rank near-equal candidates, and the claim made then, anytime-valid,
holds. ``until: winner`` runs on for a clear winner (the earlier rule). The race looks after every
round, so its intervals are anytime-valid confidence sequences
(:mod:`tuner_client.stats.sequential`), Bonferroni-split over the candidates. Then
:func:`tuner_client.stats.decision.decide` recommends the best stable candidate only when its
confidence sequence of tuned/default lies above 1 at the rounds measured (Bonferroni over
the candidates), and otherwise keeps the original; the decisions name the interval method
and the number of paired rounds. PGTune's rules are such a candidate too
(:func:`decision_labels`): a tuner that measured them clearly above the default should not
keep the default.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Mapping, Sequence

from tuner_client.engine.designs import DUET, PER_TRANSACTION, WINDOWS
from tuner_client.measurer import objective_unit
from tuner_client.phases.design_choice import choose_for, race_in
from tuner_client.phases.final_candidates import (
    baseline_settings,
    ranked_candidates,
    screened_races,
)
from tuner_client.phases.final_narrow import Narrowed, narrow_candidates
from tuner_client.phases.final_per_transaction import per_transaction_result
from tuner_client.phases.final_split import split_design, split_race
from tuner_client.phases.result import Best, Evidence, Intervals, Throughput, TuneResult, Work
from tuner_client.phases.state import RunContext, RunState, record_point
from tuner_client.stats.decision import METHOD_NAMES, FinalDecision, decide
from tuner_client.stats.paired import Method
from tuner_client.stats.racing import Race, RaceBudget, RaceRules

logger = logging.getLogger(__name__)

Round = dict[str, float | None]
#: how the labels are printed in the decision
NAMES = {"default": "default", "pgtune": "PGTune rules", "best": "tuned",
         "recommended": "BME recommendation"}


#: the race looks after every round and may stop on any rule: its intervals, and the
#: decision's, are confidence sequences, valid at every round at once
INTERVAL_METHOD: Method = "anytime"

#: baselines the decision may recommend like a searched candidate (the BME recommendation is
#: only reported)
ELIGIBLE_BASELINES = ("pgtune",)


def decision_labels(searched: list[str], baselines: list[str]) -> tuple[list[str], list[str]]:
    """The candidates and the reported-only baselines of the decision: the searched labels
    plus the eligible baselines (Bonferroni then counts them too)."""
    eligible = [b for b in baselines if b in ELIGIBLE_BASELINES]
    return [*searched, *eligible], [b for b in baselines if b not in eligible]


def final_rounds(ctx: RunContext, state: RunState) -> TuneResult:
    """Measure the candidates interleaved, decide, and summarise the run."""
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
        if {n: state.best.in_force.get(n) for n in ctx.original} == ctx.original:
            state.decide("final: the search's best is the original configuration")
        for i, settings in enumerate(ranked_candidates(ctx, state, cfg.final.candidates), 1):
            label = "best" if i == 1 else f"candidate-{i}"
            candidates[label] = settings
            searched.append(label)
        if screened_races(ctx, state, candidates):
            candidates["screened"] = dict(state.screened or {})
            searched.append("screened")
    narrowed = Narrowed(searched)
    if searched:
        labels = ["default", *decision_labels(searched, baselines)[0]]
        choice = choose_for(ctx, [candidates[label] for label in labels])
        state.decide(f"final: the race of {', '.join(labels)} by {choice.text()}")
        # what each label is, so a reader (or the user's own benchmark) can check any of them
        state.decide("final: raced: " + "; ".join(
            f"{label} {_differing(candidates[label], ctx.original)}"
            for label in labels if label != "default"))
        # a restart-time difference is split off where the session parts race precisely
        # (its restart part then by duet where a clone can run, else in windows)
        split = split_design(ctx, candidates, labels) if choice.design in (WINDOWS, DUET) \
            else None
        if split is not None:
            return split_race(ctx, state, candidates, labels, split,
                              lambda c, cands, options: _restart_part(c, state, cands, options))
        if choice.design != WINDOWS:
            if (race := race_in(choice.design, ctx, state, candidates, labels)) is not None:
                return per_transaction_result(ctx, state, candidates, race)
        elif choice.passed_over and choose_for(ctx, [candidates[searched[0]]] * 2).design \
                == PER_TRANSACTION:
            # a knob SET LOCAL cannot carry differs: one per-transaction run among the searched
            # candidates that share the best's, then the windows race of the one chosen
            narrowed = narrow_candidates(ctx, state, candidates, searched,
                                         choice.passed_over[0][1])
    # without a candidate one round still measures the default (and the baselines) to report
    rounds = _race(ctx, state, candidates, baselines, narrowed) \
        if state.best is not None and cfg.final.rounds > 0 else []
    return _result(ctx, state, candidates, baselines, narrowed, rounds)


def _differing(settings: Mapping[str, str], original: Mapping[str, str]) -> dict[str, str]:
    """The settings that differ from the original (all of them when none do)."""
    return {n: v for n, v in settings.items() if original.get(n) != v} or dict(settings)


def _race(ctx: RunContext, state: RunState, candidates: Mapping[str, dict[str, str]],
          baselines: list[str], narrowed: Narrowed) -> list[Round]:
    """Race the searched candidates and PGTune's rules beside the default and the reported
    baselines (:class:`tuner_client.stats.racing.Race`): rounds until one is clearly best,
    every one is dropped, or the round limit is reached; without a searched candidate, one
    round measures the default and the baselines for the report."""
    cfg = ctx.config.final

    def measure(label: str) -> float | None:
        kind = "baseline" if label == "default" else "final"
        ctx.metrics.set_phase(kind)
        # each round is measured whole on one replica (the live ones in turn), so every
        # ratio to the default within a round is paired on one machine
        replica = ctx.pool.for_round(len(race.rounds) if race is not None else 0)
        record = replica.joined().measure(f"final-{label}", {}, candidates[label],
                                          cfg.visit_samples, check_budget=label != "default")
        record.replica = ctx.pool.record_name(replica)
        record_point(ctx, state, record, kind=kind, ranks=False)
        logger.info("[final] %s: %s%s", label,
                    f"{record.value:.1f}" if record.value else "n/a",
                    f" ({record.failure})" if record.failure else "")
        return record.value

    race: Race | None = None
    searched = narrowed.searched
    if not searched:
        return [{label: measure(label) for label in ["default", *baselines]}]
    min_rounds = max(2, cfg.rounds)
    max_rounds = max(min_rounds, cfg.max_rounds)
    racing, reported = decision_labels(searched, baselines)
    logger.info("=== final rounds: %s, interleaved, %d to %d rounds (%d on a close call) ===",
                " vs ".join(["default", *racing, *reported]), min_rounds, max_rounds,
                max(max_rounds, cfg.close_call_rounds))
    # PGTune's rules race like a searched candidate: the decision may recommend them, so the
    # race may drop them, settle on them, or run on for them on a close call
    search_ratios = _search_ratios(state, candidates, searched)

    def claim(rounds: Sequence[Round]) -> str | None:
        decision = _decide(ctx, baselines, narrowed, rounds, search_ratios)
        return None if decision.winner is None else (
            f"the decision is ready ({decision.lines[0]}); further rounds would only rank "
            f"candidates near it")

    race = Race(measure, racing, reference="default", baselines=reported,
                budget=RaceBudget(seconds=cfg.max_seconds, max_rounds=max_rounds,
                                  close_call_rounds=max(max_rounds, cfg.close_call_rounds),
                                  clock=time.monotonic),
                rules=RaceRules(min_samples=min_rounds, level=cfg.level, method=INTERVAL_METHOD,
                                also_compared=narrowed.also_compared),
                claim=claim if cfg.until == "claim" else None)
    result = race.run()
    for label, why in result.dropped.items():
        state.decide(f"final: {label} dropped after {result.dropped_after[label]} rounds: {why}")
    state.decide(f"final: {len(result.rounds)} rounds in whole-server windows of "
                 f"{', '.join(['default', *racing, *reported])}; stopped: {result.stopped} "
                 f"(intervals: {METHOD_NAMES[result.method]})")
    return [dict(row) for row in result.rounds]


def _restart_part(ctx: RunContext, state: RunState, candidates: Mapping[str, dict[str, str]],
                  options: list[str]) -> FinalDecision | None:
    """Stage 2 of a split race (:mod:`tuner_client.phases.final_split`): ``options`` raced
    beside "default", here the session part chosen, by duet where a clone can run, else in
    windows; its decision, or None when fewer than two rounds were measured."""
    labels = ["default", *options]
    if choose_for(ctx, [candidates[label] for label in labels]).design == DUET and \
            (duet := race_in(DUET, ctx, state, candidates, labels)) is not None:
        return duet.to_final_decision()
    narrowed = Narrowed(options)
    rounds = _race(ctx, state, candidates, [], narrowed)
    if len(rounds) < 2:
        state.decide("final: restart part: fewer than 2 rounds measured: no interval; the "
                     "restart-time knobs stay the original's")
        return None
    decision = _decide(ctx, [], narrowed, rounds, {})
    for line in decision.lines:
        state.decide(f"final: restart part: {line.strip()}")
    return decision


def _result(ctx: RunContext, state: RunState, candidates: Mapping[str, dict[str, str]],
            baselines: list[str], narrowed: Narrowed, rounds: list[Round]) -> TuneResult:
    """The decision over ``rounds`` as the run's result (the original when undecided)."""
    searched = narrowed.searched
    def mean(which: str) -> float | None:
        vals = [v for row in rounds if (v := row.get(which)) is not None]
        return statistics.fmean(vals) if vals else None

    default_qpm = mean("default")
    best, best_qpm = dict(ctx.original), default_qpm
    decision = None
    if len(rounds) >= 2 and searched:
        decision = _decide(ctx, baselines, narrowed, rounds,
                           _search_ratios(state, candidates, searched))
        for line in decision.lines:
            state.decide(f"final: {line.strip()}")
        ctx.metrics.record_final_comparison(decision.to_dict())
    elif rounds and searched:
        state.decide("final: fewer than 2 rounds measured: no interval, so no decision; "
                     "keeping the original")
    winner = decision.winner if decision is not None else None
    if winner is not None:
        best, best_qpm = dict(candidates[winner]), mean(winner)
    for row in rounds:  # what the comparison calls "tuned": the result, measured each round
        row["tuned"] = row.get(winner or "default")
    if default_qpm is not None:
        ctx.metrics.record_default(default_qpm)
    unit = objective_unit(ctx.config.measure.estimator, ctx.config.workload.kind)
    throughput = Throughput(
        default=default_qpm, best=best_qpm,
        search_best=state.best.value if state.best is not None else None,
        recommended=mean("recommended"), unit=unit,
        baselines={b: q for b in baselines if (q := mean(b)) is not None})
    work = Work(passes=state.passes,
                evaluations=sum(1 for r in state.records if not r.session.startswith("final")),
                sessions=[s.name for s, _ in state.sessions], decisions=list(state.decisions))
    return TuneResult.conclude(Best(best, dict(ctx.original), throughput),
                               Intervals(rounds, decision), work,
                               Evidence(bme=state.bme, screening=state.screening))


def _decide(ctx: RunContext, baselines: list[str], narrowed: Narrowed, rounds: Sequence[Round],
            search_ratios: Mapping[str, Sequence[float]]) -> FinalDecision:
    """The decision over the final ``rounds`` (also the race's claim rule, after each round);
    ``search_ratios``: :func:`_search_ratios`, for the degrade check."""
    searched = narrowed.searched
    eligible, reported = decision_labels(searched, baselines)
    return decide(rounds, reference="default", baselines=reported, candidates=eligible,
                  level=ctx.config.final.level, method=INTERVAL_METHOD,
                  also_compared=narrowed.also_compared, search_ratios=search_ratios,
                  names={**NAMES, **{c: f"tuned ({c})" for c in searched if c != "best"}})


def _search_ratios(state: RunState, candidates: Mapping[str, dict[str, str]],
                   searched: list[str]) -> dict[str, list[float]]:
    """Each candidate's paired ratios measured during the search in whole-server windows, the
    final race's design (for the degrade check). A per-transaction search ratio is another
    estimand (work-weighted latency, times a window block's count factor for system-wide
    knobs): on the demo a search's 1.57× against the race's 1.22× (1.14–1.31) read as a
    degrade and kept the original, though both measured the same configuration."""
    out: dict[str, list[float]] = {}
    for label in searched:
        settings = candidates[label]
        out[label] = [r.ratio for r in state.records[state.ranked_from:]
                      if r.ratio is not None and not r.session.startswith("final")
                      and r.design == WINDOWS
                      and all(r.in_force.get(n) == v for n, v in settings.items())]
    return out
