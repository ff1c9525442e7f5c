"""The final race in whole-server windows, the design valid for every comparison: each round
measures every label once, interleaved (the order reversed every other round so that a drift
within a round favours nobody), on one replica per round.

The candidates race (:class:`tuner_client.stats.racing.Race`): after ``max(2, final.rounds)``
rounds, one whose paired interval lies below the reference's, or wholly below another
candidate's, is dropped; the rounds end when one candidate is left and clearly above the
reference, at ``final.max_rounds`` (``final.close_call_rounds`` on a close call), at
``final.max_seconds``, or (``final.until: claim``) as soon as the decision would recommend a
candidate. The intervals are anytime-valid confidence sequences, Bonferroni-split over the
candidates; :func:`tuner_client.stats.decision.decide` then recommends the best stable
candidate only when its interval lies above 1. The labels ``reported`` (the BME
recommendation) are measured beside the race and only reported.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tuner_client.engine.designs import WINDOWS
from tuner_client.engine.protocol import RaceRequest
from tuner_client.phases.decisions import Decision, Kind, drift_record, race_records
from tuner_client.phases.final_design import FinalDesign, FinalRun
from tuner_client.phases.state import RunContext, RunState, record_point
from tuner_client.stats.decision import METHOD_NAMES, FinalDecision, decide
from tuner_client.stats.drift import reference_drift
from tuner_client.stats.paired import Method, paired_ratio_interval
from tuner_client.stats.racing import Race, RaceBudget, RaceResult, RaceRules
from tuner_client.stats.trace import RaceTrace, TraceStep

logger = logging.getLogger(__name__)

Round = dict[str, float | None]
#: how the labels are printed in the decision (any other candidate: "tuned (label)")
NAMES = {"default": "default", "pgtune": "PGTune rules", "best": "tuned",
         "recommended": "BME recommendation"}

#: the race looks after every round and may stop on any rule: its intervals, and the
#: decision's, are confidence sequences, valid at every round at once
INTERVAL_METHOD: Method = "anytime"

#: what a windows race's interval holds for when its reference drifted (issue 51, item 5)
HOLDS = ("the windows measured the reference and the candidates minutes apart, so the "
         "drift between one's window and the other's enters each ratio (the alternating "
         "order cancels a steady drift only on average): it biases the comparison and adds to "
         "the rounds' noise")

#: baselines the decision may recommend like a searched candidate (the BME recommendation is
#: only reported)
ELIGIBLE_BASELINES = ("pgtune",)


def decision_labels(searched: list[str], baselines: list[str]) -> tuple[list[str], list[str]]:
    """The candidates and the reported-only baselines of the decision: the searched labels
    plus the eligible baselines (Bonferroni then counts them too)."""
    eligible = [b for b in baselines if b in ELIGIBLE_BASELINES]
    return [*searched, *eligible], [b for b in baselines if b not in eligible]


@dataclass(frozen=True)
class WindowsOutcome:
    """A windows race: its rounds (absolute values by label), the decision over them (None:
    fewer than two rounds), and the race step by step."""

    rounds: list[Round]
    decision: FinalDecision | None
    race: RaceResult | None = None
    level: float = 0.95
    dropped: Mapping[str, tuple[int, str]] = field(default_factory=dict)

    @property
    def winner(self) -> str | None:
        return self.decision.winner if self.decision is not None else None

    def to_final_decision(self) -> FinalDecision | None:
        return self.decision

    def trace(self) -> RaceTrace | None:
        """Each label's ratio to the reference and its interval after every round from the
        second on, at the decision's level and by its method."""
        if self.decision is None or len(self.rounds) < 2:
            return None
        reference = self.decision.reference
        trajectory: dict[str, list[TraceStep]] = {}
        for label in self.decision.intervals:
            steps = []
            for k in range(2, len(self.rounds) + 1):
                iv = paired_ratio_interval([r.get(label) for r in self.rounds[:k]],
                                           [r.get(reference) for r in self.rounds[:k]],
                                           level=self.level, method=self.decision.method)
                if iv is not None and label in self.rounds[k - 1]:
                    steps.append(TraceStep(k, iv))
            trajectory[label] = steps
        return RaceTrace(WINDOWS, "round", reference, self.level, self.decision.method,
                         trajectory, dict(self.dropped),
                         self.race.stopped if self.race is not None else None)


class Windows(FinalDesign, name=WINDOWS):
    """Interleaved whole-server windows (see the module)."""

    def race(self, run: FinalRun, request: RaceRequest) -> WindowsOutcome:
        ctx, state = run.ctx, run.state
        seen: list[tuple[float, float | None]] = []
        result = _race(ctx, state, request, seen)
        rounds = [dict(row) for row in result.rounds]
        dropped = {label: (result.dropped_after[label], why)
                   for label, why in result.dropped.items()}
        if len(rounds) < 2:
            # a composition's stage says what its missing decision leaves (final_split)
            if rounds and request.stage is None:
                state.decide(Decision.of("final", Kind.NO_INTERVAL, design=self.name,
                                         rounds=len(rounds),
                                         text=", so no decision; keeping the original"))
            return WindowsOutcome(rounds, None, result, request.level, dropped)
        decision = decide_rounds(request, rounds, _search_ratios(
            state, request.configurations, list(request.searched), self.name))
        for record in race_records(decision, stage=request.stage):
            state.decide(record)
        drift = reference_drift([t for t, _ in seen], [v for _, v in seen], unit="rounds")
        if drift is not None:
            state.decide(drift_record(drift, reference=request.reference, design=self.name,
                                      stage=request.stage, holds=HOLDS))
        return WindowsOutcome(rounds, decision, result, request.level, dropped)


def baseline_round(run: FinalRun, labels: list[str],
                   configurations: Mapping[str, Mapping[str, str]]) -> WindowsOutcome:
    """Without a searched candidate: one round of the default and the baselines, for the
    report (no race, no decision)."""
    return WindowsOutcome([{label: _measure(run.ctx, run.state, configurations, label, 0)
                            for label in labels}], None)


def _race(ctx: RunContext, state: RunState, request: RaceRequest,
          seen: list[tuple[float, float | None]]) -> RaceResult:
    """Race the request's candidates beside its reference and the reported labels
    (:class:`tuner_client.stats.racing.Race`); ``seen`` gets the reference's every window
    (the time it ended, its value), for its drift."""
    cfg = ctx.config.final
    race: Race | None = None

    def measure(label: str) -> float | None:
        value = _measure(ctx, state, request.configurations, label,
                         len(race.rounds) if race is not None else 0)
        if label == request.reference:
            seen.append((time.time(), value))
        return value

    min_rounds = max(2, cfg.rounds)
    max_rounds = max(min_rounds, cfg.max_rounds)
    racing, reported = list(request.candidates), list(request.reported)
    logger.info("=== final rounds: %s, interleaved, %d to %d rounds (%d on a close call) ===",
                " vs ".join([request.reference, *racing, *reported]), min_rounds, max_rounds,
                max(max_rounds, cfg.close_call_rounds))
    # PGTune's rules race like a searched candidate: the decision may recommend them, so the
    # race may drop them, settle on them, or run on for them on a close call
    search_ratios = _search_ratios(state, request.configurations, list(request.searched),
                                   WINDOWS)

    def claim(rounds: Sequence[Round]) -> str | None:
        decision = decide_rounds(request, rounds, search_ratios)
        return None if decision.winner is None else (
            f"the decision is ready ({decision.lines[0]}); further rounds would only rank "
            f"candidates near it")

    race = Race(measure, racing, reference=request.reference, baselines=reported,
                budget=RaceBudget(seconds=cfg.seconds_for(request.stage),
                                  max_rounds=max_rounds,
                                  close_call_rounds=max(max_rounds, cfg.close_call_rounds),
                                  clock=time.monotonic),
                rules=RaceRules(min_samples=min_rounds, level=request.level,
                                method=INTERVAL_METHOD, also_compared=request.also_compared),
                claim=claim if cfg.until == "claim" else None)
    result = race.run()
    for label, why in result.dropped.items():
        state.decide(Decision.of("final", Kind.DROPPED, design=WINDOWS, labels=(label,),
                                 rounds=result.dropped_after[label], reason=why))
    state.decide(Decision.of(
        "final", Kind.STOPPED, design=WINDOWS, rounds=len(result.rounds),
        labels=(request.reference, *racing, *reported), reason=result.stopped,
        method=METHOD_NAMES[result.method]))
    return result


def _measure(ctx: RunContext, state: RunState, configurations: Mapping[str, Mapping[str, str]],
             label: str, round_no: int) -> float | None:
    """One window of ``label`` (the reference's is the baseline's kind), on the replica of
    round ``round_no``."""
    kind = "baseline" if label == "default" else "final"
    ctx.metrics.set_phase(kind)
    # each round is measured whole on one replica (the live ones in turn), so every
    # ratio to the default within a round is paired on one machine
    replica = ctx.pool.for_round(round_no)
    record = replica.joined().measure(f"final-{label}", {}, dict(configurations[label]),
                                      ctx.config.final.visit_samples,
                                      check_budget=label != "default")
    record.replica = ctx.pool.record_name(replica)
    record_point(ctx, state, record, kind=kind, ranks=False)
    logger.info("[final] %s: %s%s", label, f"{record.value:.1f}" if record.value else "n/a",
                f" ({record.failure})" if record.failure else "")
    return record.value


def decide_rounds(request: RaceRequest, rounds: Sequence[Mapping[str, float | None]],
                  search_ratios: Mapping[str, Sequence[float]]) -> FinalDecision:
    """The decision over the race's ``rounds`` (also its claim rule, after each round);
    ``search_ratios``: :func:`_search_ratios`, for the degrade check."""
    return decide(rounds, reference=request.reference, baselines=list(request.reported),
                  candidates=list(request.candidates), level=request.level,
                  method=INTERVAL_METHOD, also_compared=request.also_compared,
                  search_ratios=search_ratios,
                  names={**NAMES, **{c: f"tuned ({c})" for c in request.candidates
                                     if c not in NAMES}})


def _search_ratios(state: RunState, candidates: Mapping[str, Mapping[str, str]],
                   searched: list[str], design: str = WINDOWS) -> dict[str, list[float]]:
    """Each candidate's paired ratios measured during the search in ``design``, the final
    race's (for the degrade check). A per-transaction search ratio is another
    estimand (work-weighted latency, times a window block's count factor for system-wide
    knobs): on the demo a search's 1.57× against the race's 1.22× (1.14–1.31) read as a
    degrade and kept the original, though both measured the same configuration."""
    out: dict[str, list[float]] = {}
    for label in searched:
        settings = candidates[label]
        out[label] = [r.ratio for r in state.records[state.ranked_from:]
                      if r.ratio is not None and not r.session.startswith("final")
                      and r.design == design
                      and all(r.in_force.get(n) == v for n, v in settings.items())]
    return out
