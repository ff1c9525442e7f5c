"""A race's decision and stop rule (:class:`StopRule`): when the race is settled, and when a
close call may run it on past its round limit.

Settled: every candidate was dropped; or the one candidate left, with ``min_samples`` rounds,
lies above the reference at the level Bonferroni-adjusted over every candidate that raced
(it is then the winner); or the caller's ``claim`` says why to stop once every racing
candidate has ``min_samples`` rounds (the final phase: "the decision would recommend a
candidate now"): near-equal candidates then no longer spend rounds on which of them leads, and
the claim, anytime-valid, holds wherever it stops.

A close call, where the leader's fixed-n t interval at ``level`` lies above 1 but no winner
is declared, may run on past ``max_rounds`` up to ``close_call_rounds``
(:class:`~tuner_client.stats.race_budget.BudgetAccount`). With confidence sequences this only
decides where the rounds go (a lead worth more rounds), not what is claimed, so it keeps the
race valid and within its limits; by the ``t`` rule it is the only guard against peeking.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from tuner_client.stats.paired import Method, RatioInterval
from tuner_client.stats.race_rules import RaceRules

Round = dict[str, float | None]
#: the caller's reason to stop the race after these rounds (a recommendation is ready)
Claim = Callable[[Sequence[Round]], str | None]
#: ``interval(label, level, method)``: ``label`` against the reference
ReferenceInterval = Callable[[str, float | None, Method | None], RatioInterval | None]


class StopRule:
    """Whether a race is settled (:meth:`settled`) and whether its leader has a close call
    (:meth:`close_call`), by ``rules`` and the caller's ``claim``."""

    def __init__(self, rules: RaceRules, reference: str, claim: Claim | None = None) -> None:
        self.rules = rules
        self.reference = reference
        self.claim = claim

    def settled(self, racing: Sequence[str], candidates: int, samples: Mapping[str, int],
                rounds: Sequence[Round], interval: ReferenceInterval
                ) -> tuple[str | None, str | None]:
        """``(why the race stops, its winner)`` after ``rounds``, with ``racing`` left of
        ``candidates`` that joined; ``(None, None)`` while it goes on."""
        if not racing:
            return "every candidate was dropped", None
        min_samples = self.rules.min_samples
        if len(racing) == 1 and samples[racing[0]] >= min_samples:
            only = racing[0]
            strict = interval(only, self.rules.win_level_over(candidates), None)
            if strict is not None and strict.above_one:
                return (f"{only} is clearly best: {only}/{self.reference} {strict.text()}, "
                        f"every other candidate dropped"), only
        if self.claim is not None and all(samples[c] >= min_samples for c in racing):
            return self.claim(rounds), None
        return None, None

    def close_call(self, leader: str | None, winner: str | None,
                   interval: ReferenceInterval) -> str | None:
        """The leader's fixed-n t interval when it lies above 1 at ``level`` but the race has
        no winner: a lead the next rounds may settle; None otherwise. (With confidence
        sequences this only spends rounds; nothing is claimed from it.)"""
        if leader is None or winner is not None:
            return None
        iv = interval(leader, None, "t")
        return f"{leader}/{self.reference} {iv.text()}" if iv is not None and iv.above_one \
            else None
