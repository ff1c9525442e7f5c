"""A race's drop rules (:class:`Drops`): which candidates leave the race, after how many
rounds and why (judged by the intervals and levels of
:mod:`tuner_client.stats.race_intervals`).

After every round, in this order: a candidate whose measurement failed :data:`MAX_FAILURES`
times leaves; then, among the candidates with ``min_samples`` rounds, one whose interval
against the reference lies below ``1 + min_gain``; then, between the candidates both ready,
one whose interval against another still racing lies below 1 (Maron and Moore's racing, with
intervals on paired log-ratios instead of Hoeffding bounds). The levels are
:class:`~tuner_client.stats.race_intervals.RaceRules`'s Bonferroni-adjusted ones, so a candidate
is dropped as worse when it is not with probability at most ``1 − level``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from tuner_client.stats.race_intervals import PairInterval, RaceRules

logger = logging.getLogger(__name__)

#: a candidate whose measurement failed this many times leaves the race
MAX_FAILURES = 2


class Drops:
    """The candidates dropped so far (``dropped``: why; ``dropped_after``: after how many
    rounds) and the failed measurements counted against each (``failures``)."""

    def __init__(self, rules: RaceRules, reference: str) -> None:
        self.rules = rules
        self.reference = reference
        self.failures: dict[str, int] = {}
        self.dropped: dict[str, str] = {}
        self.dropped_after: dict[str, int] = {}

    def racing(self, candidates: Sequence[str]) -> list[str]:
        """``candidates`` not dropped, in their order."""
        return [c for c in candidates if c not in self.dropped]

    def failed(self, label: str) -> None:
        """Count a failed measurement of the candidate ``label``."""
        self.failures[label] = self.failures.get(label, 0) + 1

    def _drop_one(self, label: str, reason: str, rounds: int) -> None:
        self.dropped[label] = reason
        self.dropped_after[label] = rounds
        logger.info("race: %s dropped after %d rounds: %s", label, rounds, reason)

    def apply(self, candidates: Sequence[str], samples: Mapping[str, int], rounds: int,
              interval: PairInterval) -> None:
        """Drop what the rules drop after ``rounds`` rounds, among ``candidates`` (every one
        that joined) with ``samples`` measurements each."""
        for label in self.racing(candidates):
            if self.failures.get(label, 0) >= MAX_FAILURES:
                self._drop_one(label, f"its measurement failed {self.failures[label]} times",
                               rounds)
        rules = self.rules
        ready = [c for c in self.racing(candidates) if samples[c] >= rules.min_samples]
        drop_level = rules.drop_level(len(candidates))
        for label in ready:
            iv = interval(label, self.reference, drop_level)
            if iv is not None and iv.high < 1.0 + rules.min_gain:
                gain = f" + {100 * rules.min_gain:g} %" if rules.min_gain else ""
                self._drop_one(label, f"{label}/{self.reference} {iv.text()} lies below "
                                      f"1{gain}", rounds)
        # then against each other: only candidates both ready, against those still racing
        pair_level = rules.pair_level(len(candidates))
        for label in [c for c in ready if c not in self.dropped]:
            for other in [c for c in ready if c != label and c not in self.dropped]:
                iv = interval(label, other, pair_level)
                if iv is not None and iv.below_one:
                    self._drop_one(label, f"{label}/{other} {iv.text()}: clearly worse than "
                                          f"{other}", rounds)
                    break
