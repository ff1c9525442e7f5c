"""The tuner's labels as enums: the phase it is in, what an evaluation was for, why a point
failed. Their values are what metrics labels, session kinds and logs carry."""

from __future__ import annotations

import enum

__all__ = ["EvaluationKind", "FailureKind", "Phase", "infeasible"]


class Phase(enum.StrEnum):
    """What the tuner is doing (the ``phase`` metric label)."""

    IDLE = "idle"
    OFFLINE = "offline"
    SCREENING = "screening"
    ONLINE = "online"
    BASELINE = "baseline"
    FINAL = "final"


class EvaluationKind(enum.StrEnum):
    """What a measured point was for (the ``kind`` label of the evaluation metrics)."""

    OFFLINE = "offline"
    ONLINE = "online"
    SCREENING = "screening"
    REFERENCE = "reference"
    #: the original configuration re-measured in the final rounds
    BASELINE = "baseline"
    #: a candidate re-measured in the final rounds
    FINAL = "final"


class FailureKind(enum.StrEnum):
    """Why a point failed (the ``kind`` label of the failure metric)."""

    APPLY = "apply"
    RESTART = "restart"
    MEASURE = "measure"
    #: refused before it was applied: outside the memory budget or a constraint
    INFEASIBLE = "infeasible"
    OTHER = "other"

    @classmethod
    def of(cls, reason: str) -> FailureKind:
        """The kind of a failure reason as the measurer words it (the one place that reads
        the text; the reason itself travels to the server as it is)."""
        text = reason.lower()
        if text.startswith(_INFEASIBLE):
            return cls.INFEASIBLE
        if "restart" in text:
            return cls.RESTART
        if "apply" in text:  # also "applying ..."
            return cls.APPLY
        if "sampl" in text or "measur" in text:
            return cls.MEASURE
        return cls.OTHER


_INFEASIBLE = "infeasible"


def infeasible(reason: str) -> str:
    """The failure reason of a point refused before it was applied (see :class:`FailureKind`)."""
    return f"{_INFEASIBLE}: {reason}"
