"""The tuner's view of the tuned knobs' values in force on the server, and since when."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Protocol

import psycopg

from harmony_base.errors import ConfigError, DatabaseError
from tuner_client.knobs.catalog import KnobCatalog

logger = logging.getLogger(__name__)


class SettingsReader(Protocol):
    """Where :meth:`InForce.refresh` reads values from (the measurer's admin connection)."""

    def current_settings(self, names: list[str]) -> dict[str, str]: ...


class InForce:
    """The knobs' values in force (PostgreSQL strings with units, compared in each knob's
    own units), when the configuration took effect and when it last changed."""

    def __init__(self, catalog: KnobCatalog) -> None:
        self.catalog = catalog
        self.values: dict[str, str] = {}
        #: when the configuration in force took effect (monotonic); queries started
        #: earlier ran under the previous one
        self.applied_at: float | None = None
        #: when a configuration was last applied (monotonic): a guardrail trip's reference
        self.changed_at: float | None = None

    def same(self, name: str, a: str | None, b: str | None) -> bool:
        """Whether ``a`` and ``b`` are the same value of knob ``name`` (``8MB == 8192kB``)."""
        if a is None or b is None:
            return a == b
        knob = self.catalog[name]
        try:
            x, y = knob.parse(a), knob.parse(b)
        except ConfigError:
            return a == b
        if isinstance(x, float) or isinstance(y, float):
            return math.isclose(float(x), float(y), rel_tol=1e-9)
        return x == y

    def differs(self, settings: Mapping[str, str]) -> dict[str, str]:
        """The part of ``settings`` not in force."""
        return {n: v for n, v in settings.items() if not self.same(n, v, self.values.get(n))}

    def holds(self, settings: Mapping[str, str]) -> bool:
        """Whether ``settings`` are the values in force."""
        return not self.differs(settings)

    def offline(self, settings: Mapping[str, str]) -> dict[str, str]:
        """The restart-time knobs of ``settings``."""
        return {n: v for n, v in settings.items() if self.catalog[n].kind == "offline"}

    def refresh(self, connection: SettingsReader, names: list[str]) -> None:
        """Read ``names``' values from the server (after a failed change, say)."""
        try:
            self.values.update(connection.current_settings(names))
        except (DatabaseError, psycopg.Error) as exc:
            logger.warning("could not read the settings in force: %s", exc)
