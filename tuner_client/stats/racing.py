"""Racing candidates against a reference under a budget of evaluations or seconds: every
candidate still in the race is measured once per round beside the reference, a clearly worse
one is dropped as soon as its paired interval shows it, and the race stops when one candidate
is clearly best or the budget is spent.

A round measures the reference, the racing candidates and any baselines once each,
interleaved (the order reversed every other round and rotated once per pair of rounds,
:func:`~tuner_client.stats.noise.round_order`),
so each candidate's ratio to the reference, and to every other candidate, is paired by round
and the machine's drift cancels. A candidate gets ``min_samples`` paired rounds first; after
that it keeps being measured only while its interval against the reference reaches
``1 + min_gain`` and its interval against every other racing candidate reaches 1 (Maron and
Moore's racing, with intervals on paired log-ratios instead of Hoeffding bounds).

The intervals (``method="anytime"``, the default) are anytime-valid confidence sequences
(:mod:`tuner_client.stats.sequential`): they hold at every round at once, so the race may
look after every round and stop on any rule. The error ``1 − level`` is split by Bonferroni:
over the candidates for their intervals against the reference (which drop, and which declare
a winner: the one candidate left whose interval lies above 1), and over the pairs of
candidates for the intervals between them (which drop the clearly worse of a pair). So the
race claims a candidate better than the reference when it is not, or drops one as worse when
it is not, with probability at most ``1 − level`` each, however long it runs.

A close call, where the leader's fixed-n t interval at ``level`` lies above 1 but no winner
is declared, may run on past ``max_rounds`` up to ``close_call_rounds``. With confidence
sequences this only decides where the rounds go (a lead worth more rounds), not what is
claimed, so it keeps the race valid and within its limits. ``claim``, a stop rule of the
caller's (the final phase: "the decision would recommend a candidate now"), ends the race
once every candidate has ``min_samples`` rounds: near-equal candidates then no longer spend
rounds on which of them leads, and the claim, anytime-valid, holds wherever it stops.

``method="t"`` is the earlier rule, kept for comparison (``benchmarks/anytime_race.py``):
fixed-n Student t intervals at ``level`` checked after every round, a win on ``win_level``
Bonferroni-adjusted, and the close call as the only guard against peeking.

The final rounds of a tuning run are such a race (:mod:`tuner_client.phases.final`), judged
afterwards by :func:`~tuner_client.stats.decision.decide` with the same confidence sequences.

Pure: driven by a ``measure(label) -> float | None`` callback; seconds come from a per-sample
cost the caller states or from a clock function.

This module is the round loop (:class:`Race`: who races, one round measured, the result);
each concern it consults has a module of its own. Before a round: the round limit and its
close call (:mod:`tuner_client.stats.race_stop`), then what the race may still spend
(:mod:`tuner_client.stats.race_budget`: evaluations and seconds). After it: which candidates
leave (:mod:`tuner_client.stats.race_drops`), then whether the race is settled
(:mod:`tuner_client.stats.race_stop`). All of them judge by
:mod:`tuner_client.stats.race_intervals`: the paired intervals over the rounds and the levels
with their Bonferroni split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from harmony_base.errors import ConfigError
from tuner_client.stats.noise import round_order
from tuner_client.stats.paired import Method, RatioInterval
from tuner_client.stats.race_budget import BudgetAccount, Cost, Measure, RaceBudget
from tuner_client.stats.race_drops import MAX_FAILURES, Drops
from tuner_client.stats.race_intervals import RaceRules, Round, RoundIntervals
from tuner_client.stats.race_stop import Claim, StopRule

__all__ = ["MAX_FAILURES", "Claim", "Cost", "Measure", "Race", "RaceBudget", "RaceResult",
           "RaceRules", "Round"]


@dataclass(frozen=True)
class RaceResult:
    """What a race found.

    ``winner``: the candidate that is clearly best (its interval against the reference above
    1, Bonferroni-adjusted over the candidates, and every other candidate dropped), else
    None. ``leader``: the racing candidate with the highest ratio to the reference when the
    race stopped (None if every candidate was dropped). ``stopped``: why the race ended.
    ``rounds``: label → value per round, in time order (a dropped candidate's later rounds
    lack its label), ready for :func:`~tuner_client.stats.decision.decide`. ``samples``:
    measurements per label. ``dropped``: candidate → why, with the round it left after.
    ``intervals``: each candidate's interval against the reference at ``level`` (not
    Bonferroni-adjusted), by ``method``."""

    winner: str | None
    leader: str | None
    stopped: str
    rounds: tuple[Round, ...]
    reference: str
    intervals: dict[str, RatioInterval | None]
    samples: dict[str, int]
    dropped: dict[str, str]
    dropped_after: dict[str, int]
    evaluations: int
    seconds: float
    baselines: tuple[str, ...] = field(default=())
    method: Method = "anytime"

    @property
    def racing(self) -> list[str]:
        """Candidates still in the race at the end."""
        return [c for c in self.intervals if c not in self.dropped]


class Race:
    """A race of ``candidates`` against ``reference``; :meth:`run` to the end, or :meth:`step`
    one round at a time (a candidate may join between rounds with :meth:`add`).

    ``measure(label)`` takes one sample of a label and returns its value (higher is better;
    None or a non-finite value is a failed measurement). ``baselines`` are measured every
    round beside the reference but never race or win (e.g. ``pgtune``). ``budget``: the
    limits (evaluations, seconds, rounds) and how seconds are counted (:class:`RaceBudget`);
    ``rules``: the rounds before a candidate is judged, the gain it must show and the levels
    (:class:`RaceRules`). ``rotation``: where the interleaved order starts.
    ``claim(rounds)``: the caller's reason to stop (a recommendation is ready), else None.
    """

    def __init__(self, measure: Measure, candidates: Sequence[str], *,
                 reference: str = "default", baselines: Sequence[str] = (),
                 budget: RaceBudget | None = None, rules: RaceRules | None = None,
                 rotation: int = 0, claim: Claim | None = None) -> None:
        self.budget = budget or RaceBudget()
        self.rules = rules or RaceRules()
        if self.budget.max_rounds is not None and self.budget.max_rounds < self.rules.min_samples:
            raise ConfigError(f"max_rounds ({self.budget.max_rounds}) must be at least "
                              f"min_samples ({self.rules.min_samples})")
        if not self.budget.limited:
            raise ConfigError("a race needs a limit: a budget in evaluations or seconds, or "
                              "max_rounds")
        self.measure = measure
        self.reference = reference
        self.baselines = tuple(baselines)
        self.rotation = rotation
        self.account = BudgetAccount(self.budget)
        self.drops = Drops(self.rules, reference)
        self.stop = StopRule(self.rules, reference, claim, max_rounds=self.budget.max_rounds,
                             close_call_rounds=self.budget.close_call_rounds)
        self.rounds: list[Round] = []
        self.intervals = RoundIntervals(self.rounds, reference, self.rules)
        self.samples: dict[str, int] = {}
        self.stopped: str | None = None
        self.winner: str | None = None
        self._candidates: list[str] = []
        for label in candidates:
            self.add(label)
        if not self._candidates:
            raise ConfigError("a race needs at least one candidate, but got none")

    # -- state ---------------------------------------------------------------------------

    def add(self, label: str) -> None:
        """Let ``label`` join the race from the next round (a late candidate's pairs are the
        rounds it was measured in). The Bonferroni split counts it from then on, so the rounds
        before it joined were judged at a looser level: for the race's guarantee to hold
        exactly, name every candidate at the start."""
        if label == self.reference or label in self.baselines or label in self._candidates:
            raise ConfigError(f"{label!r} is already in the race (as the reference, a baseline "
                              "or a candidate); every label must be distinct")
        self._candidates.append(label)
        self.samples.setdefault(label, 0)
        if self.winner is not None or self.stopped == "every candidate was dropped":
            self.stopped, self.winner = None, None  # settled without the newcomer

    @property
    def racing(self) -> list[str]:
        """Candidates still in the race, in the order they joined."""
        return self.drops.racing(self._candidates)

    @property
    def dropped(self) -> dict[str, str]:
        """Dropped candidate → why."""
        return self.drops.dropped

    @property
    def evaluations(self) -> int:
        """Measurements taken so far, every label's."""
        return self.account.evaluations

    @property
    def seconds(self) -> float:
        """Seconds spent so far: by the clock if one was given, else by the stated costs."""
        return self.account.seconds

    def interval(self, label: str, other: str | None = None, *,
                 level: float | None = None, method: Method | None = None
                 ) -> RatioInterval | None:
        """``label``/``other`` (default: the reference) over the rounds measuring both, by the
        race's method unless ``method`` is given."""
        return self.intervals.interval(label, other, level=level, method=method)

    def close_call(self) -> str | None:
        """The leader's lead worth more rounds (:meth:`StopRule.close_call`), else None."""
        return self.stop.close_call(self.leader(), self.winner,
                                    self.intervals.against_reference)

    def leader(self) -> str | None:
        """The racing candidate with the highest ratio to the reference (with an interval)."""
        return self.intervals.leader(self.racing)

    # -- the race ------------------------------------------------------------------------

    def step(self) -> bool:
        """Measure one round and update the race; False once the race has ended (then
        :attr:`stopped` says why and nothing was measured)."""
        if self.stopped is not None:
            return False
        labels = [self.reference, *self.racing, *self.baselines]
        why = (self.stop.round_limit(len(self.rounds), self.close_call)
               or self.account.why_full(labels))
        if why is not None:
            self.stopped = why
            return False
        index = len(self.rounds)
        row: Round = {}
        # rotated once per pair of rounds: every label takes every position and neighbour in
        # turn (a fixed order kept the reference at the ends, always beside itself)
        for label in round_order(labels, index, self.rotation + index // 2):
            value = self.account.measure(self.measure, label)
            self.samples[label] = self.samples.get(label, 0) + 1
            kept = float(value) if value and math.isfinite(value) and value > 0 else None
            row[label] = kept
            if kept is None and label in self._candidates:
                self.drops.failed(label)
        self.rounds.append({label: row[label] for label in labels})
        self.drops.apply(self._candidates, self.samples, len(self.rounds),
                         self.intervals.between)
        self.stopped, winner = self.stop.settled(self.racing, len(self._candidates),
                                                 self.samples, self.rounds,
                                                 self.intervals.against_reference)
        if winner is not None:
            self.winner = winner
        return self.stopped is None

    def run(self) -> RaceResult:
        """Race to the end and return the result."""
        while self.step():
            pass
        return self.result()

    def result(self) -> RaceResult:
        """The race so far (final once :meth:`step` returned False)."""
        return RaceResult(winner=self.winner, leader=self.leader(),
                          stopped=self.stopped or "still racing",
                          rounds=tuple(dict(r) for r in self.rounds), reference=self.reference,
                          intervals={c: self.interval(c) for c in self._candidates},
                          samples=dict(self.samples), dropped=dict(self.drops.dropped),
                          dropped_after=dict(self.drops.dropped_after),
                          evaluations=self.evaluations, seconds=self.seconds,
                          baselines=self.baselines, method=self.rules.method)
