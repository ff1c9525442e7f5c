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

from tuner_client.engine.designs import (
    PER_TRANSACTION,
    PRECISION,
    SWITCHBACK,
    SYSTEM_WIDE_KNOBS,
    WINDOWS,
    Choice,
    Comparison,
    choose,
    differing_knobs,
)
from tuner_client.engine.pressure import memory_pressure_reason
from tuner_client.phases.final_per_transaction import RaceOutcome, race_per_transaction_run
from tuner_client.phases.final_switchback import is_live, race_switchback_run
from tuner_client.phases.state import RunContext, RunState
from workloads.per_transaction.from_config import unsupported_reason

#: the designs a search session can run (a switchback search is not built)
SEARCH_DESIGNS = (PER_TRANSACTION, WINDOWS)


def comparison_of(ctx: RunContext, configs: Sequence[Mapping[str, str]], *,
                  search: bool = False) -> Comparison:
    """The :class:`Comparison` of ``configs`` (the first the reference) in this run.

    ``search``: a search session's comparison, whose knobs with a system-wide side are
    measured in window blocks beside the per-transaction runs
    (:mod:`tuner_client.phases.search_per_transaction`), so they do not count against it;
    an unpaired session or replicas on other hosts keep it in windows."""
    catalog = ctx.budget.catalog
    differing = [n for n in differing_knobs(configs)
                 if not (search and n in SYSTEM_WIDE_KNOBS)]
    contexts = {n: catalog[n].context if n in catalog else "unknown" for n in differing}
    driver = unsupported_reason(ctx.config.workload)
    replicas = "the race runs over several replicas" if ctx.pool.replicated else None
    if search:
        if not ctx.config.measure.paired:
            driver = driver or ("measure.paired is off (the session aggregates single window "
                                "samples)")
        if ctx.config.replicas.remote:
            replicas = "replicas on other hosts measure the same session in windows"
    pressure = None if search else memory_pressure_reason(ctx.budget, ctx.measurer.in_force,
                                                          configs)
    return Comparison(contexts=contexts, memory_pressure=pressure, driver=driver,
                      switch_driver=None if is_live(ctx) else driver, replicas=replicas)


def choose_for(ctx: RunContext, configs: Sequence[Mapping[str, str]], *, search: bool = False
               ) -> Choice:
    """The engine's design for ``configs`` in this run, from ``measure.design`` down."""
    return choose(comparison_of(ctx, configs, search=search), ctx.config.measure.design,
                  SEARCH_DESIGNS if search else PRECISION)


def race_in(design: str, ctx: RunContext, state: RunState,
            candidates: Mapping[str, dict[str, str]], labels: list[str]) -> RaceOutcome | None:
    """Race ``labels`` (the first the reference) in ``design`` (per transaction or
    switchback); None, said why, when the run failed (the race then runs in windows)."""
    if design == PER_TRANSACTION:
        return race_per_transaction_run(ctx, state, candidates, labels)
    if design == SWITCHBACK:
        return race_switchback_run(ctx, state, candidates, labels)
    raise ValueError(f"race_in runs per-transaction or switchback races, not {design!r}")
