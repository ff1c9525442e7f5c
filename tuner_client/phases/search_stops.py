"""When the per-transaction search stops: a run once it ranks its candidates (:func:`ranked`),
and a session once it has stalled (:class:`Stall`).

**A run** ends once every candidate's :data:`RANK_LEVEL` interval is within
±:data:`SETTLED_HALF_WIDTH`, within :data:`SETTLED_SHARE_OF_EFFECT` of its own effect, or
wholly below :data:`SETTLED_NO_GAIN` (see :mod:`tuner_client.phases.search_per_transaction`).

**A session** ends once :data:`STALL_ROUNDS` simplexes' worth of evaluations in a row
(``STALL_ROUNDS × (knobs + 1)``, at least :data:`STALL_MIN`) have shown no gain over the
session's reference: none of their 95 % intervals lay wholly above 1. The search only ranks;
a simplex whose vertices all read within the noise of the reference is wandering in it, and
its next steps cost minutes without changing what the final race (which claims) is given.
On the one-pass mix, where no online knob moves throughput, the search ran its 30
evaluations over 9–10 minutes with every candidate at 1.00–1.05× (±4–9 %); a candidate that
does gain resets the count, so a search that found a better region keeps going.
"""

from __future__ import annotations

import math

from harmony_base.errors import HarmonyError
from tuner_client.measurer import PointRecord
from tuner_client.stats.per_transaction import rank_compare
from workloads.per_transaction.trace import Trace

#: the level of the intervals a run in progress is looked at with (:func:`ranked`): a run
#: stops when the search can rank, not when it could claim. A wrong order among close
#: candidates costs the simplex a step, never a recommendation (the final race re-measures
#: with its own anytime-valid intervals), and at 80 % a candidate with no gain is below 1.05
#: after about a third of the transactions the 95 % interval needs (half-width ∝ z/√n)
RANK_LEVEL = 0.80
#: a run ends once every candidate's interval is this narrow (±3 %, log scale) ...
SETTLED_HALF_WIDTH = 0.03
#: ... or narrower than this share of its own effect (a 1.26× candidate at ±5.8 %): enough to
#: rank it, where the search needs no more ...
SETTLED_SHARE_OF_EFFECT = 0.25
#: ... or its whole interval below this: it cannot be a gain worth taking (5 %, the smallest
#: the tuner means to resolve), and the search moves away from it however much it loses
SETTLED_NO_GAIN = 1.05
#: the bootstrap resamples of a look at a run in progress (the end's analysis takes the full
#: :data:`tuner_client.stats.per_transaction.RESAMPLES`)
LOOK_RESAMPLES = 1000
#: a session stalls after this many simplexes' worth of evaluations without a gain ...
STALL_ROUNDS = 2
#: ... and never after fewer evaluations than this
STALL_MIN = 4


def ranked(trace: Trace, seed: int = 0) -> bool:
    """Whether a run so far ranks every candidate (configurations 1..) against the reference
    (0) well enough for the search: each one's :data:`RANK_LEVEL` interval within
    ±:data:`SETTLED_HALF_WIDTH`, within :data:`SETTLED_SHARE_OF_EFFECT` of its own log effect,
    or wholly below :data:`SETTLED_NO_GAIN`. False while a comparison cannot be made yet (too
    few slices or transactions). Slices as short as
    :func:`~tuner_client.stats.per_transaction.ranking_slice_s` allows
    (:func:`~tuner_client.stats.per_transaction.rank_compare`): the search ranks."""
    for k in range(1, len(trace.configurations)):
        try:
            result = rank_compare(trace, 0, k, level=RANK_LEVEL, seed=seed,
                                  resamples=LOOK_RESAMPLES)
        except HarmonyError:
            return False
        if result.interval.high < SETTLED_NO_GAIN:
            continue
        effect = abs(math.log(result.interval.ratio))
        if result.half_width > max(SETTLED_HALF_WIDTH, SETTLED_SHARE_OF_EFFECT * effect):
            return False
    return True


class Stall:
    """Counts a session's evaluations since the last one whose interval lay wholly above 1."""

    def __init__(self, knobs: int) -> None:
        self.limit = max(STALL_MIN, STALL_ROUNDS * (knobs + 1))
        self.without_gain = 0

    def add(self, record: PointRecord) -> None:
        """Count a finished evaluation (a failed one, with no interval, does not count)."""
        if record.interval is None:
            return
        self.without_gain = 0 if record.interval[0] > 1.0 else self.without_gain + 1

    @property
    def stalled(self) -> bool:
        return self.without_gain >= self.limit

    def text(self) -> str:
        return (f"stalled: the last {self.without_gain} evaluations showed no gain over the "
                f"reference (no 95 % interval wholly above 1; the search stops after "
                f"{STALL_ROUNDS} simplexes' worth, {self.limit})")
