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
sequences this only decides where the rounds go, not what is claimed. ``claim``, a stop rule
of the caller's (the final phase: "the decision would recommend a candidate now"), ends the
race once every candidate has ``min_samples`` rounds: near-equal candidates then no longer
spend rounds on which of them leads, and the claim, anytime-valid, holds wherever it stops.

``method="t"`` is the earlier rule, kept for comparison (``benchmarks/anytime_race.py``):
fixed-n Student t intervals at ``level`` checked after every round, a win on ``win_level``
Bonferroni-adjusted, and the close call as the only guard against peeking.

The final rounds of a tuning run are such a race (:mod:`tuner_client.phases.final`), judged
afterwards by :func:`~tuner_client.stats.decision.decide` with the same confidence sequences.

Pure: driven by a ``measure(label) -> float | None`` callback; seconds come from a per-sample
cost the caller states or from a clock function.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from harmony_base.errors import ConfigError
from tuner_client.stats.decision import EARLY_LEVEL
from tuner_client.stats.noise import round_order
from tuner_client.stats.paired import Method, RatioInterval, paired_ratio_interval

logger = logging.getLogger(__name__)

Round = dict[str, float | None]
#: one measurement of a label: its value, or None (or a non-finite value) when it failed
Measure = Callable[[str], float | None]
#: seconds one measurement of a label takes, as the caller knows it
Cost = float | Callable[[str], float]
#: a candidate whose measurement failed this many times leaves the race
MAX_FAILURES = 2


@dataclass(frozen=True)
class RaceBudget:
    """How much the race may spend: ``evaluations`` (every measurement counts, the reference's
    and the baselines' too) and/or ``seconds``; None is no limit of that kind. A round that
    would not fit is not started, so neither limit is ever exceeded."""

    evaluations: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        if self.evaluations is not None and self.evaluations < 1:
            raise ConfigError(f"a race's evaluation budget must be at least 1, but got "
                              f"{self.evaluations}")
        if self.seconds is not None and not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ConfigError(f"a race's time budget must be a positive number of seconds, but "
                              f"got {self.seconds}")


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
    def racing(self) -> list[str]:  # candidates still in the race at the end
        return [c for c in self.intervals if c not in self.dropped]


class Race:
    """A race of ``candidates`` against ``reference``; :meth:`run` to the end, or :meth:`step`
    one round at a time (a candidate may join between rounds with :meth:`add`).

    ``measure(label)`` takes one sample of a label and returns its value (higher is better;
    None or a non-finite value is a failed measurement). ``baselines`` are measured every
    round beside the reference but never race or win (e.g. ``pgtune``). ``cost``: seconds one
    sample takes (a number, or a function of the label); ``clock``: a function returning
    seconds (e.g. ``time.monotonic``) that measures the time spent instead. A seconds budget
    needs one of them; with a clock alone the next round's time is estimated from the samples
    so far (the first round is measured blind). ``method``: ``anytime`` (confidence
    sequences, the default) or ``t`` (the earlier fixed-n rule, for comparison).
    ``also_compared``: candidates compared before the race, not in it (Bonferroni counts them).
    ``claim(rounds)``: the caller's reason to stop (a recommendation is ready), else None.
    """

    def __init__(self, measure: Measure, candidates: Sequence[str], *,
                 reference: str = "default", baselines: Sequence[str] = (),
                 budget: RaceBudget | None = None, min_samples: int = 2,
                 max_rounds: int | None = None, level: float = 0.95,
                 win_level: float = EARLY_LEVEL, min_gain: float = 0.0,
                 cost: Cost | None = None, clock: Callable[[], float] | None = None,
                 rotation: int = 0, close_call_rounds: int | None = None,
                 method: Method = "anytime", also_compared: int = 0,
                 claim: Callable[[Sequence[Round]], str | None] | None = None) -> None:
        self.budget = budget or RaceBudget()
        if min_samples < 2:
            raise ConfigError(f"a candidate needs at least 2 paired samples for an interval, "
                              f"but min_samples is {min_samples}")
        if max_rounds is not None and max_rounds < min_samples:
            raise ConfigError(f"max_rounds ({max_rounds}) must be at least min_samples "
                              f"({min_samples})")
        if close_call_rounds is not None and (max_rounds is None
                                              or close_call_rounds < max_rounds):
            raise ConfigError(f"close_call_rounds ({close_call_rounds}) needs max_rounds and "
                              f"must be at least max_rounds ({max_rounds})")
        if not (0.0 < level < 1.0 and 0.0 < win_level < 1.0):
            raise ConfigError(f"confidence levels must be between 0 and 1, but got level "
                              f"{level}, win_level {win_level}")
        if method not in ("anytime", "t"):
            raise ConfigError(f"a race's method must be 'anytime' or 't', but got {method!r}")
        if self.budget.seconds is not None and cost is None and clock is None:
            raise ConfigError("a race with a budget in seconds needs the cost of a sample "
                              "(cost=) or a clock (clock=) to count them")
        if self.budget.evaluations is None and self.budget.seconds is None and not max_rounds:
            raise ConfigError("a race needs a limit: a budget in evaluations or seconds, or "
                              "max_rounds")
        self.measure = measure
        self.reference = reference
        self.baselines = tuple(baselines)
        self.min_samples = min_samples
        self.max_rounds = max_rounds
        self.level = level
        self.win_level = win_level
        self.min_gain = min_gain
        self.cost = cost
        self.clock = clock
        self.rotation = rotation
        self.close_call_rounds = close_call_rounds
        self.method: Method = method
        self.also_compared = also_compared
        self.claim = claim
        self.rounds: list[Round] = []
        self.samples: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self.dropped: dict[str, str] = {}
        self.dropped_after: dict[str, int] = {}
        self.evaluations = 0
        self._spent_cost = 0.0
        self._started: float | None = clock() if clock is not None else None
        self._durations: dict[str, float] = {}
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
        return [c for c in self._candidates if c not in self.dropped]

    @property
    def seconds(self) -> float:
        """Seconds spent so far: by the clock if one was given, else by the stated costs."""
        if self.clock is not None and self._started is not None:
            return self.clock() - self._started
        return self._spent_cost

    def interval(self, label: str, other: str | None = None, *,
                 level: float | None = None, method: Method | None = None
                 ) -> RatioInterval | None:
        """``label``/``other`` (default: the reference) over the rounds measuring both, by the
        race's method unless ``method`` is given."""
        other = other or self.reference
        return paired_ratio_interval([r.get(label) for r in self.rounds],
                                     [r.get(other) for r in self.rounds],
                                     level=self.level if level is None else level,
                                     method=method or self.method)

    def reference_level(self) -> float:
        """The level of each candidate's confidence sequence against the reference, for its
        drop and its win: ``level`` Bonferroni-adjusted over the candidates. (The ``t`` rule
        drops at ``level`` and wins at ``win_level``, adjusted the same way.)"""
        return 1.0 - (1.0 - self.level) / max(1, len(self._candidates) + self.also_compared)

    def pair_level(self) -> float:
        """The level of the interval between two candidates: ``level`` Bonferroni-adjusted
        over the pairs (by the ``t`` rule, ``level`` itself)."""
        if self.method == "t":
            return self.level
        m = len(self._candidates)
        return 1.0 - (1.0 - self.level) / max(1, m * (m - 1) // 2)

    def close_call(self) -> str | None:
        """The leader's fixed-n t interval when it lies above 1 at ``level`` but the race has
        no winner (a lead worth more rounds; nothing is claimed from it); None otherwise."""
        leader = self.leader()
        if leader is None or self.winner is not None:
            return None
        iv = self.interval(leader, method="t")
        return f"{leader}/{self.reference} {iv.text()}" if iv is not None and iv.above_one \
            else None

    def leader(self) -> str | None:
        """The racing candidate with the highest ratio to the reference (with an interval)."""
        best, best_ratio = None, -math.inf
        for c in self.racing:
            iv = self.interval(c)
            if iv is not None and iv.ratio > best_ratio:
                best, best_ratio = c, iv.ratio
        return best

    # -- budget --------------------------------------------------------------------------

    def _cost_of(self, label: str) -> float | None:
        if callable(self.cost):
            return float(self.cost(label))
        if self.cost is not None:
            return float(self.cost)
        if label in self._durations:
            return self._durations[label]
        return max(self._durations.values()) if self._durations else None

    def _round_labels(self) -> list[str]:
        return [self.reference, *self.racing, *self.baselines]

    def _fits(self, labels: Sequence[str]) -> str | None:
        """Why the next round (``labels``) would break the budget, or None if it fits."""
        done = len(self.rounds)
        if self.max_rounds is not None and done >= self.max_rounds:
            close = self.close_call()
            if close is not None and done >= (self.close_call_rounds or 0):
                return f"the close-call limit ({self.close_call_rounds}) was reached: {close}"
            if close is None:
                return (f"the round limit ({self.max_rounds}) was reached" if done ==
                        self.max_rounds else f"the close call ended after {done} rounds: no "
                        f"candidate above {self.reference} at {100 * self.level:g} % any more")
            if done == self.max_rounds:
                logger.info("race: close call after %d rounds (%s), up to %d rounds",
                            done, close, self.close_call_rounds)
        b = self.budget
        if b.evaluations is not None and self.evaluations + len(labels) > b.evaluations:
            return (f"the budget of {b.evaluations} evaluations is spent "
                    f"({self.evaluations} used; a round takes {len(labels)})")
        if b.seconds is not None:
            costs = [self._cost_of(label) for label in labels]
            need = sum(c for c in costs if c is not None)
            if self.seconds + need > b.seconds:
                return (f"the budget of {b.seconds:g} s is spent ({self.seconds:.0f} s used; a "
                        f"round takes about {need:.0f} s)")
        return None

    # -- the race ------------------------------------------------------------------------

    def step(self) -> bool:
        """Measure one round and update the race; False once the race has ended (then
        :attr:`stopped` says why and nothing was measured)."""
        if self.stopped is not None:
            return False
        labels = self._round_labels()
        why = self._fits(labels)
        if why is not None:
            self.stopped = why
            return False
        index = len(self.rounds)
        row: Round = {}
        # rotated once per pair of rounds: every label takes every position and neighbour
        for label in round_order(labels, index, self.rotation + index // 2):
            before = self.clock() if self.clock is not None else 0.0
            value = self.measure(label)
            if self.clock is not None:
                self._durations[label] = self.clock() - before
            if self.cost is not None:
                self._spent_cost += float(self.cost(label) if callable(self.cost)
                                          else self.cost)
            self.evaluations += 1
            self.samples[label] = self.samples.get(label, 0) + 1
            kept = float(value) if value and math.isfinite(value) and value > 0 else None
            row[label] = kept
            if kept is None and label in self._candidates:
                self.failures[label] = self.failures.get(label, 0) + 1
        self.rounds.append({label: row[label] for label in labels})
        self._drop()
        self.stopped = self._settled()
        return self.stopped is None

    def _drop_one(self, label: str, reason: str) -> None:
        self.dropped[label] = reason
        self.dropped_after[label] = len(self.rounds)
        logger.info("race: %s dropped after %d rounds: %s", label, len(self.rounds), reason)

    def _drop(self) -> None:
        for label in self.racing:
            if self.failures.get(label, 0) >= MAX_FAILURES:
                self._drop_one(label, f"its measurement failed {self.failures[label]} times")
        ready = [c for c in self.racing if self.samples[c] >= self.min_samples]
        drop_level = self.level if self.method == "t" else self.reference_level()
        for label in ready:
            iv = self.interval(label, level=drop_level)
            if iv is not None and iv.high < 1.0 + self.min_gain:
                gain = f" + {100 * self.min_gain:g} %" if self.min_gain else ""
                self._drop_one(label, f"{label}/{self.reference} {iv.text()} lies below "
                                      f"1{gain}")
        # then against each other: only candidates both ready, against those still racing
        for label in [c for c in ready if c not in self.dropped]:
            for other in [c for c in ready if c != label and c not in self.dropped]:
                iv = self.interval(label, other, level=self.pair_level())
                if iv is not None and iv.below_one:
                    self._drop_one(label, f"{label}/{other} {iv.text()}: clearly worse than "
                                          f"{other}")
                    break

    def _settled(self) -> str | None:
        racing = self.racing
        if not racing:
            return "every candidate was dropped"
        if len(racing) == 1 and self.samples[racing[0]] >= self.min_samples:
            only = racing[0]
            # Bonferroni for every candidate that raced: the winner was picked among them
            m = len(self._candidates) + self.also_compared
            strict = self.interval(only, level=1.0 - (1.0 - self.win_level) / m) \
                if self.method == "t" else self.interval(only, level=self.reference_level())
            if strict is not None and strict.above_one:
                self.winner = only
                return (f"{only} is clearly best: {only}/{self.reference} {strict.text()}, "
                        f"every other candidate dropped")
        if self.claim is not None and all(self.samples[c] >= self.min_samples for c in racing):
            return self.claim(self.rounds)
        return None

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
                          samples=dict(self.samples), dropped=dict(self.dropped),
                          dropped_after=dict(self.dropped_after),
                          evaluations=self.evaluations, seconds=self.seconds,
                          baselines=self.baselines, method=self.method)
