"""What a race may spend (:class:`RaceBudget`) and what it has spent (:class:`BudgetAccount`):
the evaluations and seconds so far, and whether the next round still fits them.

Two resources, either or both: evaluations (every measurement counts, the reference's and the
baselines' too) and seconds. A round that would not fit is not started, so neither is ever
exceeded. Seconds come from a per-sample cost the caller states or from a clock; with a clock
alone the next round's time is estimated from the samples so far (the first round is measured
blind). :class:`RaceBudget` also carries the race's round limit (``max_rounds``, and
``close_call_rounds`` for a close call), which the stop rules apply
(:mod:`tuner_client.stats.race_stop`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harmony_base.errors import ConfigError

#: seconds one measurement of a label takes, as the caller knows it
Cost = float | Callable[[str], float]
#: one measurement of a label: its value, or None (or a non-finite value) when it failed
Measure = Callable[[str], float | None]


@dataclass(frozen=True)
class RaceBudget:
    """How much the race may spend: ``evaluations`` (every measurement counts, the reference's
    and the baselines' too) and/or ``seconds``; None is no limit of that kind. A round that
    would not fit is not started, so neither limit is ever exceeded. ``max_rounds``: rounds at
    most, up to ``close_call_rounds`` on a close call. ``cost``: seconds one sample takes (a
    number, or a function of the label); ``clock``: a function returning seconds (e.g.
    ``time.monotonic``) that measures the time spent instead. A race with a seconds budget
    needs one of them (:class:`BudgetAccount` checks)."""

    evaluations: int | None = None
    seconds: float | None = None
    max_rounds: int | None = None
    close_call_rounds: int | None = None
    cost: Cost | None = None
    clock: Callable[[], float] | None = None

    def __post_init__(self) -> None:
        if self.evaluations is not None and self.evaluations < 1:
            raise ConfigError(f"a race's evaluation budget must be at least 1, but got "
                              f"{self.evaluations}")
        if self.seconds is not None and not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ConfigError(f"a race's time budget must be a positive number of seconds, but "
                              f"got {self.seconds}")
        if self.close_call_rounds is not None and (self.max_rounds is None
                                                   or self.close_call_rounds < self.max_rounds):
            raise ConfigError(f"close_call_rounds ({self.close_call_rounds}) needs max_rounds "
                              f"and must be at least max_rounds ({self.max_rounds})")

    @property
    def limited(self) -> bool:
        """Whether any limit is set (a race needs one to end)."""
        return self.evaluations is not None or self.seconds is not None or bool(self.max_rounds)


class BudgetAccount:
    """What a race has spent of its :class:`RaceBudget`: :meth:`measure` counts every
    measurement; :meth:`why_full` says why the next round would not fit."""

    def __init__(self, budget: RaceBudget) -> None:
        if budget.seconds is not None and budget.cost is None and budget.clock is None:
            raise ConfigError("a race with a budget in seconds needs the cost of a sample "
                              "(cost=) or a clock (clock=) to count them")
        self.budget = budget
        self.evaluations = 0
        self._spent_cost = 0.0
        self._started: float | None = budget.clock() if budget.clock is not None else None
        self._durations: dict[str, float] = {}

    @property
    def seconds(self) -> float:
        """Seconds spent so far: by the clock if one was given, else by the stated costs."""
        clock = self.budget.clock
        if clock is not None and self._started is not None:
            return clock() - self._started
        return self._spent_cost

    def measure(self, measure: Measure, label: str) -> float | None:
        """One measurement of ``label``, its time and its evaluation counted."""
        clock, cost = self.budget.clock, self.budget.cost
        before = clock() if clock is not None else 0.0
        value = measure(label)
        if clock is not None:
            self._durations[label] = clock() - before
        if cost is not None:
            self._spent_cost += float(cost(label) if callable(cost) else cost)
        self.evaluations += 1
        return value

    def _cost_of(self, label: str) -> float | None:
        cost = self.budget.cost
        if callable(cost):
            return float(cost(label))
        if cost is not None:
            return float(cost)
        if label in self._durations:
            return self._durations[label]
        return max(self._durations.values()) if self._durations else None

    def why_full(self, labels: Sequence[str]) -> str | None:
        """Why the next round (``labels``) would spend more evaluations or seconds than the
        budget holds, or None if it fits."""
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
