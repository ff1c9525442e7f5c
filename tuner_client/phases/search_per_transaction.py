"""A search session's evaluations measured per transaction (where the engine chooses it,
issues 27 and 45): the candidates the strategy asks for at once (a simplex's
vertices, a shrink) and the session's reference share one run, each transaction drawing one
of them at random and running under ``SET LOCAL``
(:class:`workloads.per_transaction.StreamAssignment` and the pgbench variants).

Each candidate's value for the strategy is its work-weighted speedup over the reference in
that run (:func:`tuner_client.stats.per_transaction.compare`, with its 95 % interval) times the
reference's level, measured once in a whole-server window when the session starts: values then
keep the unit and scale of the window-measured sessions (the offline search, the final
candidates' ranking), while every comparison is paired transaction by transaction.

A run lasts at most ``measure.per_transaction_s`` × (k + 1)/2 for k candidates, and ends
sooner once every candidate is ranked (:func:`~tuner_client.phases.search_stops.ranked`):
each 80 % interval (the evaluation's own, at the end, is 95 %) within ±3 % or within a quarter
of its own effect, looked at every 2 s from 8 s on (8 slices of 1 s). The search only
ranks, and a big effect needs less precision to rank than a small one: the demo's 10-s runs
reached ±2–3 % on 1.2–1.3× effects. A candidate whose interval lies below 1.05 is settled too:
it cannot be a gain worth taking, and on the one-pass mix, where no online knob moved
throughput, runs reached only ±4–5 % in 30 s. Looking before the end makes these intervals
nominal; only the final race claims, with its own anytime-valid intervals.

Only where the engine chooses it (:func:`tuner_client.phases.search_design.search_choice`, by
:mod:`tuner_client.engine.designs`): every knob the session searches is session-settable, the
workload has a per-transaction driver, and the run measures one database; otherwise the
session runs in windows (:func:`~tuner_client.phases.session_loop.run_session`) and the
decisions say why.

Knobs with a system-wide side (parallel query, :data:`SYSTEM_WIDE_KNOBS`) are not compared per
transaction: max_parallel_workers_per_gather 2→0 read 0.77× per transaction and 1.22× in
whole-server windows, and in the demo the point that won 1.26× (1.06–1.50) in the windows
design read 0.86× per transaction and was never kept. A batch is split by the candidates'
values of those knobs: every arm of a group's run carries the group's values (so the whole
server runs them), the reference arm differs from the reference only there, and the
group's ratio to the reference is the per-transaction ratio times that of the reference
with the group's values over the reference itself, measured once per value in a paired
whole-server block (:func:`tuner_client.phases.blocks.measure_block`).

The two factors share one objective, the workload's count: the block counts queries
(``progress`` for TPC-H), and the per-transaction part counts them too since issue 45
(:mod:`tuner_client.stats.estimand`: a TPC-H stream loops its query, so the ratio weighs the
templates by completions). Before, the per-transaction part was work-weighted: on the demo's
mix parallel workers 2 → 0 read 1.305× (1.269–1.341) by count and 1.112× (1.090–1.135)
work-weighted in the same windows (``benchmarks/results/estimands.s13.md``), and measuring
the block work-weighted too (session 13, reverted) read 0.955× (0.885–1.031) for the same
value in the demo, which then kept the original.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

from harmony_base.errors import HarmonyError
from tuner_client.api.client import Fetched, Session
from tuner_client.config import KnobSpace
from tuner_client.engine.designs import PER_TRANSACTION, SYSTEM_WIDE_KNOBS
from tuner_client.measurer import PointRecord
from tuner_client.phases.blocks import (
    Reference,
    SessionReferences,
    measure_block,
    measure_reference,
)
from tuner_client.phases.decisions import Decision
from tuner_client.phases.search_stops import (
    RANK_LEVEL,
    SETTLED_HALF_WIDTH,
    SETTLED_NO_GAIN,
    SETTLED_SHARE_OF_EFFECT,
    Stall,
    ranked,
)
from tuner_client.phases.session_loop import FETCH_WAIT_S, IDLE_FETCHES
from tuner_client.phases.state import RunContext, RunState, record_point
from tuner_client.stats.estimand import COUNTS, DRAWS
from tuner_client.stats.per_transaction import FIRST_LOOK_S, PerTransactionComparison, rank_compare
from workloads.per_transaction.from_config import make_assignment
from workloads.per_transaction.trace import Trace

logger = logging.getLogger(__name__)

#: most candidates measured in one run beside the reference (a 6-knob simplex's first batch
#: has 7 vertices; more arms thin every comparison's share of the transactions)
MAX_BATCH = 6
#: the interval level of each evaluation (the search ranks; only the final race claims)
LEVEL = 0.95
#: a candidate's values of the searched knobs with a system-wide side, (name, value) pairs
WideKey = tuple[tuple[str, str], ...]


def run_seconds(base_s: float, candidates: int) -> float:
    """How long a run of ``candidates`` beside the reference lasts: ``base_s`` for one, and
    (k + 1) / 2 times that for k, so each arm keeps the transactions of a one-candidate run."""
    return base_s * (candidates + 1) / 2.0


@dataclass
class _Evaluation:
    """One fetched trial of the batch and its settings."""

    got: Fetched
    settings: dict[str, str]
    record: PointRecord


class PerTransactionEvaluations:
    """Measures batches of a session's candidates beside ``reference`` per transaction."""

    def __init__(self, ctx: RunContext, state: RunState, label: str, space: KnobSpace,
                 reference: Reference) -> None:
        self.ctx, self.state, self.label, self.space = ctx, state, label, space
        self.reference = reference
        self.runs = 0
        self.transactions = 0
        #: what the runs' ratios count (the workload's client model)
        self.counts = COUNTS[DRAWS]
        #: the runs' seconds, and what they would have lasted had none settled early
        self.seconds = 0.0
        self.most_seconds = 0
        #: the searched knobs with a system-wide side, measured in windows
        self.wide = [n for n in space.names if n in SYSTEM_WIDE_KNOBS]
        #: per value of those knobs: the reference with it over the reference, in windows
        self.wide_factors: dict[WideKey, float | None] = {}

    def level(self) -> float | None:
        """The reference's window level (measured once, when the session first needs it)."""
        if self.reference.level.level is None:
            value = measure_reference(self.ctx.measurer, self.ctx.metrics, self.reference)
            self.reference.level.add(value)
        return self.reference.level.level

    def measure(self, batch: list[_Evaluation]) -> None:
        """Run the feasible candidates of ``batch`` beside the reference; fill each record
        (its value, ratio, interval and design, or its failure)."""
        ctx = self.ctx
        runnable = []
        for ev in batch:
            wanted = {**ctx.measurer.in_force, **ev.settings}
            reason = ctx.budget.violation(wanted, ev.settings)
            if reason is not None:
                ev.record.failure = f"infeasible: {reason}"
            else:
                runnable.append(ev)
        if not runnable:
            return
        level = self.level()
        if level is None:
            for ev in runnable:
                ev.record.failure = "the reference could not be measured in a window"
            return
        groups: dict[WideKey, list[_Evaluation]] = {}
        for ev in runnable:
            groups.setdefault(self._wide_key(ev.settings), []).append(ev)
        for key, group in groups.items():
            self._measure_group(key, group, level)

    def _wide_key(self, settings: dict[str, str]) -> WideKey:
        """``settings``' values of the system-wide knobs."""
        return tuple((n, settings[n]) for n in self.wide)

    def _measure_group(self, key: WideKey, group: list[_Evaluation],
                       level: float) -> None:
        """One run of ``group`` (candidates sharing the system-wide values ``key``) beside the
        reference with those values; each ratio scaled by that reference's window factor."""
        factor = self._wide_factor(key)
        if factor is None:
            for ev in group:
                ev.record.failure = (f"{dict(key)} could not be measured in a whole-server "
                                     f"window beside the reference")
            return
        try:
            trace = self._run([ev.settings for ev in group], dict(key))
        except HarmonyError as exc:
            for ev in group:
                ev.record.failure = f"per-transaction run failed: {exc}"
            return
        for k, ev in enumerate(group, 1):
            try:
                result = rank_compare(trace, 0, k, level=LEVEL,
                                      seed=self.ctx.config.seed + self.runs)
                self.counts = COUNTS[result.estimand]
            except HarmonyError as exc:
                ev.record.failure = f"per-transaction comparison failed: {exc}"
                continue
            self._fill(ev.record, result, level, factor, dict(key))

    def _wide_factor(self, key: WideKey) -> float | None:
        """The reference with the system-wide values ``key`` over the reference itself: 1
        where they are the reference's, else one paired whole-server block (measured once per
        value; None when it failed)."""
        wide = dict(key)
        if all(self.reference.settings.get(n) == v for n, v in wide.items()):
            return 1.0
        if key not in self.wide_factors:
            ctx = self.ctx
            settings = {**{n: self.reference.settings[n] for n in self.space.names}, **wide}
            self.reference.last = None  # the block opens with a fresh reference window
            record = measure_block(ctx.measurer, ctx.metrics, self.reference,
                                   f"{self.label}-system-wide", {}, settings)
            self.reference.last = None
            ctx.metrics.record_point(record, kind="reference", restarts=False)
            factor = record.ratio if record.failure is None else None
            self.wide_factors[key] = factor
            self.state.decide(
                f"{self.label}: {wide} has a system-wide side per-transaction latency does not "
                f"see; measured in whole-server windows beside the reference: "
                + (f"{factor:.3f}× (one paired block of {len(record.samples)} sample(s) "
                   f"between two reference windows)" if factor is not None
                   else f"failed ({record.failure})"))
        return self.wide_factors[key]

    def _run(self, candidates: list[dict[str, str]], wide: dict[str, str]) -> Trace:
        """One run of the reference (configuration 0) with the system-wide values ``wide``
        and ``candidates`` (which share them)."""
        ctx = self.ctx
        ctx.measurer.stop()  # the windows' workload must not run beside this one
        names = self.space.names
        configurations = [{**{n: self.reference.settings[n] for n in names}, **wide},
                          *({n: c[n] for n in names} for c in candidates)]
        assignment = make_assignment(ctx.config.workload, ctx.target.dsn, configurations,
                                     seed=ctx.config.seed + 1000 * self.runs)
        seconds = max(1, round(run_seconds(ctx.config.measure.per_transaction_s,
                                           len(candidates))))
        logger.info("[%s] per-transaction run %d: the reference and %d candidate(s) for up to "
                    "%d s", self.label, self.runs + 1, len(candidates), seconds)
        trace = assignment.run(seconds, settled=lambda t: ranked(t, ctx.config.seed),
                               min_s=FIRST_LOOK_S)
        self.runs += 1
        self.transactions += len(trace)
        self.seconds += trace.seconds
        self.most_seconds += seconds
        return trace

    def _fill(self, record: PointRecord, result: PerTransactionComparison, level: float,
              factor: float, wide: dict[str, str]) -> None:
        """``record``'s ratio: the per-transaction one times the window ``factor`` of its
        system-wide values ``wide`` (1 where they are the reference's)."""
        interval = result.interval
        record.design = PER_TRANSACTION
        record.ratio = factor * interval.ratio
        record.interval = (factor * interval.low, factor * interval.high)
        record.transactions = result.transactions
        record.reference = [level]
        record.value = record.ratio * level
        scaled = "" if factor == 1.0 else (
            f", times {factor:.3f}× for {wide} in windows → {record.ratio:.3f}× (the interval "
            f"is the per-transaction part's)")
        self.state.decide(Decision.note(
            f"{self.label}: {record.settings}: {result.text()} over the "
            f"reference{' with ' + str(wide) if scaled else ''}{scaled}",
            design=PER_TRANSACTION, settings={"candidate": dict(record.settings)},
            ratio=record.ratio, low=record.interval[0], high=record.interval[1],
            level=interval.level, counts=result.estimand, rounds=result.slices))

    def summary(self) -> str:
        """The session's design in one decision line."""
        wide = sorted(n for n in self.space.names if n in SYSTEM_WIDE_KNOBS)
        text = (f"{self.label}: evaluations measured {PER_TRANSACTION}: {self.runs} run(s), "
                f"{self.transactions:,} transactions in {self.seconds:.0f} s (at most "
                f"{self.most_seconds} s: a run ends once every candidate's {100 * RANK_LEVEL:.0f} "
                f"% interval is within ±{100 * SETTLED_HALF_WIDTH:g} %, within "
                f"{100 * SETTLED_SHARE_OF_EFFECT:g} % of its effect or below "
                f"{SETTLED_NO_GAIN:g}×), each candidate beside the reference "
                f"{self.reference.settings} (the ratio counts {self.counts}; block "
                f"bootstrap over time slices, {100 * LEVEL:.0f} %; the search only ranks, so "
                f"these intervals are not claims: looking before the end makes them nominal)")
        if wide:
            text += (f"; {', '.join(wide)} has a system-wide side per-transaction latency does "
                     f"not see: each of its values was measured once in whole-server windows "
                     f"beside the reference ({len(self.wide_factors)} block(s)) and a run's "
                     f"arms all carried it")
        return text


def run_per_transaction_session(ctx: RunContext, state: RunState, session: Session,
                                space: KnobSpace, evaluations: int, label: str,
                                after_eval: Callable[[PointRecord], bool] | None = None,
                                references: SessionReferences | None = None,
                                seconds: float | None = None) -> str:
    """Measure ``session`` per transaction until it converges, the evaluations or
    ``seconds`` are spent, ``after_eval`` returns True, or it stays idle; returns why it
    stopped (as :func:`tuner_client.phases.session_loop.run_session`). Every fetch that finds
    several trials ready measures them in one run (up to :data:`MAX_BATCH`)."""
    reference = references.primary_reference if references is not None \
        else Reference(label, ctx.current(space.names))
    evals = PerTransactionEvaluations(ctx, state, label, space, reference)

    def keep(record: PointRecord) -> None:
        record_point(ctx, state, record, reference=reference.settings)
    stall = Stall(len(space.names))
    deadline = None if seconds is None else time.monotonic() + seconds
    claimed, idle = 0, 0
    try:
        while True:
            if claimed >= evaluations:
                return "budget"
            if deadline is not None and time.monotonic() >= deadline:
                return "time"
            batch = _fetch_batch(session, space, label, min(MAX_BATCH, evaluations - claimed))
            if not batch:
                status = session.status()
                if status.get("converged") and not status.get("paused"):
                    return "converged"
                idle += 1
                if status.get("paused") or idle >= IDLE_FETCHES:
                    return "paused" if status.get("paused") else "idle"
                continue
            idle, claimed = 0, claimed + len(batch)
            if _measure_and_report(session, evals, batch, after_eval, keep):
                return "stopped"
            for ev in batch:
                stall.add(ev.record)
            if stall.stalled:
                state.decide(f"{label}: {stall.text()}")
                return "stalled"
    finally:
        if evals.runs:
            state.decide(evals.summary())


def _fetch_batch(session: Session, space: KnobSpace, label: str, most: int
                 ) -> list[_Evaluation]:
    """The trials ready now (waiting for the first), at most ``most``."""
    batch: list[_Evaluation] = []
    got = session.fetch(timeout=FETCH_WAIT_S)
    while got is not None:
        settings = space.settings(got.point)
        batch.append(_Evaluation(got, settings, PointRecord(session=label, point=dict(got.point),
                                                            settings=settings)))
        got = session.fetch(timeout=0.0) if len(batch) < most else None
    return batch


def _measure_and_report(session: Session, evals: PerTransactionEvaluations,
                        batch: list[_Evaluation],
                        after_eval: Callable[[PointRecord], bool] | None,
                        keep: Callable[[PointRecord], None]) -> bool:
    """Measure ``batch`` holding its leases, report every trial, keep every record (``keep``);
    True when ``after_eval`` asks to stop."""
    ctx = evals.ctx
    every = max(1.0, ctx.pool.session_lease_s / 4)
    with ExitStack() as leases:
        for ev in batch:
            leases.enter_context(session.keep_lease(ev.got.trial_id, every=every))
        evals.measure(batch)
    stop = False
    for ev in batch:
        record = ev.record
        record.in_force = {**ctx.measurer.in_force, **ev.settings}
        if record.value is None:
            session.report_failure(ev.got.trial_id, record.failure or "not measured")
            logger.info("[%s] trial %d %s: failed: %s", evals.label, ev.got.trial_id,
                        ev.settings, record.failure)
        else:
            session.report(ev.got.trial_id, record.value)
            logger.info("[%s] trial %d %s: %.3f× its reference (per transaction) → %.4g %s",
                        evals.label, ev.got.trial_id, ev.settings, record.ratio or 0.0,
                        record.value, ctx.unit)
        keep(record)
        if record.value is not None and after_eval is not None and after_eval(record):
            stop = True
    return stop
