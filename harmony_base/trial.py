"""The one trial record shared by the session core, the server's store and prior data.

A :class:`TrialRecord` is one hand-out of a candidate point to a client and what became of
it: its status, the value or failure reason reported, who measured it and when. The core
makes them (without times: it has no clock), the leased session adds the lease and report
times, the store keeps them as rows, and prior-data files hold them; every one of those is
the same frozen record, so a trial read back from any of them compares equal.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from harmony_base.errors import ConfigError, TrialError
from harmony_base.jsontypes import JSONObject
from harmony_base.space import Point

__all__ = ["SessionStatus", "TrialRecord", "TrialStatus"]


_E = TypeVar("_E", bound=enum.StrEnum)


def _member(cls: type[_E], raw: object) -> _E | None:
    """The member of ``cls`` whose value is ``raw`` (as read from JSON, a row or a file)."""
    return next((member for member in cls if raw == member.value), None)


class TrialStatus(enum.StrEnum):
    """Where a trial stands; the value is what JSON, the store and prior-data files hold."""

    LEASED = "leased"  # handed to a client, no report yet
    DONE = "done"  # reported with a finite value
    FAILED = "failed"  # reported as a failure (with a reason)
    RELEASED = "released"  # its lease ran out; the point was handed out again

    @classmethod
    def parse(cls, raw: object) -> TrialStatus:
        """``raw`` (a status as written in JSON, a store row or a file) as a status."""
        found = _member(cls, raw)
        if found is None:
            raise TrialError(f"a trial's status must be one of {[s.value for s in cls]}, "
                             f"got {raw!r}")
        return found

    @property
    def reported(self) -> bool:
        """True once a result (a value or a failure) came back; later reports are ignored."""
        return self in (TrialStatus.DONE, TrialStatus.FAILED)


class SessionStatus(enum.StrEnum):
    """A session's lifecycle as listings and prior data show it."""

    RUNNING = "running"
    PAUSED = "paused"
    CONVERGED = "converged"
    #: the run that drove the session ended before the search converged
    FINISHED = "finished"
    CLOSED = "closed"
    #: read from a prior-data file into a store
    IMPORTED = "imported"
    #: a store's live row (not hosted right now)
    LIVE = "live"
    #: its command log could not be replayed: kept, not served (session listings only)
    BROKEN = "broken"

    @classmethod
    def parse(cls, raw: object) -> SessionStatus:
        """``raw`` (a status as written in JSON, a store row or a file) as a status."""
        found = _member(cls, raw)
        if found is None:
            raise ConfigError(f"a session's status must be one of {[s.value for s in cls]}, "
                              f"got {raw!r}")
        return found

    @property
    def ended(self) -> bool:
        """True for a session whose search has ended (what reports show as finished)."""
        return self in (SessionStatus.CONVERGED, SessionStatus.FINISHED, SessionStatus.CLOSED)


@dataclass(frozen=True)
class TrialRecord:
    """One hand-out of a candidate, and what became of it (like Optuna's ``FrozenTrial``).

    ``id`` is the trial id clients report by, unique in the session; ``candidate`` is the
    session's id of the point (one candidate may be measured by several trials). ``value``
    is in the objective's own sign. ``leased_at`` and ``reported_at`` are epoch seconds,
    ``None`` where no clock was kept (the bare core). A ``status`` given as a string is
    checked and turned into a :class:`TrialStatus`.
    """

    id: int
    candidate: int
    point: Point
    client: str | None
    status: TrialStatus = TrialStatus.LEASED
    value: float | None = None
    failure: str | None = None
    leased_at: float | None = None
    reported_at: float | None = None

    def __post_init__(self) -> None:
        # a status given as its string (a hand-built record) is checked and converted here
        object.__setattr__(self, "status", TrialStatus.parse(self.status))

    @property
    def completed(self) -> bool:
        """Measured with a finite value (what rankings and warm starts use)."""
        return (self.status is TrialStatus.DONE and self.value is not None
                and math.isfinite(self.value))

    def to_dict(self) -> JSONObject:
        """The JSON form (field order as declared; the status as its string)."""
        return {"id": self.id, "candidate": self.candidate, "point": self.point,
                "client": self.client, "status": self.status.value, "value": self.value,
                "failure": self.failure, "leased_at": self.leased_at,
                "reported_at": self.reported_at}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "trial") -> TrialRecord:
        """Read :meth:`to_dict`'s form (unknown or missing fields name ``where``)."""
        unknown = sorted(set(data) - FIELD_NAMES)
        missing = sorted(n for n in ("id", "candidate", "point", "status") if n not in data)
        if unknown or missing:
            raise TrialError(f"{where}: trial fields: unknown {unknown}, missing {missing}")
        point = data["point"]
        if not isinstance(point, Mapping):
            raise TrialError(f"{where}: 'point' must be an object, got {point!r}")
        try:
            return cls(int(data["id"]), int(data["candidate"]), dict(point), data.get("client"),
                       TrialStatus.parse(data["status"]), _number(data.get("value")),
                       data.get("failure"), _number(data.get("leased_at")),
                       _number(data.get("reported_at")))
        except (TypeError, ValueError, TrialError) as exc:
            raise TrialError(f"{where}: {exc}") from None


def _number(raw: Any) -> float | None:
    return None if raw is None else float(raw)


#: the record's field names, in order (the columns of the text prior-data format)
FIELD_NAMES = frozenset(f.name for f in fields(TrialRecord))
FIELD_ORDER = tuple(f.name for f in fields(TrialRecord))
