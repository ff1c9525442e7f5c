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
import time
from collections.abc import Callable, Sequence

import psycopg
from psycopg.rows import TupleRow

from harmony_base.errors import ConfigError, HarmonyError, WorkloadError
from tuner_client.engine.comparison import live_traffic
from tuner_client.engine.designs import SWITCHBACK
from tuner_client.engine.protocol import RaceRequest
from tuner_client.phases.decisions import Decision, Kind, drift_record, race_records
from tuner_client.phases.final_design import FinalDesign, FinalRun, shared_in_force
from tuner_client.phases.final_per_transaction import race_seconds
from tuner_client.phases.slice_watch import SliceWatch
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
        seconds = race_seconds(ctx)
        logger.info("=== final race by switchback: %s, %g-s slices for about %d s ===",
                    " vs ".join(labels), ctx.config.measure.slice_s, seconds)
        try:
            # the switches then write only the differences
            differing = shared_in_force(ctx, configs)
            switched = [{n: c[n] for n in differing if n in c} for c in configs]
            with connect(ctx.target.dsn) as conn:
                if not live_traffic(ctx.config):
                    outcome: SwitchbackRace | None = driven_race(
                        ctx, conn, switched, labels, _blocks(ctx, labels, seconds),
                        request.level)
                else:
                    outcome = self._live(run, request, conn, switched, seconds)
        except HarmonyError as exc:
            run.state.decide(Decision.of("final", Kind.FAILED, design=self.name,
                                         stage=request.stage, reason=str(exc),
                                         text="measured in windows"))
            return None
        if outcome is None:
            return None
        for record in race_records(outcome.to_final_decision(), stage=request.stage,
                                   counts=outcome.counts):
            run.state.decide(record)
        if outcome.drift is not None:
            run.state.decide(drift_record(outcome.drift, reference=labels[0], design=self.name,
                                          stage=request.stage, holds=HOLDS))
        return outcome

    def _live(self, run: FinalRun, request: RaceRequest, conn: psycopg.Connection[TupleRow],
              configs: list[dict[str, str]], seconds: float) -> SwitchbackRace | None:
        """The race on live traffic, watched slice by slice (:mod:`slice_watch`): a candidate
        that trips a guardrail in its slice, or reads below the harm line after a block, is
        dropped, said why, and the race runs again without it for the time left (at least
        :data:`MIN_BLOCKS` blocks); None when every candidate was dropped (the original
        stays, and no later design races them)."""
        ctx, labels = run.ctx, list(request.labels)
        deadline = time.monotonic() + seconds
        while True:
            watch = SliceWatch.of(ctx.measurer.trips, ctx.config, labels, configs)
            left_s = max(0.0, deadline - time.monotonic())
            outcome: SwitchbackRace | None = None
            try:
                outcome = live_race(ctx, conn, configs, labels, _blocks(ctx, labels, left_s),
                                    request.level, harmed=watch.harmed, judge=watch.judge)
            except WorkloadError:
                if not watch.trips:
                    raise
            if not watch.stopped():
                return outcome
            self._drop(run, request, watch, outcome)
            keep = watch.left()
            labels, configs = [labels[k] for k in keep], [configs[k] for k in keep]
            if len(labels) < 2:
                run.state.decide(Decision.of(
                    "final", Kind.SKIPPED, step="final race", design=self.name,
                    stage=request.stage,
                    reason="not raced further: every candidate was dropped as harmful to "
                           "the live traffic; the original configuration stays"))
                return None

    def _drop(self, run: FinalRun, request: RaceRequest, watch: SliceWatch,
              outcome: SwitchbackRace | None) -> None:
        """The decisions for what ``watch`` saw trip or harm; each such label is recorded as
        dropped on ``run``."""
        for label in watch.trips:
            trip, span = watch.record(label)
            run.state.decide(Decision.of(
                "final", Kind.DROPPED, design=self.name, stage=request.stage,
                labels=(label,), rounds=span.block + 1,
                reason=f"{trip.kind} guardrail tripped in its slice of the final race "
                       f"({trip.reason}; {trip.detected_after_s or 0.0:.1f} s after its "
                       f"switch, reverted in {trip.revert_s:.2f} s); the trip is the slice's "
                       f"configuration's (its settled window judged)"))
            run.dropped.add(label)
        for label, ratio in watch.harmful.items():
            if label in watch.trips:
                continue  # its trip is the reason already said
            blocks = outcome.plain[label].blocks if outcome is not None else 0
            run.state.decide(Decision.of(
                "final", Kind.DROPPED, design=self.name, stage=request.stage,
                labels=(label,), rounds=blocks,
                reason=f"{ratio:.2f}× the original by switchback, below {watch.line:.2f} "
                       f"(1 / (1 + workload.observe.guard.latency_margin)): harmful to the "
                       f"live traffic"))
            run.dropped.add(label)


def _blocks(ctx: RunContext, labels: Sequence[str], seconds: float) -> int:
    """The blocks of one slice per label that fit in ``seconds`` (at least
    :data:`MIN_BLOCKS`)."""
    return max(MIN_BLOCKS, int(seconds // (len(labels) * ctx.config.measure.slice_s)))


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
