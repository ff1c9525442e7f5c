"""Managed mode, for the plan and the run: the knob spaces a session may measure, and what
the decisions and the summary say of the role, the deferred knobs and the operator's settings.

Chosen by the config (a DSN without a controller) and read from the role
(:mod:`tuner_client.servers.managed`); :func:`managed_knobs` parts the knobs asked for by
:func:`tuner_client.engine.managed.split_knobs` before the spaces are resolved, so the search,
the screening and the final race see only knobs ``SET LOCAL`` can carry, and the measurer's
controller refuses anything server-wide
(:class:`~tuner_client.servers.controllers.ManagedController`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harmony_base.jsontypes import JSONObject
from tuner_client.config import KnobSpec, TunerConfig
from tuner_client.engine.managed import ManagedSplit, split_knobs
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.servers.managed import ManagedServer, OperatorSetting

#: pg_settings' source for the server's own configuration files
FILE = "configuration file"


@dataclass(frozen=True)
class ManagedRun:
    """Managed mode's facts for one run: the server's reading and the knobs' split."""

    server: ManagedServer
    split: ManagedSplit

    def replaced(self, tuned: Sequence[str]) -> list[OperatorSetting]:
        """The operator's settings of knobs the run tunes (the recommendation replaces them)."""
        return [s for s in self.server.operator if s.name in tuned]

    def kept(self, tuned: Sequence[str]) -> list[OperatorSetting]:
        """The operator's settings the run leaves as they are."""
        return [s for s in self.server.operator if s.name not in tuned]

    def lines(self) -> list[str]:
        """The decisions' lines: the mode, the knobs' split, the operator's settings."""
        tuned = self.split.measured
        out = [f"managed mode ({self.server.rights.text()}): the tuner measures per "
               f"transaction, never runs ALTER SYSTEM or restarts the server, and writes "
               f"ALTER DATABASE/ALTER ROLE statements and provider parameter files",
               *self.split.lines()]
        if self.server.rights.alter_system:
            out.append("the role may ALTER SYSTEM: give database.controller to tune reload "
                       "and restart-time knobs on this server too")
        out.append("operator settings found: " + self.found_text())
        replaced = self.replaced(tuned)
        if replaced:
            out.append("operator settings of tuned knobs (the recommendation replaces them): "
                       + "; ".join(s.text() for s in replaced))
        return out

    def found_text(self) -> str:
        """The operator's settings, by where they come from: each one with its value, except
        the server's configuration file (the provider's parameter group), named only."""
        found = self.server.operator
        if not found:
            return "none"
        named = [s for s in found if s.source != FILE]
        files = [s.name for s in found if s.source == FILE]
        parts = [s.text() for s in named]
        if files:
            parts.append(f"{len(files)} from the configuration file (the provider's "
                         f"parameter group): {', '.join(files)}")
        return "; ".join(parts)

    def to_dict(self, tuned: Sequence[str]) -> JSONObject:
        return {**self.server.to_dict(), "measured": list(self.split.measured),
                "deferred": [d.to_dict() for d in self.split.deferred],
                "kept": [s.text() for s in self.kept(tuned)],
                "replaced": [s.text() for s in self.replaced(tuned)]}


def managed_knobs(config: TunerConfig, catalog: KnobCatalog, server: ManagedServer,
                  offline: Sequence[KnobSpec], online: Sequence[KnobSpec]
                  ) -> tuple[tuple[KnobSpec, ...], ManagedRun]:
    """The online knob specs a session may measure (in order), and the run's managed facts;
    every offline knob is deferred (a restart is the provider's)."""
    names = [k.name for k in online] + [k.name for k in offline]
    split = split_knobs(config, catalog, names, server.rights.may_set)
    offline_names = {k.name for k in offline}  # restart-time: deferred by the split
    measured = tuple(n for n in split.measured if n not in offline_names)
    split = ManagedSplit(measured, split.deferred)
    return tuple(k for k in online if k.name in measured), ManagedRun(server, split)


def operator_values(run: ManagedRun) -> Mapping[str, str]:
    """The operator's database- and role-level settings by knob, ``value (LEVEL)``, the level
    in force last (as PostgreSQL applies them: role in database over role over database)."""
    order = {"ALTER DATABASE": 0, "ALTER ROLE": 1, "ALTER ROLE IN DATABASE": 2}
    levels = sorted((s for s in run.server.operator if s.source in order),
                    key=lambda s: order[s.source])
    return {s.name: f"{s.value} ({s.source})" for s in levels}
