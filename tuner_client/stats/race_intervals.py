"""What a race judges by: the intervals on its rounds and the levels they are judged at.

The rounds (:data:`Round`: label → value, one measurement of each label per round) pair every
label with the reference and with each other by round; :class:`RoundIntervals` gives the
paired interval of any two labels over the rounds measuring both, and the leader (the racing
candidate with the highest ratio to the reference). :class:`RaceRules` says how many rounds a
candidate gets before it is judged, the gain it must be able to show, and the confidence
levels with their Bonferroni split. The drop rules (:mod:`tuner_client.stats.race_drops`) and
the stop rules (:mod:`tuner_client.stats.race_stop`) both judge with these intervals at these
levels, so a drop and a win are judged at the same adjusted level.

The error ``1 − level`` is split by Bonferroni: over the candidates for their intervals
against the reference (which drop, and which declare a winner), and over the pairs of
candidates for the intervals between them (which drop the clearly worse of a pair). The
``t`` rule (the earlier fixed-n one, kept for comparison) drops at ``level`` itself and wins
at ``win_level``, adjusted over the candidates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harmony_base.errors import ConfigError
from tuner_client.stats.decision import EARLY_LEVEL
from tuner_client.stats.levels import simultaneous_level
from tuner_client.stats.paired import Method, RatioInterval, paired_ratio_interval

#: one round: each label's value (None: its measurement failed; a dropped candidate's later
#: rounds lack its label)
Round = dict[str, float | None]
#: ``interval(label, other, level)``: ``label``/``other`` over the rounds measuring both
PairInterval = Callable[[str, str, float], RatioInterval | None]
#: ``interval(label, level, method)``: ``label`` against the reference
ReferenceInterval = Callable[[str, float | None, Method | None], RatioInterval | None]


@dataclass(frozen=True)
class RaceRules:
    """The statistics a race judges by. ``min_samples``: paired rounds a candidate gets before
    it may be dropped or win; ``min_gain``: a candidate is dropped once its interval against
    the reference lies below ``1 + min_gain``; ``level``: the confidence level the race's
    error is split from; ``win_level``: the ``t`` rule's level for a win; ``method``:
    ``anytime`` (confidence sequences, the default) or ``t`` (the earlier fixed-n rule, for
    comparison); ``also_compared``: candidates compared with the reference's rivals before
    the race and not racing (a per-transaction stage that chose one of them); the Bonferroni
    split counts them."""

    min_samples: int = 2
    min_gain: float = 0.0
    level: float = 0.95
    win_level: float = EARLY_LEVEL
    method: Method = "anytime"
    #: candidates compared before the race (e.g. per transaction) and not racing: the
    #: Bonferroni split of the reference intervals counts them too
    also_compared: int = 0

    def __post_init__(self) -> None:
        if self.min_samples < 2:
            raise ConfigError(f"a candidate needs at least 2 paired samples for an interval, "
                              f"but min_samples is {self.min_samples}")
        if not (0.0 < self.level < 1.0 and 0.0 < self.win_level < 1.0):
            raise ConfigError(f"confidence levels must be between 0 and 1, but got level "
                              f"{self.level}, win_level {self.win_level}")
        if self.method not in ("anytime", "t"):
            raise ConfigError(f"a race's method must be 'anytime' or 't', but got "
                              f"{self.method!r}")

    def reference_level(self, candidates: int) -> float:
        """The level of each candidate's confidence sequence against the reference, for its
        drop and its win, among ``candidates`` racing: ``level`` Bonferroni-adjusted over
        them and :attr:`also_compared`. (The ``t`` rule drops at ``level`` and wins at
        ``win_level``, adjusted the same way.)"""
        return simultaneous_level(self.level, candidates + self.also_compared)

    def drop_level(self, candidates: int) -> float:
        """The level a candidate is dropped against the reference at."""
        return self.level if self.method == "t" else self.reference_level(candidates)

    def pair_level(self, candidates: int) -> float:
        """The level of the interval between two candidates: ``level`` Bonferroni-adjusted
        over the pairs (by the ``t`` rule, ``level`` itself)."""
        if self.method == "t":
            return self.level
        return simultaneous_level(self.level, candidates * (candidates - 1) // 2)

    def win_level_over(self, candidates: int) -> float:
        """The level the one candidate left must clear the reference at to win: Bonferroni
        for every candidate that raced (the winner was picked among them)."""
        if self.method == "t":
            return simultaneous_level(self.win_level, candidates + self.also_compared)
        return self.reference_level(candidates)


class RoundIntervals:
    """The paired intervals over a race's ``rounds`` (the list the race appends to), at
    ``rules``' level and by its method unless told otherwise."""

    def __init__(self, rounds: Sequence[Round], reference: str, rules: RaceRules) -> None:
        self.rounds = rounds
        self.reference = reference
        self.rules = rules

    def interval(self, label: str, other: str | None = None, *,
                 level: float | None = None, method: Method | None = None
                 ) -> RatioInterval | None:
        """``label``/``other`` (default: the reference) over the rounds measuring both."""
        other = other or self.reference
        return paired_ratio_interval([r.get(label) for r in self.rounds],
                                     [r.get(other) for r in self.rounds],
                                     level=self.rules.level if level is None else level,
                                     method=method or self.rules.method)

    def against_reference(self, label: str, level: float | None, method: Method | None
                          ) -> RatioInterval | None:
        """A :data:`ReferenceInterval`: ``label`` against the reference."""
        return self.interval(label, level=level, method=method)

    def between(self, label: str, other: str, level: float) -> RatioInterval | None:
        """A :data:`PairInterval`: ``label`` against ``other``."""
        return self.interval(label, other, level=level)

    def leader(self, racing: Sequence[str]) -> str | None:
        """The candidate of ``racing`` with the highest ratio to the reference (with an
        interval)."""
        best, best_ratio = None, -math.inf
        for c in racing:
            iv = self.interval(c)
            if iv is not None and iv.ratio > best_ratio:
                best, best_ratio = c, iv.ratio
        return best
