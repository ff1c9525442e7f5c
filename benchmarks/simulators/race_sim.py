"""Simulated final races with a known truth, to measure what monitoring after every round does
to false claims, coverage and power under each interval rule.

A measurement of a label is ``truth × level(t) × noise``: the machine's log level walks
randomly from measurement to measurement and trends linearly (drift), and each measurement
carries log-normal noise whose sd is ``round_sd/√2``, so a round's paired log-ratio has sd
about ``round_sd`` (a little more from the drift between the two measurements). The race
(:class:`~tuner_client.stats.racing.Race`) measures every round in its interleaved order and
stops on its own rules; the decision (:func:`~tuner_client.stats.decision.decide`) then
judges the rounds, as the tuner's final phase does (:mod:`tuner_client.phases.final`).

Rules compared (:data:`RULES`): ``anytime``, confidence sequences for the race and the
decision; ``t-every-round``, a 95 % fixed-n t interval checked after every round, the race
stopping as soon as it clears (the naive rule); ``t-race``, the tuner's earlier rule (fixed-n
t, an early win only at 99 % Bonferroni-adjusted, 95 % at the end); ``anytime-claim``, the
confidence sequences with the final phase's ``until: claim`` stop (the race also ends once
the decision would recommend a candidate, :data:`CLAIM_RULES`).

Pure and seeded: numpy's generator, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from harmony_base.errors import ConfigError
from tuner_client.stats.decision import FinalDecision, decide
from tuner_client.stats.paired import Method, log_ratios
from tuner_client.stats.racing import Race, RaceBudget, RaceRules, Round
from tuner_client.stats.sequential import confidence_sequence

#: rule name → (the race's interval method, its win level, the decision's method)
RULES: dict[str, tuple[Method, float, Method]] = {
    "anytime": ("anytime", 0.95, "anytime"),
    "t-every-round": ("t", 0.95, "t"),
    "t-race": ("t", 0.99, "t"),
    "anytime-claim": ("anytime", 0.95, "anytime"),
}
#: rules whose race also stops as soon as the decision would recommend a candidate
CLAIM_RULES = frozenset({"anytime-claim"})


@dataclass(frozen=True)
class Scenario:
    """One simulated race: ``truths`` label → true ratio to the reference (``default``,
    1.0), rounds from ``min_rounds`` to ``max_rounds``; ``drift_step``: sd of the log level's
    random-walk step per measurement; ``trend``: its linear change per measurement."""

    truths: Mapping[str, float] = field(default_factory=lambda: {"default": 1.0, "c": 1.0})
    round_sd: float = 0.06
    drift_step: float = 0.01
    trend: float = 0.002
    min_rounds: int = 3
    max_rounds: int = 20
    level: float = 0.95

    def __post_init__(self) -> None:
        if self.truths.get("default") != 1.0 or len(self.truths) < 2:
            raise ConfigError("a scenario needs the reference 'default' at 1.0 and at least one "
                              f"candidate, but got {dict(self.truths)}")


@dataclass(frozen=True)
class Outcome:
    """What one race and its decision concluded, scored against the truth.

    ``claimed``: the decision recommended a candidate; ``false_claim``: one whose true ratio
    is not above 1; ``covered``: every candidate's decision interval held its true ratio;
    ``covered_always`` (the ``anytime`` rule): every candidate's confidence sequence at the
    race's level (``level`` Bonferroni-adjusted over the candidates, the level its claims and
    drops use) held its true ratio at every round from the 2nd; ``half_width``: the first
    candidate's interval at the end, as a fraction of its ratio (upper side); ``delivered``:
    the true ratio of what the run leaves in force (the winner's, else 1.0)."""

    rule: str
    winner: str | None
    rounds: int
    claimed: bool
    false_claim: bool
    covered: bool
    covered_always: bool | None
    half_width: float
    delivered: float = 1.0


def _measure(scenario: Scenario, rng: np.random.Generator):
    """A measurement callback over a drifting level (its state lives in the closure)."""
    state = {"log_level": 0.0, "t": 0}
    noise_sd = scenario.round_sd / math.sqrt(2.0)

    def measure(label: str) -> float:
        state["t"] += 1
        state["log_level"] += scenario.trend + scenario.drift_step * rng.standard_normal()
        return 100.0 * scenario.truths[label] * math.exp(
            state["log_level"] + noise_sd * rng.standard_normal())
    return measure


def simulate(scenario: Scenario, seed: int, rule: str = "anytime") -> Outcome:
    """One race under ``rule`` (a key of :data:`RULES`) with its decision."""
    if rule not in RULES:
        raise ConfigError(f"rule must be one of {sorted(RULES)}, but got {rule!r}")
    race_method, win_level, decide_method = RULES[rule]
    rng = np.random.default_rng(seed)
    candidates = [c for c in scenario.truths if c != "default"]

    def judge(rounds: Sequence[Round]) -> FinalDecision:
        return decide(rounds, baselines=(), candidates=candidates, level=scenario.level,
                      method=decide_method)

    def claim(rounds: Sequence[Round]) -> str | None:
        return "a recommendation is ready" if judge(rounds).winner is not None else None

    race = Race(_measure(scenario, rng), candidates,
                budget=RaceBudget(max_rounds=scenario.max_rounds),
                rules=RaceRules(min_samples=scenario.min_rounds, level=scenario.level,
                                win_level=win_level, method=race_method),
                rotation=seed, claim=claim if rule in CLAIM_RULES else None)
    rounds = list(race.run().rounds)
    decision = judge(rounds)
    winner = decision.winner
    covered = True
    for c in candidates:
        iv = decision.intervals.get(c)
        covered &= iv is None or iv.low <= scenario.truths[c] <= iv.high
    always: bool | None = None
    if race_method == "anytime":
        always = True
        for c in candidates:
            logs = log_ratios([r.get(c) for r in rounds], [r.get("default") for r in rounds])
            truth = math.log(scenario.truths[c])
            for n in range(2, len(logs) + 1):
                cs = confidence_sequence(logs[:n],
                                         alpha=(1.0 - scenario.level) / len(candidates))
                if cs is not None and not cs[1] <= truth <= cs[2]:
                    always = False
                    break
    first = decision.intervals.get(candidates[0])
    half = first.high / first.ratio - 1.0 if first is not None else math.inf
    return Outcome(rule=rule, winner=winner, rounds=len(rounds), claimed=winner is not None,
                   false_claim=winner is not None and scenario.truths[winner] <= 1.0,
                   covered=covered, covered_always=always, half_width=half,
                   delivered=scenario.truths[winner] if winner is not None else 1.0)


@dataclass(frozen=True)
class Summary:
    """Rates over many races of one scenario under one rule."""

    rule: str
    races: int
    claims: float
    false_claims: float
    coverage: float
    coverage_always: float | None
    mean_rounds: float
    median_half_width: float
    delivered: float = 1.0


def summarize(scenario: Scenario, seeds: range, rule: str) -> Summary:
    """``simulate`` over ``seeds``, as rates."""
    runs = [simulate(scenario, seed, rule) for seed in seeds]
    n = len(runs)
    always = [r.covered_always for r in runs if r.covered_always is not None]
    return Summary(rule=rule, races=n, claims=sum(r.claimed for r in runs) / n,
                   false_claims=sum(r.false_claim for r in runs) / n,
                   coverage=sum(r.covered for r in runs) / n,
                   coverage_always=sum(always) / len(always) if always else None,
                   mean_rounds=float(np.mean([r.rounds for r in runs])),
                   median_half_width=float(np.median([r.half_width for r in runs])),
                   delivered=float(np.mean([r.delivered for r in runs])))
