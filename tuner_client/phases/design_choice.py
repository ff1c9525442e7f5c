"""Which design measures a run's comparison, and the final race's design put together: the
run's side of the measurement engine (:mod:`tuner_client.engine.designs` holds the rules as
data, :mod:`tuner_client.engine.protocol` the interface every design implements).

:func:`comparison_of` reads what the rules depend on from the run (the differing knobs'
contexts, the workload's driver, the replicas, live traffic, the memory budget);
:func:`choose_for` takes the engine's choice; :func:`final_design` turns the choice for a
final race into the design that runs it (the chosen one with the universal design as its
fallback, or a split or a narrowing when the universal design was chosen but a part of the
race can be measured more precisely). The search
(:mod:`tuner_client.phases.search_per_transaction`), the screening and the final race all
choose here, so one comparison is never measured in a design another phase would refuse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tuner_client.engine.comparison import SEARCH_DESIGNS, comparison
from tuner_client.engine.designs import (
    PRECISION,
    UNIVERSAL,
    Choice,
    Comparison,
    choose,
    differing_knobs,
)
from tuner_client.engine.pressure import memory_pressure_reason
from tuner_client.engine.protocol import RaceOutcome, RaceRequest, design_named

# the final designs register themselves on import
from tuner_client.phases.final_design import Fallback, FinalDesign, FinalRun
from tuner_client.phases.final_duet import Duet
from tuner_client.phases.final_narrow import Narrowing
from tuner_client.phases.final_per_transaction import PerTransaction
from tuner_client.phases.final_split import Split, split_choice
from tuner_client.phases.final_switchback import Switchback
from tuner_client.phases.final_windows import Windows
from tuner_client.phases.state import RunContext, RunState

#: the final designs this module puts together (imported so that they register)
FINAL_DESIGNS = (PerTransaction, Switchback, Duet, Windows, Split, Narrowing, Fallback)


def comparison_of(ctx: RunContext, configs: Sequence[Mapping[str, str]], *,
                  search: bool = False) -> Comparison:
    """The :class:`Comparison` of ``configs`` (the first the reference) in this run
    (:func:`tuner_client.engine.comparison.comparison`, with the memory pressure of the
    candidates themselves outside a search)."""
    pressure = None if search else memory_pressure_reason(ctx.budget, ctx.measurer.in_force,
                                                          configs)
    return comparison(ctx.config, ctx.budget.catalog, differing_knobs(configs),
                      replicated=ctx.pool.replicated, search=search, memory_pressure=pressure)


def choose_for(ctx: RunContext, configs: Sequence[Mapping[str, str]], *, search: bool = False,
               designs: tuple[str, ...] | None = None) -> Choice:
    """The engine's design for ``configs`` in this run, from ``measure.design`` down, among
    ``designs`` (None: a search's, or every one)."""
    return choose(comparison_of(ctx, configs, search=search), ctx.config.measure.design,
                  designs or (SEARCH_DESIGNS if search else PRECISION))


def final_design_of(name: str) -> FinalDesign:
    """The final design registered as ``name``."""
    design = design_named(name)()
    if not isinstance(design, FinalDesign):
        raise TypeError(f"the design {name!r} is not a final race's design")
    return design


def final_design(ctx: RunContext, request: RaceRequest, choice: Choice, *,
                 fallback: bool = True) -> FinalDesign:
    """The design that runs the final race of ``request``, whose engine choice is
    ``choice``: a precise design falls back on the universal one when its run fails (unless
    ``fallback`` is off: managed mode, where nothing server-wide may change). A design that
    carries a restart-time difference (a duet, the universal one) races alone unless the race
    splits (a restart-time knob apart, :func:`~tuner_client.phases.final_split.split_choice`:
    the session parts first in a more precise design, then the restart part in this one), or,
    for the universal one, narrows (a per-transaction run among the searched candidates that
    share the best's fixed knobs first)."""
    universal = final_design_of(UNIVERSAL)
    chosen = universal if choice.universal else final_design_of(choice.design)
    if not choice.universal and fallback:
        chosen = Fallback(chosen, universal)
    if not choice.carries_restart:
        return chosen
    split = split_choice(ctx, lambda configs: choose_for(ctx, configs), request)
    if split is not None:
        how = "in whole-server windows" if choice.universal else \
            f"by {choice.design} (in whole-server windows if it cannot run)"
        return Split(final_design_of(split.design), chosen, split, how)
    best = request.searched[0] if request.searched else None
    if choice.universal and best is not None and choice.passed_over \
            and choose_for(ctx, [request.configurations[best]] * 2).per_transaction:
        # a knob SET LOCAL cannot carry differs: one per-transaction run among the searched
        # candidates that share the best's, then the universal design's race of the one chosen
        return Narrowing(universal, choice.passed_over[0][1])
    return chosen


def race_in(design: str, ctx: RunContext, state: RunState,
            candidates: Mapping[str, dict[str, str]], labels: list[str]) -> RaceOutcome | None:
    """Race ``labels`` (the first the reference) in the design registered as ``design`` at
    ``final.level``; None, said why, when the run failed."""
    request = RaceRequest(candidates, tuple(labels), ctx.config.final.level)
    return final_design_of(design).race(FinalRun(ctx, state), request)
