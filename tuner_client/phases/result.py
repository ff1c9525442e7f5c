"""What a tuning run returns: the best configuration, the final comparison, where files went."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class TuneResult:
    """What a run found: the best configuration, the A/B comparison, and where files went."""

    best_settings: dict[str, str]
    default_settings: dict[str, str]
    best_qpm: float | None
    default_qpm: float | None
    ab_rounds: list[dict[str, float | None]]
    passes: int
    evaluations: int
    output_dir: Path | None
    decisions: list[str] = field(default_factory=list)
    interrupted: bool = False
    #: the best aggregate found by the search (before the final re-measurement)
    search_best_qpm: float | None = None
    #: the BME recommendation's throughput, when ``final.recommended`` measured it
    recommended_qpm: float | None = None
    #: what ``harmony report`` shows as the comparison (qpm by label), when measured
    comparison: dict[str, Any] | None = None
    #: the BME fit of the offline measurements (parameters in bytes, r2, points), if any
    bme: dict[str, Any] | None = None
    #: the run's session names
    sessions: list[str] = field(default_factory=list)
    #: the final decision (:meth:`tuner_client.stats.decision.FinalDecision.to_dict`): the
    #: winner, every label's paired interval against the default, unstable candidates
    decision: dict[str, Any] | None = None
    #: the recommended configuration's paired ratio to the default, minus one, with its
    #: interval (fractions); 0.0 and None when the original is kept
    paired_improvement: float | None = None
    improvement_ci: tuple[float, float] | None = None
    #: the knob screening's ranking (``Screening.to_dict()``), when screening ran
    screening: dict[str, Any] | None = None
    #: live mode: the guardrails' trips (:meth:`tuner_client.guardrails.Guardrail.summary`)
    guardrails: dict[str, Any] | None = None

    @property
    def improvement(self) -> float | None:
        """Tuned over default throughput, minus one (0.25 = 25 % more): the paired ratio of
        the final rounds when decided, else the ratio of the means."""
        if self.paired_improvement is not None:
            return self.paired_improvement
        if not self.best_qpm or not self.default_qpm:
            return None
        return self.best_qpm / self.default_qpm - 1.0

    def to_dict(self) -> dict[str, Any]:
        return {"best_settings": self.best_settings, "default_settings": self.default_settings,
                "best_qpm": self.best_qpm, "default_qpm": self.default_qpm,
                "recommended_qpm": self.recommended_qpm, "search_best_qpm": self.search_best_qpm,
                "improvement": self.improvement,
                "improvement_ci": list(self.improvement_ci) if self.improvement_ci else None,
                "decision": self.decision, "ab_rounds": self.ab_rounds,
                "passes": self.passes, "evaluations": self.evaluations,
                "decisions": self.decisions, "interrupted": self.interrupted,
                "comparison": self.comparison, "bme": self.bme, "sessions": self.sessions,
                "screening": self.screening, "guardrails": self.guardrails}
