"""One protocol for the measurement designs (issue 53): what a design needs, what it gives,
and the registry that finds it by name.

A design races a comparison: the configurations by label, the labels that race (the first
the reference), the level the claim must hold at, and the labels measured beside them only
to be reported (:class:`RaceRequest`). It gives a :class:`RaceOutcome`: the winner (None:
the reference stays) and the race as the tuner's
:class:`~tuner_client.stats.decision.FinalDecision` (every ``FinalDecision`` is built in
:mod:`tuner_client.stats.decision`); a design that records its race as data also gives a
:class:`~tuner_client.stats.trace.RaceTrace` (:class:`Traced`), which the report draws.

Every concrete design registers under its name (``class Switchback(FinalDesign,
name="switchback")``, as strategies do), so the chooser's choice
(:func:`tuner_client.engine.designs.choose`) finds its implementation here, and a new design
is one more class: no caller branches on a design's name. Compositions of designs (the split
race, the narrowing, a design with a fallback) are designs too. The run a design reads is a
type parameter: the implementations live beside the run they measure
(:mod:`tuner_client.phases.final_design`), the engine stays below them.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import ClassVar, Generic, Protocol, TypeVar, runtime_checkable

from harmony_base.errors import ConfigError
from tuner_client.stats.decision import FinalDecision
from tuner_client.stats.trace import RaceTrace

RunT = TypeVar("RunT", contravariant=True)


@dataclass(frozen=True)
class RaceRequest:
    """What a design races: ``labels`` (the first the reference) among ``configurations``,
    the claim at ``level``; ``reported``: labels measured beside the race for the report
    (a design measuring one configuration at a time may add them; the others leave them
    out); ``also_compared``: candidates compared before this race and not in it, which its
    simultaneous level counts too; ``searched``: the candidates the search found, the rest
    being rules of thumb (a decision checks their search measurements for a degrade; a
    narrowing chooses among them); ``stage``: the part of a composition this race is (e.g.
    ``restart part``), which its decisions name."""

    configurations: Mapping[str, Mapping[str, str]]
    labels: tuple[str, ...]
    level: float
    reported: tuple[str, ...] = ()
    also_compared: int = 0
    searched: tuple[str, ...] = ()
    stage: str | None = None

    def __post_init__(self) -> None:
        missing = [label for label in (*self.labels, *self.reported)
                   if label not in self.configurations]
        if len(self.labels) < 2 or missing:
            raise ConfigError(f"a race needs a reference and at least one candidate, each "
                              f"with its configuration, but got labels {list(self.labels)} "
                              f"and no configuration for {missing}")

    @property
    def reference(self) -> str:
        return self.labels[0]

    @property
    def candidates(self) -> tuple[str, ...]:
        return self.labels[1:]

    def settings(self) -> list[dict[str, str]]:
        """The racing labels' configurations, in order."""
        return [dict(self.configurations[label]) for label in self.labels]

    def at(self, level: float) -> RaceRequest:
        """The same race with its claim at ``level`` (a stage of a composition)."""
        return replace(self, level=level)


class RaceOutcome(Protocol):
    """What every design's race gives: its winner (None: the reference stays) and the race
    as the tuner's decision (None: too little was measured to decide)."""

    @property
    def winner(self) -> str | None: ...

    def to_final_decision(self) -> FinalDecision | None: ...


@runtime_checkable
class Traced(Protocol):
    """An outcome that records its race as data: each label's running interval."""

    def trace(self) -> RaceTrace | None: ...


#: every concrete design, by name
DESIGNS: dict[str, type[Design[object]]] = {}


class Design(abc.ABC, Generic[RunT]):
    """A measurement design: races a :class:`RaceRequest` in the run it is given.

    Subclasses register with ``name=``; an abstract intermediate class passes none."""

    name: ClassVar[str]

    def __init_subclass__(cls, name: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if name is None:
            return
        if name in DESIGNS and DESIGNS[name] is not cls:
            raise ConfigError(f"two designs register the name {name!r}: "
                              f"{DESIGNS[name].__qualname__} and {cls.__qualname__}")
        cls.name = name
        DESIGNS[name] = cls  # type: ignore[assignment]

    @abc.abstractmethod
    def race(self, run: RunT, request: RaceRequest) -> RaceOutcome | None:
        """The race of ``request`` in this design; None, said why in the run's decisions,
        when it could not run (the caller then falls back on a design that can)."""


def design_named(name: str) -> type[Design[object]]:
    """The design registered as ``name``; a :class:`ConfigError` naming the registered ones
    when none is."""
    if name not in DESIGNS:
        raise ConfigError(f"no measurement design is registered as {name!r}; registered: "
                          f"{', '.join(sorted(DESIGNS)) or 'none'}")
    return DESIGNS[name]
