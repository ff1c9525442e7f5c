"""The final race by switchback, where the engine chooses it
(:mod:`tuner_client.engine.designs`: a reload-time knob or one with a system-wide side
differs, or the traffic is live, and no restart-time knob differs): the whole server alternates
the original and the candidates in short slices (``measure.slice_s``) with ``ALTER SYSTEM`` +
reload, one slice per configuration per block in a random order (issue 27, item 3).

With a workload the tuner drives (TPC-H, pgbench, scripts), every transaction is timed and
attributed to the slice it started in, also when it runs past the switch (:func:`run_driven`;
the driver plans every statement under the slice's configuration: pgbench's ``-M
extended``, since a prepared statement keeps its plan across a reload). In live mode
the application's traffic is read from ``pg_stat_statements`` (or ``pg_stat_database``'s
commits) at each slice's settled start and end, and the race may stop after any block whose
intervals all exclude 1 (they are confidence sequences). The server's
``postgresql.auto.conf`` is put back as it was before the race, on failure too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import psycopg
from psycopg.rows import TupleRow

from harmony_base.errors import ConfigError, HarmonyError, WorkloadError
from tuner_client.engine.comparison import live_traffic
from tuner_client.engine.designs import SWITCHBACK
from tuner_client.engine.protocol import RaceRequest
from tuner_client.phases.decisions import Decision, Kind, drift_record, race_records
from tuner_client.phases.final_design import FinalDesign, FinalRun, shared_in_force
from tuner_client.phases.final_per_transaction import race_seconds
from tuner_client.phases.state import RunContext
from tuner_client.stats.per_transaction import estimand_of
from tuner_client.stats.switchback import (
    SliceSpan,
    SwitchbackRace,
    balanced_order,
    race,
    totals_from_deltas,
    totals_from_transactions,
)
from tuner_client.switchback import (
    ALL_BLOCKS,
    TRIPPED,
    ConfigurationSwitch,
    SliceRun,
    counters_reader,
    run_driven,
    run_slices,
    settle_margin,
)
from workloads.connect import connect
from workloads.observe import ObservedWindow
from workloads.per_transaction.from_config import make_assignment

logger = logging.getLogger(__name__)

#: what a switchback's interval holds for when its reference drifted (issue 51, item 5)
HOLDS = ("each block compares slices a few seconds apart, so a drift slower than a block "
         "cancels in each pair: the interval holds for the average of the states the race "
         "saw, not for the reference's level at its start or at its end")

#: fewest blocks a switchback race runs (the 95 % confidence sequence is unbounded below 4)
MIN_BLOCKS = 4


class Switchback(FinalDesign, name=SWITCHBACK):
    """Race the request's labels (the first the reference) by switchback for
    ``final.max_seconds`` (default and bounds as per transaction); None, said why, when the
    run failed."""

    def race(self, run: FinalRun, request: RaceRequest) -> SwitchbackRace | None:
        ctx, labels = run.ctx, list(request.labels)
        configs = request.settings()
        slice_s = ctx.config.measure.slice_s
        seconds = race_seconds(ctx)
        blocks = max(MIN_BLOCKS, int(seconds // (len(labels) * slice_s)))
        logger.info("=== final race by switchback: %s, %d blocks of %g-s slices ===",
                    " vs ".join(labels), blocks, slice_s)
        try:
            # the switches then write only the differences
            differing = shared_in_force(ctx, configs)
            switched = [{n: c[n] for n in differing if n in c} for c in configs]
            with connect(ctx.target.dsn) as conn:
                outcome = (
                    live_race(ctx, conn, switched, labels, blocks, request.level)
                    if live_traffic(ctx.config)
                    else driven_race(ctx, conn, switched, labels, blocks, request.level))
        except HarmonyError as exc:
            run.state.decide(Decision.of("final", Kind.FAILED, design=self.name,
                                         stage=request.stage, reason=str(exc),
                                         text="measured in windows"))
            return None
        for record in race_records(outcome.to_final_decision(), stage=request.stage,
                                   counts=outcome.counts):
            run.state.decide(record)
        if outcome.drift is not None:
            run.state.decide(drift_record(outcome.drift, reference=labels[0], design=self.name,
                                          stage=request.stage, holds=HOLDS))
        return outcome


def driven_race(ctx: RunContext, conn: psycopg.Connection[TupleRow],
                configs: list[dict[str, str]], labels: list[str], blocks: int, level: float,
                *, seed: int | None = None) -> SwitchbackRace:
    """The tuner's own workload beside the switching, every transaction timed (``seed``:
    the driver's and the slices' order's, default ``seed`` of the config)."""
    cfg = ctx.config
    seed = cfg.seed if seed is None else seed
    # planned at every execution: a prepared statement's plan would not follow a reload
    driver = make_assignment(cfg.workload, ctx.target.dsn, [{}], seed=seed,
                             query_mode="extended")
    run = run_driven(conn, ctx.budget.catalog, configs, driver, blocks=blocks,
                     slice_s=cfg.measure.slice_s, seed=seed)
    trace = run.trace
    settle_s = settle_margin(cfg.measure.slice_s)
    totals = totals_from_transactions(list(run.spans), trace.template,
                                      trace.origin + trace.start, trace.latency, trace.ok,
                                      settle_s=settle_s)
    # every planned block runs (no early stop): the end's interval (stats/horizon)
    return race(totals, labels, slice_s=cfg.measure.slice_s, settle_s=settle_s,
                level=level, estimand=estimand_of(trace), ended=True)


def live_race(ctx: RunContext, conn: psycopg.Connection[TupleRow],
              configs: list[dict[str, str]], labels: list[str], blocks: int, level: float,
              *, seed: int | None = None,
              harmed: Callable[[SwitchbackRace], bool] | None = None,
              judge: Callable[[SliceSpan, ObservedWindow], bool] | None = None
              ) -> SwitchbackRace:
    """The application's traffic, read from counters at each slice's edges; stops after the
    first block at which every candidate's interval excludes 1, or at which ``harmed`` (from
    the second block on) says a candidate hurts the application (``seed``: the slices'
    order's, default ``seed`` of the config). ``judge`` (live mode's guardrails) sees every
    slice's settled window and may stop the run at once: :class:`WorkloadError` is raised
    then, once the configuration is back (the judge knows what tripped)."""
    cfg = ctx.config
    seed = cfg.seed if seed is None else seed
    read, source, settle_s = counters_reader(conn)
    settle_s = settle_margin(cfg.measure.slice_s, settle_s)

    def analyse(run: SliceRun, ended: bool = False) -> SwitchbackRace:
        return race(totals_from_deltas(run.spans, run.deltas), labels,
                    slice_s=cfg.measure.slice_s, settle_s=settle_s, level=level,
                    source=source, ended=ended)

    def decided(run: SliceRun) -> bool:
        blocks = len({s.block for s in run.spans})
        if harmed is not None and blocks >= 2:
            try:
                if harmed(analyse(run)):
                    return True
            except ConfigError:  # a candidate without observations in 2 blocks yet
                pass
        if blocks < MIN_BLOCKS:
            return False
        return all(r.interval.excludes_one for r in analyse(run).comparisons.values())

    with ConfigurationSwitch(conn, ctx.budget.catalog, configs) as switch:
        run = run_slices(switch, balanced_order(len(configs), blocks, seed),
                         cfg.measure.slice_s, settle_s=settle_s, counters=read,
                         after_block=decided, judge=judge)
    logger.info("switchback: %s after %d slices", run.stopped, len(run.spans))
    if run.stopped == TRIPPED:
        last = run.spans[-1]
        raise WorkloadError(f"the switchback run stopped: a guardrail tripped in the slice "
                            f"of {labels[last.config]} (block {last.block + 1})")
    # every planned block ran (not stopped by the intervals, the guardrail or the caller):
    # the end's interval (stats/horizon)
    return analyse(run, ended=run.stopped == ALL_BLOCKS)
