"""The measurer's constructor in small typed parts: the server it measures, the hooks around
applying a configuration, and live mode's guardrails."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from harmony_base.jsontypes import JSON
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.measurer.guardrails import Guardrail, Trip
from tuner_client.servers.controllers.base import RestartReport

#: ``feasible(wanted, changed)``: why a configuration breaks the memory budget, or None
Feasible = Callable[[Mapping[str, str], Mapping[str, str]], str | None]


class Restarter(Protocol):
    """What the measurer needs of a controller: restart with new offline values, or roll back."""

    def restart_with(self, offline_values: Mapping[str, JSON],
                     timeout_s: float) -> RestartReport: ...

    @property
    def changes_server(self) -> bool:
        """False: the server's configuration is the provider's (managed mode)."""


@dataclass(frozen=True)
class ServerAccess:
    """The server being tuned: how to connect (``dsn``), its knobs (``catalog``), and how to
    restart it (``controller``, optional: without one an offline knob cannot change).
    ``restart_timeout_s`` bounds a restart and the wait for the server to accept connections.
    """

    dsn: str
    catalog: KnobCatalog
    controller: Restarter | None = None
    restart_timeout_s: float = 60.0


@dataclass(frozen=True)
class ApplyHooks:
    """What the measurer consults and tells around applying: ``feasible`` refuses a
    configuration that breaks the memory budget before it reaches the server; ``on_restart``
    is told of every restart, ``(seconds, succeeded)``."""

    feasible: Feasible | None = None
    on_restart: Callable[[float, bool], None] | None = None


@dataclass(frozen=True)
class LiveWatch:
    """Live mode: the guardrails checked on partial windows during every sample
    (``on_trip`` told of each trip), and which statements a window compares with the
    reference (``min_calls`` calls per window, ``min_coverage`` of the reference's time)."""

    guard: Guardrail | None = None
    on_trip: Callable[[Trip], None] | None = None
    min_calls: int = 20
    min_coverage: float = 0.5
