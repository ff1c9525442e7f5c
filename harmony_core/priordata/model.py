"""The unit of prior data, :class:`PriorSession`, and its JSON form (the server's answer to
``GET /priors/{name}``); :func:`prior_from_core` turns a core's trials into one."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from harmony_base.errors import ConfigError
from harmony_base.hostinfo import HostInfo
from harmony_base.jsontypes import JSONObject
from harmony_base.space import Point
from harmony_base.trial import SessionStatus, TrialRecord
from harmony_core.definition import SessionDefinition
from harmony_core.priordata.fields import FORMAT_VERSION, check_version, read_host, read_trial
from harmony_core.session import SessionCore


@dataclass
class PriorSession:
    """A session's definition, hosts, start time and trials: the unit of prior data."""

    name: str
    definition: dict[str, Any]  # SessionDefinition.to_dict()
    created: float | None
    trials: list[TrialRecord] = field(default_factory=list)
    hosts: list[HostInfo] = field(default_factory=list)
    status: SessionStatus = SessionStatus.CLOSED

    def __post_init__(self) -> None:
        # readers hand over the status as written in the file
        try:
            self.status = SessionStatus.parse(self.status)
        except ConfigError as exc:
            raise ConfigError(f"prior session {self.name!r}: {exc}") from None

    def session_definition(self) -> SessionDefinition:
        """The definition as an object (validated; errors name the session)."""
        return SessionDefinition.from_dict(self.definition, source=f"prior session {self.name!r}")

    @property
    def maximize(self) -> bool:
        return self.definition.get("objective", {}).get("goal") == "maximize"

    @property
    def parameter_names(self) -> list[str]:
        return [p["name"] for p in self.definition.get("parameters", [])]

    def completed(self) -> list[TrialRecord]:
        """Trials with a finite performance value, in trial order."""
        return [t for t in self.trials if t.completed]

    def best(self) -> tuple[Point, float] | None:
        """The best measured point and its value (in the objective's own sign)."""
        done = [(t.value, t) for t in self.completed() if t.value is not None]
        if not done:
            return None
        sign = -1.0 if self.maximize else 1.0
        value, top = min(done, key=lambda pair: sign * pair[0])
        return dict(top.point), float(value)


def to_dict(prior: PriorSession) -> JSONObject:
    """The session as a JSON-ready dict: name, status, created, definition, hosts, trials."""
    return {"format": FORMAT_VERSION, "name": prior.name, "status": prior.status,
            "created": prior.created, "definition": prior.definition,
            "hosts": [asdict(h) for h in prior.hosts],
            "trials": [t.to_dict() for t in prior.trials]}


def from_dict(data: object, *, source: str = "prior data") -> PriorSession:
    """Read a dict written by :func:`to_dict` (fields checked; errors name ``source``)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: prior data must be a JSON object, got "
                          f"{type(data).__name__}")
    check_version(str(data.get("format", "")), source)
    missing = [k for k in ("name", "definition") if k not in data]
    if missing or not isinstance(data.get("definition"), Mapping):
        raise ConfigError(f"{source}: prior data needs 'name' and a 'definition' object; "
                          f"missing {missing}")
    trials = data.get("trials") or []
    hosts = data.get("hosts") or []
    if not isinstance(trials, list) or not isinstance(hosts, list):
        raise ConfigError(f"{source}: 'trials' and 'hosts' must be lists")
    created = data.get("created")
    if created is not None and (isinstance(created, bool)
                                or not isinstance(created, int | float)):
        raise ConfigError(f"{source}: 'created' must be seconds since the epoch, got {created!r}")
    return PriorSession(
        name=str(data["name"]), definition=dict(data["definition"]),
        created=float(created) if created is not None else None,
        trials=[read_trial(row if isinstance(row, Mapping) else {}, f"{source}, trial {i}")
                for i, row in enumerate(trials)],
        hosts=[read_host(h, f"{source}, host {i}") for i, h in enumerate(hosts)],
        status=SessionStatus.parse(data.get("status", "closed")))


def prior_from_core(core: SessionCore, *, created: float | None = None,
                    hosts: Iterable[HostInfo] = ()) -> PriorSession:
    """A :class:`~harmony_core.session.SessionCore` (standalone mode) as prior data (no
    times)."""
    return PriorSession(name=core.name, definition=core.definition.to_dict(), created=created,
                        trials=core.trials(),
                        hosts=list(hosts), status=core.status)
