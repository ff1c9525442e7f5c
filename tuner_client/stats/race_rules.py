"""What a race judges by (:class:`RaceRules`): how many rounds a candidate gets before it is
judged, the gain it must be able to show, and the confidence levels with their Bonferroni
split. The drop rules (:mod:`tuner_client.stats.race_drops`) and the stop rule
(:mod:`tuner_client.stats.race_stop`) both read the levels from here, so a drop and a win are
judged at the same adjusted level.

The error ``1 − level`` is split by Bonferroni: over the candidates for their intervals
against the reference (which drop, and which declare a winner), and over the pairs of
candidates for the intervals between them (which drop the clearly worse of a pair). The
``t`` rule (the earlier fixed-n one, kept for comparison) drops at ``level`` itself and wins
at ``win_level``, adjusted over the candidates.
"""

from __future__ import annotations

from dataclasses import dataclass

from harmony_base.errors import ConfigError
from tuner_client.stats.decision import EARLY_LEVEL
from tuner_client.stats.levels import simultaneous_level
from tuner_client.stats.paired import Method


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
