"""What a tuning run returns, as a small typed result (in the spirit of scipy's ``OptimizeResult``).

A :class:`TuneResult` is a status and a one-line message, the :class:`Best` configuration
with what it measured, the final rounds and their :class:`Intervals`, the :class:`Work` the
run did, the :class:`Evidence` behind it (BME fit, knob screening, live guardrails) and
where the files went. :meth:`TuneResult.to_dict` is ``summary.json``; its keys and values
are the file's long-standing layout, which reports and scripts read.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harmony_base.jsontypes import JSONObject
from tuner_client.measurer.guardrails import GuardrailSummary
from tuner_client.stats.decision import FinalDecision
from tuner_client.stats.screening import Screening
from tuner_client.stats.trace import RaceTrace

#: one final round: label (``default``, ``best``, ``pgtune``, ``tuned`` ...) → its value
Round = dict[str, float | None]

#: the unit of the tuner's default objective
QPM = "queries/min"


class RunStatus(enum.StrEnum):
    """How the run ended."""

    #: the final rounds showed a tuned configuration beats the original
    IMPROVED = "improved"
    #: the final rounds ran, and no candidate beat the original with confidence
    KEPT_ORIGINAL = "kept-original"
    #: too few final rounds (or nothing searched) to decide: the original is kept
    UNDECIDED = "undecided"


@dataclass(frozen=True)
class Throughput:
    """Mean objective values of the final rounds (``None`` where not measured), in ``unit``."""

    #: the original configuration
    default: float | None
    #: the recommended configuration (the original's mean when it is kept)
    best: float | None
    #: the best aggregate found by the search, before the final re-measurement
    search_best: float | None = None
    #: the BME recommendation, when ``final.recommended`` measured it
    recommended: float | None = None
    unit: str = QPM
    #: reference configurations measured alongside (e.g. ``pgtune``)
    baselines: Mapping[str, float] = field(default_factory=dict)

    def comparison(self) -> dict[str, float | str] | None:
        """What ``harmony report`` shows as the comparison (value by label), when measured."""
        if self.default is None or self.best is None:
            return None
        return {"default": self.default, "tuned": self.best, "unit": self.unit,
                **self.baselines}


@dataclass(frozen=True)
class Best:
    """The recommended configuration, the original it is compared with, what both measured."""

    settings: dict[str, str]
    original: dict[str, str]
    throughput: Throughput

    @property
    def changed(self) -> dict[str, str]:
        """The knobs whose recommended value differs from the original."""
        return {k: v for k, v in self.settings.items() if v != self.original.get(k)}


@dataclass(frozen=True)
class Intervals:
    """The final rounds and the decision drawn from them (``None`` when too few ran), and
    the race step by step when its design recorded it."""

    rounds: list[Round]
    decision: FinalDecision | None = None
    trace: RaceTrace | None = None

    @property
    def improvement_ci(self) -> tuple[float, float] | None:
        """The recommendation's paired ratio to the original, minus one: its interval."""
        return self.decision.improvement_ci if self.decision is not None else None


@dataclass(frozen=True)
class Work:
    """What the run did: search passes, evaluations outside the final rounds, its sessions
    and its decision log (one line per decision, in order), and the same decisions as
    records (:mod:`tuner_client.phases.decisions`)."""

    passes: int
    evaluations: int
    sessions: list[str] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    decision_records: list[JSONObject] = field(default_factory=list)


@dataclass(frozen=True)
class Evidence:
    """What the run learnt on the way, where that part ran."""

    #: the BME fit of the offline measurements: the offline session's ``metadata["bme"]``
    #: JSON as it stands (written by two phases in two shapes, read back by reports)
    bme: Mapping[str, object] | None = None
    screening: Screening | None = None
    #: live mode: the guardrails' trips
    guardrails: GuardrailSummary | None = None


@dataclass
class TuneResult:
    """What a run found: status and message, the best configuration, the intervals, the work."""

    status: RunStatus
    message: str
    best: Best
    intervals: Intervals
    work: Work
    evidence: Evidence = field(default_factory=Evidence)
    output_dir: Path | None = None

    @classmethod
    def conclude(cls, best: Best, intervals: Intervals, work: Work,
                 evidence: Evidence | None = None) -> TuneResult:
        """The result with its status and message read from the decision."""
        decision = intervals.decision
        if decision is None:
            status, message = RunStatus.UNDECIDED, "no decision: keeping the original"
        else:
            status = RunStatus.IMPROVED if decision.winner is not None \
                else RunStatus.KEPT_ORIGINAL
            message = decision.lines[0] if decision.lines else status.value
        return cls(status, message, best, intervals, work, evidence or Evidence())

    @property
    def improvement(self) -> float | None:
        """Tuned over default throughput, minus one (0.25 = 25 % more): the paired ratio of
        the final rounds when decided, else the ratio of the means."""
        if self.intervals.decision is not None:
            return self.intervals.decision.improvement
        best, default = self.best.throughput.best, self.best.throughput.default
        if not best or not default:
            return None
        return best / default - 1.0

    def to_dict(self) -> dict[str, object]:
        """``summary.json``."""
        throughput, decision, ci = self.best.throughput, self.intervals.decision, \
            self.intervals.improvement_ci
        evidence = self.evidence
        return {"best_settings": self.best.settings, "default_settings": self.best.original,
                "best_qpm": throughput.best, "default_qpm": throughput.default,
                "recommended_qpm": throughput.recommended,
                "search_best_qpm": throughput.search_best,
                "improvement": self.improvement,
                "improvement_ci": list(ci) if ci else None,
                "decision": decision.to_dict() if decision is not None else None,
                "ab_rounds": self.intervals.rounds,
                "passes": self.work.passes, "evaluations": self.work.evaluations,
                "decisions": self.work.decisions,
                # a run that is interrupted raises instead of returning a result
                "interrupted": False,
                "comparison": throughput.comparison(), "bme": evidence.bme,
                "sessions": self.work.sessions,
                "screening": evidence.screening.to_dict()
                if evidence.screening is not None else None,
                "guardrails": evidence.guardrails.to_dict()
                if evidence.guardrails is not None else None,
                # the decisions as records (docs/schemas/summary.schema.json), added last
                "decision_records": self.work.decision_records}
