"""When a race ends (:class:`StopRule`): settled, at its round limit, or on a close call.

Settled: every candidate was dropped; or the one candidate left, with ``min_samples`` rounds,
lies above the reference at the level Bonferroni-adjusted over every candidate that raced
(it is then the winner); or the caller's ``claim`` says why to stop once every racing
candidate has ``min_samples`` rounds (the final phase: "the decision would recommend a
candidate now"): near-equal candidates then no longer spend rounds on which of them leads, and
the claim, anytime-valid, holds wherever it stops.

The round limit: ``max_rounds`` rounds at most; a close call, where the leader's fixed-n t
interval at ``level`` lies above 1 but no winner is declared, may run on past it up to
``close_call_rounds``. With confidence sequences this only decides where the rounds go (a
lead worth more rounds), not what is claimed, so it keeps the race valid and within its
limits; by the ``t`` rule it is the only guard against peeking. (The evaluations and seconds
a round may spend: :mod:`tuner_client.stats.race_budget`.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

from tuner_client.stats.race_intervals import RaceRules, ReferenceInterval, Round

logger = logging.getLogger(__name__)

#: the caller's reason to stop the race after these rounds (a recommendation is ready)
Claim = Callable[[Sequence[Round]], str | None]


class StopRule:
    """Whether a race is settled (:meth:`settled`), whether its leader has a close call
    (:meth:`close_call`) and whether it reached its round limit (:meth:`round_limit`), by
    ``rules``, the caller's ``claim`` and the limits ``max_rounds`` and
    ``close_call_rounds``."""

    def __init__(self, rules: RaceRules, reference: str, claim: Claim | None = None, *,
                 max_rounds: int | None = None, close_call_rounds: int | None = None) -> None:
        self.rules = rules
        self.reference = reference
        self.claim = claim
        self.max_rounds = max_rounds
        self.close_call_rounds = close_call_rounds

    def round_limit(self, done: int, close_call: Callable[[], str | None]) -> str | None:
        """Why the race may not start another round after ``done``, by its round limit (a
        close call, ``close_call()``, runs it on up to ``close_call_rounds``); None if it
        may."""
        if self.max_rounds is None or done < self.max_rounds:
            return None
        close = close_call()
        if close is not None and done >= (self.close_call_rounds or 0):
            return f"the close-call limit ({self.close_call_rounds}) was reached: {close}"
        if close is None:
            return (f"the round limit ({self.max_rounds}) was reached" if done ==
                    self.max_rounds else f"the close call ended after {done} rounds: no "
                    f"candidate above {self.reference} at {100 * self.rules.level:g} % any more")
        if done == self.max_rounds:
            logger.info("race: close call after %d rounds (%s), up to %d rounds",
                        done, close, self.close_call_rounds)
        return None

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
