"""Which knobs managed mode measures, and what it says of the others.

On a managed server the tuner may change a knob only inside its own transactions
(``SET LOCAL``): a knob whose pg_settings context is ``user``, or ``superuser`` when the role
may set it, and whose effect one transaction sees (not :data:`SYSTEM_WIDE_KNOBS`: their
per-transaction reading misses the system-wide side, see :data:`designs.VALIDITY`). Every
other knob asked for needs the provider's parameter group (and a restart for ``postmaster``
knobs); :func:`split_knobs` says so with the design the engine would have measured it with on
a server it may change (:func:`tuner_client.engine.designs.choose`, the same rules). Pure: the
role's rights come in as ``may_set``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from harmony_base.jsontypes import JSONObject
from tuner_client.config import TunerConfig
from tuner_client.engine.comparison import comparison
from tuner_client.engine.designs import SYSTEM_WIDE_KNOBS, choose
from tuner_client.knobs.catalog import KnobCatalog

#: how a knob of each context reaches a managed server
PROVIDER_ROUTE = {
    "postmaster": "the provider's parameter group and a restart of the instance",
    "sighup": "the provider's parameter group (applied without a restart)",
    "superuser-backend": "the provider's parameter group (new sessions)",
    "backend": "the provider's parameter group (new sessions)",
    "superuser": "the provider's parameter group, or a role granted SET on it",
    "user": "the provider's parameter group",
    "internal": "nothing: it is fixed when the server is built",
}


@dataclass(frozen=True)
class Deferred:
    """A knob managed mode does not measure: why, how it reaches the server, and the design
    the engine would have measured it with."""

    name: str
    context: str
    why: str
    route: str
    design: str

    def text(self) -> str:
        return (f"{self.name} ({self.context}): not measured: {self.why}; it needs "
                f"{self.route}; with the rights to change it the tuner would have measured "
                f"it by {self.design}")

    def to_dict(self) -> JSONObject:
        return {"knob": self.name, "context": self.context, "why": self.why,
                "route": self.route, "design": self.design}


@dataclass(frozen=True)
class ManagedSplit:
    """The knobs asked for, parted into those measured per transaction and the rest."""

    measured: tuple[str, ...] = ()
    deferred: tuple[Deferred, ...] = field(default_factory=tuple)

    def lines(self) -> list[str]:
        out = [f"measured per transaction (SET LOCAL): {', '.join(self.measured) or 'none'}"]
        return out + [d.text() for d in self.deferred]


def why_not_session(name: str, context: str, may_set: Callable[[str, str], bool]) -> str | None:
    """Why a session of the role cannot measure knob ``name`` (None: it can)."""
    if context == "superuser" and not may_set(name, context):
        return "its context is 'superuser' and the role is neither superuser nor granted SET on it"
    if context not in ("user", "superuser"):
        return f"SET LOCAL cannot change a '{context}' knob"
    if name in SYSTEM_WIDE_KNOBS:
        return ("it has a system-wide side per-transaction latency does not see (parallel "
                "workers compete for the cores with every backend)")
    return None


def split_knobs(config: TunerConfig, catalog: KnobCatalog, names: Sequence[str],
                may_set: Callable[[str, str], bool]) -> ManagedSplit:
    """Part ``names`` (in order) into the knobs managed mode measures and the deferred ones."""
    measured: list[str] = []
    deferred: list[Deferred] = []
    for name in names:
        context = catalog[name].context if name in catalog else "unknown"
        why = why_not_session(name, context, may_set)
        if why is None:
            measured.append(name)
            continue
        design = choose(comparison(config, catalog, [name], replicated=False, search=False))
        deferred.append(Deferred(name, context, why,
                                 PROVIDER_ROUTE.get(context, "the provider's parameter group"),
                                 design.design))
    return ManagedSplit(tuple(measured), tuple(deferred))

