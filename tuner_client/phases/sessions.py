"""The Harmony sessions of a run: their references, their definitions (with warm starts) and
opening them."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from harmony_base.jsontypes import JSON
from harmony_core.definition import PluginSpec, SessionDefinition
from harmony_core.warmstart import apply_warm_start
from tuner_client.api.client import Session, host_metadata
from tuner_client.config import KnobSpace
from tuner_client.phases.blocks import (
    METADATA_KEY,
    Reference,
    SessionReferences,
    open_references,
)
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.state import RunContext, RunState

logger = logging.getLogger(__name__)


def session_definition(ctx: RunContext, state: RunState, label: str, space: KnobSpace,
                       constraints: list[str], strategy: str, options: Mapping[str, JSON],
                       init_point: Mapping[str, JSON] | None, *, warm: bool = False,
                       metadata: Mapping[str, JSON] | None = None,
                       references: SessionReferences | None = None,
                       evaluations: int | None = None) -> SessionDefinition:
    """The session's definition; with ``warm`` (and prior data) the search starts from the
    earlier sessions' best points, else from ``init_point`` (when given). A replicated
    session's ``references`` go into its metadata, so that replicas on other hosts scale
    their ratios by the same pooled level, and so does its budget of ``evaluations``, so
    that they stop claiming trials once every one is taken. Nothing is measured or applied
    here."""
    cfg = ctx.config
    sp = space.space
    opts = dict(options)
    plugins = []
    if constraints:
        plugins.append(PluginSpec("constraint", {"constraints": constraints}))
    # a paired block measures all of a candidate's samples for one trial
    plugins.append(PluginSpec("agg", {"times": 1 if cfg.measure.paired else cfg.measure.samples,
                                      "how": cfg.measure.aggregate}))
    metadata = dict(metadata or {})
    if references is not None and references.replicated:
        metadata[METADATA_KEY] = {**references.metadata(ctx.measurer.in_force, ctx.pool),
                                  "evaluations": evaluations}
    definition = SessionDefinition(
        name=f"{cfg.name}-{ctx.run_id}-{label}"[:200], space=sp, strategy=strategy,
        strategy_options=opts, plugins=tuple(plugins), maximize=True, objective="qpm",
        seed=cfg.seed, lease_seconds=ctx.pool.session_lease_s,
        metadata={"tuner": cfg.name, "run": ctx.run_id, "session": label,
                  "workload": str(cfg.workload.mix or cfg.workload.schedule or "pgbench"),
                  **metadata})
    if warm and ctx.priors:
        warmed = apply_warm_start(definition, ctx.priors, host=host_metadata())
        info = warmed.metadata.get("warm_start")
        if warmed is not definition and info is not None:
            state.decide(Decision.of(label, Kind.START, step="warm start",
                                     labels=info["sessions"], values=info["start"],
                                     method=info["option"]))
            return warmed
        state.decide(Decision.of(label, Kind.START, step="warm start",
                                 values=dict(init_point or {})))
    if init_point is not None and "init_point" not in opts:
        opts["init_point"] = sp.snap(init_point)
        opts.setdefault("init_method", "point")
        definition = replace(definition, strategy_options=opts)
    return definition


def session_references(ctx: RunContext, label: str, space: KnobSpace,
                       reference: Reference | None = None) -> SessionReferences | None:
    """Session ``label``'s paired references (None without ``measure.paired``): the settings
    in force of ``space`` (or ``reference``, carried over from an earlier session) on every
    replica; on a replicated pool every live replica measures them now, and their geometric
    mean is the session's pooled level (:func:`tuner_client.phases.blocks.open_references`)."""
    if not ctx.config.measure.paired:
        return None
    return open_references(ctx.pool, ctx.metrics, label,
                           reference or Reference(label, ctx.current(space.names)))


def open_session(ctx: RunContext, state: RunState, definition: SessionDefinition,
                 kind: str) -> Session:
    """Create (or join) the session and make it the one the metrics show."""
    session = ctx.client.create_session(definition, exist_ok=True)
    state.open_session(session, kind)
    ctx.metrics.start_session(session.name, kind)
    return session
