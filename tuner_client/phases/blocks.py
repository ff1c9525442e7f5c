"""Paired, drift-cancelling measurement: each candidate is measured in a block between two
measurements of the session's reference configuration.

A block is ``reference, candidate × samples, reference``; the trailing reference is still in
force when the next block starts, so it also opens that block (a chain ``A B A B' A …``, one
reference measurement per candidate). The candidate's value for the strategy is its ratio to
the reference in its block (the geometric mean of its samples over that of the two reference
values) times the reference's running level: levels wander 10–30 % over tens of minutes on
these machines, the ratio within a block much less (``benchmarks/README.md``, paired
measurement).
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tuner_client.measurer import PointRecord
from tuner_client.phases.state import RunContext
from tuner_client.stats.paired import ReferenceLevel, block_ratio

logger = logging.getLogger(__name__)


@dataclass
class Reference:
    """The configuration a session's candidates are compared with, and what it measured."""

    label: str
    settings: dict[str, str]
    level: ReferenceLevel = field(default_factory=ReferenceLevel)
    #: the reference value just measured while the reference is still in force: it opens
    #: the next block instead of a new measurement
    last: float | None = None
    #: log(after / before) of every block: the reference's own drift across one candidate
    drifts: list[float] = field(default_factory=list)

    def noise(self) -> float | None:
        """The relative noise of one measurement, from the reference's repeats around the
        blocks (the spread of log(after/before) over √2); None before two blocks."""
        if len(self.drifts) < 2:
            return None
        return statistics.stdev(self.drifts) / math.sqrt(2.0)


def measure_reference(ctx: RunContext, ref: Reference) -> float | None:
    """One measurement of the reference configuration (apply, warm up, one sample).

    The reference is what was in force when the session started (the user's own settings or
    ones the budget admitted before), so it is applied without the budget check, as the
    final rounds apply the original: the user's own may break a budget tighter than what
    they run today, and refusing it would leave the session without a reference.
    """
    record = ctx.measurer.measure(f"{ref.label}-reference", {}, ref.settings, samples=1,
                                  check_budget=False)
    ctx.metrics.record_point(record, kind="reference", restarts=False)
    if record.failure is not None or record.value is None:
        logger.warning("[%s] reference measurement failed: %s", ref.label, record.failure)
        return None
    return record.value


def measure_block(ctx: RunContext, ref: Reference, label: str, point: Mapping[str, Any],
                  settings: Mapping[str, str]) -> PointRecord:
    """Measure ``settings`` in a block beside ``ref``; ``value`` is the paired value."""
    fresh = ref.last is None
    before = measure_reference(ctx, ref) if fresh else ref.last
    record = ctx.measurer.measure(label, point, settings)
    if record.failure is not None:
        # refused by the budget: nothing was applied and the reference is still in force;
        # otherwise the next block starts with a fresh reference measurement
        if not record.failure.startswith("infeasible"):
            ref.last = None
        record.value = None
        return record
    after = measure_reference(ctx, ref)
    ref.last = after
    references = [v for v in (before, after) if v is not None and v > 0]
    record.reference = references
    ratio = block_ratio([s.qpm for s in record.samples], references)
    if before and after and before > 0 and after > 0:
        ref.drifts.append(math.log(after / before))
    for v in ([before, after] if fresh else [after]):
        ref.level.add(v)
    if ratio is None:
        record.value = None
        record.failure = "no usable reference measurement in the block"
        return record
    record.ratio = ratio
    record.value = ref.level.value(ratio)
    return record
