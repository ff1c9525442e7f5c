"""One outcome for every single-run race (issue 53): every candidate compared with the
reference in one run of a design (per transaction, switchback, duet), at the simultaneous
(Bonferroni) level the winner must clear and at the plain level the other intervals are
shown at. :class:`DesignRace` makes, once for all of them, the verdict, the decision's lines,
the :class:`~tuner_client.stats.decision.FinalDecision`, the race's trace and what
``summary.json`` may record; a design's race class fills in only what differs: its name and
interval method, the line saying how it measured, what one observation is (a slice, a block,
a batch), and the notes and fields of its own.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Generic, Protocol, TypeVar

from harmony_base.jsontypes import JSONObject
from tuner_client.stats.decision import FinalDecision, race_decision, race_verdict
from tuner_client.stats.levels import early_level
from tuner_client.stats.paired import Method, RatioInterval
from tuner_client.stats.trace import RaceTrace, TraceStep, running_sequence


class Compared(Protocol):
    """A candidate against the reference: its interval and its words."""

    @property
    def interval(self) -> RatioInterval: ...

    def text(self) -> str: ...


C = TypeVar("C", bound=Compared)


@dataclass(frozen=True)
class DesignRace(abc.ABC, Generic[C]):
    """Every candidate against the reference from one run of a design, and the decision.

    A design's race is a frozen dataclass subclass: its class variables name the design, its
    own fields follow these."""

    #: the design's name (the decisions, summary.json)
    design: ClassVar[str]
    #: the design in the verdict's words (``per transaction``)
    design_words: ClassVar[str]
    #: the intervals' method key and its words (summary.json's ``method``)
    method: ClassVar[Method]
    method_text: ClassVar[str]
    #: what a step of the running interval is (``slice``, ``block``); None: not traced
    unit: ClassVar[str | None] = None
    #: how to read the running interval beside the decision's
    trace_note: ClassVar[str | None] = None
    #: the race splits its error rate between its looks and its planned end
    #: (:mod:`tuner_client.stats.horizon`): its running sequence is at the early level
    horizon: ClassVar[bool] = False

    reference: str
    #: each candidate at the simultaneous (Bonferroni) level, and at the plain level
    comparisons: Mapping[str, C]
    plain: Mapping[str, C]
    winner: str | None
    level: float
    plain_level: float

    # -- what a design fills in ---------------------------------------------------------------
    @abc.abstractmethod
    def design_line(self) -> str:
        """The decision's second line: how the race was measured, what the ratio counts, the
        intervals' method and level."""

    @abc.abstractmethod
    def observations(self, comparison: C) -> int:
        """The observations behind ``comparison``'s interval (slices, blocks, batches)."""

    def interval_method(self) -> Method:
        """The intervals' method key (a race read at its time limit may differ from the
        class's: :mod:`tuner_client.stats.horizon`)."""
        return self.method

    def interval_method_text(self) -> str:
        """The intervals' method in words (as :meth:`interval_method`)."""
        return self.method_text

    def comparison_lines(self, label: str, comparison: C) -> list[str]:
        """``label``'s lines of the decision: its interval (and a design's caveat)."""
        return [f"{label}/{self.reference}: {comparison.text()}"]

    def notes(self) -> list[str]:
        """The decision's closing lines (a design's warnings)."""
        return []

    def transactions(self) -> Mapping[str, tuple[int, int]] | None:
        """Each candidate's (reference, candidate) transactions, when the design counts them."""
        return None

    def running_logs(self, comparison: C) -> Sequence[float] | None:
        """Each step's log speedup, in time order (None: the race keeps none)."""
        return None

    def summary_fields(self) -> JSONObject:
        """The design's own fields of :meth:`summary`."""
        return {}

    def comparison_fields(self, label: str, comparison: C) -> JSONObject:
        """The design's own fields of a comparison in :meth:`summary`."""
        return {}

    # -- made here, once ----------------------------------------------------------------------
    def verdict(self) -> str:
        """The decision in one line."""
        return race_verdict(self.winner, self.reference,
                            {label: c.interval for label, c in self.comparisons.items()},
                            self.design_words)

    def decisions(self) -> list[str]:
        """The decision's lines: the verdict, the design, each candidate's interval, notes."""
        lines = [self.verdict(), self.design_line()]
        for label, comparison in self.comparisons.items():
            lines += self.comparison_lines(label, comparison)
        return lines + self.notes()

    def to_final_decision(self) -> FinalDecision:
        """The race as the tuner's :class:`FinalDecision` (summary.json, the report): its
        ``rounds`` and each interval's ``n`` are the design's observations."""
        return race_decision(
            winner=self.winner, reference=self.reference,
            plain={label: c.interval for label, c in self.plain.items()},
            simultaneous={label: c.interval for label, c in self.comparisons.items()},
            rounds={label: self.observations(c) for label, c in self.comparisons.items()},
            transactions=self.transactions(), lines=self.decisions(), level=self.plain_level,
            decision_level=self.level, method=self.interval_method(), design=self.design,
            method_text=self.interval_method_text())

    def trace(self) -> RaceTrace | None:
        """The race step by step: each candidate's confidence sequence at the plain level
        after every step (None when the design keeps no steps)."""
        logs = {label: self.running_logs(c) for label, c in self.plain.items()}
        if self.unit is None or any(v is None for v in logs.values()):
            return None
        level = early_level(self.plain_level) if self.horizon else self.plain_level
        steps = {label: running_sequence(v or (), level) for label, v in logs.items()}
        if self.interval_method() != "anytime":  # read at its end: the last step is the end's
            steps = {label: [*s[:-1], TraceStep(s[-1].at, self.plain[label].interval)]
                     if s else s for label, s in steps.items()}
        return RaceTrace(self.design, self.unit, self.reference, self.plain_level, "anytime",
                         steps, note=self.trace_note)

    def summary(self) -> JSONObject:
        """What summary.json may record: the design, its observations and each interval."""
        return {"design": self.design, "reference": self.reference, "winner": self.winner,
                "level": self.level, **self.summary_fields(),
                "comparisons": {
                    label: {"ratio": c.interval.ratio, "low": c.interval.low,
                            "high": c.interval.high if math.isfinite(c.interval.high) else None,
                            **self.comparison_fields(label, c)}
                    for label, c in self.comparisons.items()}}
