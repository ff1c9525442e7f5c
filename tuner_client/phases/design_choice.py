"""Which design measures a run's comparison, and the final race run in it: the run's side of
the measurement engine (:mod:`tuner_client.engine.designs` holds the rules as data).

:func:`comparison_of` reads what the rules depend on from the run (the differing knobs'
contexts, the workload's driver, the replicas, live traffic, the memory budget);
:func:`choose_for` takes the engine's choice; :func:`race_in` runs a final race in a design
other than windows (the windows race is :mod:`tuner_client.phases.final`'s own). The search
(:mod:`tuner_client.phases.search_per_transaction`), the screening and the final race all
choose here, so one comparison is never measured in a design another phase would refuse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tuner_client.engine.comparison import SEARCH_DESIGNS, comparison
from tuner_client.engine.designs import (
    DUET,
    PER_TRANSACTION,
    PRECISION,
    SWITCHBACK,
    Choice,
    Comparison,
    choose,
    differing_knobs,
)
from tuner_client.engine.pressure import memory_pressure_reason
from tuner_client.phases.final_duet import race_duet_run
from tuner_client.phases.final_per_transaction import RaceOutcome, race_per_transaction_run
from tuner_client.phases.final_switchback import race_switchback_run
from tuner_client.phases.state import RunContext, RunState


def comparison_of(ctx: RunContext, configs: Sequence[Mapping[str, str]], *,
                  search: bool = False) -> Comparison:
    """The :class:`Comparison` of ``configs`` (the first the reference) in this run
    (:func:`tuner_client.engine.comparison.comparison`, with the memory pressure of the
    candidates themselves outside a search)."""
    pressure = None if search else memory_pressure_reason(ctx.budget, ctx.measurer.in_force,
                                                          configs)
    return comparison(ctx.config, ctx.budget.catalog, differing_knobs(configs),
                      replicated=ctx.pool.replicated, search=search, memory_pressure=pressure)


def choose_for(ctx: RunContext, configs: Sequence[Mapping[str, str]], *, search: bool = False
               ) -> Choice:
    """The engine's design for ``configs`` in this run, from ``measure.design`` down."""
    return choose(comparison_of(ctx, configs, search=search), ctx.config.measure.design,
                  SEARCH_DESIGNS if search else PRECISION)


def race_in(design: str, ctx: RunContext, state: RunState,
            candidates: Mapping[str, dict[str, str]], labels: list[str]) -> RaceOutcome | None:
    """Race ``labels`` (the first the reference) in ``design`` (per transaction, switchback or
    duet); None, said why, when the run failed (the race then runs in windows)."""
    if design == PER_TRANSACTION:
        return race_per_transaction_run(ctx, state, candidates, labels)
    if design == SWITCHBACK:
        return race_switchback_run(ctx, state, candidates, labels)
    if design == DUET:
        return race_duet_run(ctx, state, candidates, labels)
    raise ValueError(f"race_in runs per-transaction, switchback or duet races, not {design!r}")
