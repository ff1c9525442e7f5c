"""The recommendation as one record, and the one interface every file format writes it by.

A :class:`Recommendation` holds the tuned knobs, each with its value as PostgreSQL spells it
(``'64MB'``) and in the knob's own ``pg_settings`` unit (``65536`` for work_mem in kB), its
context, and the database and role a run measured on. A :class:`RecommendationWriter` turns
it into one file; each format is one subclass registered by name (``kind=``), and
:func:`writers_for` names the formats of a mode (``server``: the tuner may change the server;
``managed``: ALTER DATABASE/ROLE and the providers' parameter files).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from harmony_base.registry import Registry
from tuner_client.knobs.catalog import KnobCatalog

#: the two sets of files: a server the tuner may change, and a managed one
SERVER = "server"
MANAGED = "managed"


@dataclass(frozen=True)
class RecommendedKnob:
    """One tuned knob: its value as written for PostgreSQL, in its native unit, its context."""

    name: str
    value: str
    #: the value as a number of the knob's ``pg_settings`` unit (``65536`` for 64MB of
    #: work_mem, kB), ``on``/``off`` for booleans, the text for enums and strings
    native: str
    context: str
    unit: str | None = None
    vartype: str = "string"

    @property
    def restart(self) -> bool:
        """Whether the server must restart for the value (a ``postmaster`` knob)."""
        return self.context == "postmaster"


@dataclass(frozen=True)
class Recommendation:
    """The run's recommendation and where it applies."""

    knobs: tuple[RecommendedKnob, ...]
    database: str | None = None
    role: str | None = None
    #: one line on the evidence (the ratio and its interval), for the files' headers
    evidence: str = ""
    #: the operator's database/role-level settings by knob, ``value (LEVEL)``
    operator: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: Mapping[str, str], catalog: KnobCatalog, *,
           database: str | None = None, role: str | None = None, evidence: str = "",
           operator: Mapping[str, str] | None = None) -> Recommendation:
        """The record of ``settings`` (knob → PostgreSQL value), read against ``catalog``."""
        knobs = []
        for name, value in settings.items():
            knob = catalog[name]
            native = str(value)
            if knob.vartype in ("integer", "real"):
                number = knob.to_native(knob.coerce(value))
                native = str(int(number)) if float(number).is_integer() else repr(float(number))
            elif knob.vartype == "bool":
                native = "on" if str(value).lower() in ("on", "true", "1", "yes") else "off"
            knobs.append(RecommendedKnob(name, str(value), native, knob.context, knob.unit,
                                         knob.vartype))
        return cls(tuple(knobs), database=database, role=role, evidence=evidence,
                   operator=dict(operator or {}))


class RecommendationWriter(ABC):
    """One file format of the recommendation; subclasses register with ``kind=`` and say
    their ``file_name`` and the ``modes`` they are written in."""

    registry: ClassVar[Registry[RecommendationWriter]] = Registry("recommendation format")
    kind: ClassVar[str] = ""
    file_name: ClassVar[str] = ""
    modes: ClassVar[frozenset[str]] = frozenset({SERVER})

    def __init_subclass__(cls, kind: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if kind is not None:
            RecommendationWriter.registry.add(kind, cls)
            cls.kind = kind

    @abstractmethod
    def render(self, rec: Recommendation) -> str:
        """The file's text."""


def writers_for(mode: str) -> list[RecommendationWriter]:
    """An instance of every registered format written in ``mode``, by kind."""
    return [RecommendationWriter.registry.build(kind) for kind in sorted(
        RecommendationWriter.registry) if mode in RecommendationWriter.registry[kind].modes]
