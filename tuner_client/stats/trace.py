"""A race as data, whatever its design: each label's ratio to the reference with its running
interval after each step (a round of windows, a block of switchback slices, a prefix of a
per-transaction run's time slices), who left the race and why, and why it stopped. The
report (:mod:`harmony_report.race`) draws it from ``summary.json``'s ``race``; the keys are
those the windows race has always written, plus ``design`` and ``unit``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harmony_base.jsontypes import JSONObject
from tuner_client.stats.paired import RatioInterval
from tuner_client.stats.sequential import confidence_sequence


@dataclass(frozen=True)
class TraceStep:
    """One label's interval after ``at`` steps of the race."""

    at: int
    interval: RatioInterval

    def to_dict(self) -> JSONObject:
        iv = self.interval
        # an unbounded confidence sequence (too few steps yet) has no finite high: null
        return {"round": self.at, "ratio": iv.ratio, "low": iv.low,
                "high": iv.high if math.isfinite(iv.high) else None, "n": iv.n}


@dataclass(frozen=True)
class RaceTrace:
    """The race step by step. ``unit``: what a step is (``round``, ``block``, ``slice``);
    ``method``: the intervals' method key (``anytime``, ``t``, ``bootstrap``); ``note``: how
    to read the running intervals when they are not anytime-valid."""

    design: str
    unit: str
    reference: str
    level: float
    method: str
    trajectory: Mapping[str, Sequence[TraceStep]]
    dropped: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    stopped: str | None = None
    note: str | None = None

    def to_dict(self, *, winner: str | None = None, decision_level: float | None = None,
                unstable: Mapping[str, str] | None = None) -> JSONObject:
        """``summary.json``'s ``race``."""
        return {"design": self.design, "unit": self.unit, "reference": self.reference,
                "level": self.level, "method": self.method, "decision_level": decision_level,
                "labels": list(self.trajectory),
                "trajectory": {label: [s.to_dict() for s in steps]
                               for label, steps in self.trajectory.items()},
                "dropped": {label: {"after": after, "reason": why}
                            for label, (after, why) in self.dropped.items()},
                "stopped": self.stopped, "note": self.note, "winner": winner,
                "unstable": dict(unstable or {})}


def running_sequence(logs: Sequence[float], level: float) -> list[TraceStep]:
    """The confidence sequence of the mean of ``logs`` (one log-ratio per round, block or
    slice, in time order) after each of them from the second on, as ratios: valid at every
    step at once, so the whole path may be shown, not only its end."""
    steps = []
    for k in range(2, len(logs) + 1):
        cs = confidence_sequence(list(logs[:k]), alpha=1.0 - level)
        if cs is None:
            continue
        mean, low, high = cs
        steps.append(TraceStep(k, RatioInterval(
            math.exp(mean), math.exp(low) if math.isfinite(low) else 0.0,
            math.exp(high) if math.isfinite(high) else math.inf, k, level, "anytime")))
    return steps
