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
session runs by switchback where that is valid
(:func:`~tuner_client.phases.search_switchback.run_switchback_session`), else in windows
(:func:`~tuner_client.phases.session_loop.run_session`), and the decisions say why. The
loop, its stops and the reporting are :mod:`tuner_client.phases.search_batches`'.

Knobs with a system-wide side (parallel query, :data:`SYSTEM_WIDE_KNOBS`) are not compared per
transaction: max_parallel_workers_per_gather 2→0 read 0.77× per transaction and 1.22× in
whole-server windows, and in the demo the point that won 1.26× (1.06–1.50) in the windows
design read 0.86× per transaction and was never kept. A batch's candidates whose values of
those knobs differ from the reference's are measured whole by switchback beside it (one run,
:func:`tuner_client.phases.search_switchback.switchback_race`: slices of ``measure.slice_s``,
blocks in a balanced random order, ALTER SYSTEM + reload; Student t over blocks), the others
per transaction. Until session 34 such a candidate was measured per transaction with every arm
carrying its system-wide values, times a switchback factor of the reference with those values
over the reference. That product misread such candidates, likely through the plans their
other knobs chose: with workers allowed, a parallel plan's latency per transaction is lower,
while the CPU its workers take from the other sessions falls on every arm of a
per-transaction run alike. Three capture runs ranked such a candidate first at 1.24–1.42× (parallel
workers 1–2, work_mem 9–27MB), and the final race's switchback read it at 0.99×, 0.99× and
1.19× (``benchmarks/results/capture.s34.md``). Measured whole, the candidate's ratio counts
what the server does, at the switchback's precision.

Both designs count one objective, the workload's count: the switchback's driver counts
queries (``progress`` for TPC-H), and the per-transaction part counts them too since issue 45
(:mod:`tuner_client.stats.estimand`: a TPC-H stream loops its query, so the ratio weighs the
templates by completions). Before, the per-transaction part was work-weighted: on the demo's
mix parallel workers 2 → 0 read 1.305× (1.269–1.341) by count and 1.112× (1.090–1.135)
work-weighted in the same windows (``benchmarks/results/estimands.s13.md``), and measuring
the window block work-weighted too (session 13, reverted) read 0.955× (0.885–1.031) for the
same value in the demo, which then kept the original.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import ClassVar

from harmony_base.errors import HarmonyError
from tuner_client.engine.designs import PER_TRANSACTION, SYSTEM_WIDE_KNOBS
from tuner_client.measurer import PointRecord
from tuner_client.phases.decisions import Decision
from tuner_client.phases.search_batches import (
    LEVEL,
    MAX_BATCH,
    Evaluation,
    SessionEvaluations,
    run_seconds,
)
from tuner_client.phases.search_stops import (
    RANK_LEVEL,
    SETTLED_HALF_WIDTH,
    SETTLED_NO_GAIN,
    SETTLED_SHARE_OF_EFFECT,
    ranked,
)
from tuner_client.phases.search_switchback import fill_by_switchback, switchback_race
from tuner_client.stats.estimand import COUNTS, DRAWS
from tuner_client.stats.per_transaction import FIRST_LOOK_S, PerTransactionComparison, rank_compare
from workloads.per_transaction.from_config import make_assignment
from workloads.per_transaction.trace import Trace

logger = logging.getLogger(__name__)

__all__ = ["LEVEL", "MAX_BATCH", "PerTransactionEvaluations", "run_per_transaction_session",
           "run_seconds"]

#: a candidate's values of the searched knobs with a system-wide side, (name, value) pairs
WideKey = tuple[tuple[str, str], ...]


@dataclass(eq=False)
class PerTransactionEvaluations(SessionEvaluations):
    """Measures batches of a session's candidates beside ``reference`` per transaction."""

    design: ClassVar[str] = PER_TRANSACTION

    transactions: int = 0
    #: what the runs' ratios count (the workload's client model)
    counts: str = COUNTS[DRAWS]
    #: what the runs would have lasted had none settled early (s)
    most_seconds: int = 0
    #: the candidates whose system-wide values differ from the reference's, measured whole
    #: by switchback, and the switchback runs that measured them
    wide_measured: int = 0
    wide_runs: int = 0

    @property
    def wide(self) -> list[str]:
        """The searched knobs with a system-wide side, measured by switchback."""
        return [n for n in self.space.names if n in SYSTEM_WIDE_KNOBS]

    def measure_feasible(self, runnable: list[Evaluation], level: float) -> None:
        """Run ``runnable`` beside the reference: those with the reference's values of the
        system-wide knobs per transaction, the others whole by switchback (one run each)."""
        same: list[Evaluation] = []
        other: list[Evaluation] = []
        for ev in runnable:
            (same if self._is_reference(self._wide_key(ev.settings)) else other).append(ev)
        if other:
            self._measure_whole(other, level)
        if same:
            self._measure_group(same, level)

    def _wide_key(self, settings: dict[str, str]) -> WideKey:
        """``settings``' values of the system-wide knobs."""
        return tuple((n, settings[n]) for n in self.wide)

    def _is_reference(self, key: WideKey) -> bool:
        return all(self.reference.settings.get(n) == v for n, v in key)

    def _measure_group(self, group: list[Evaluation], level: float) -> None:
        """One run of ``group`` (candidates with the reference's system-wide values) beside
        the reference, per transaction."""
        try:
            trace = self._run([ev.settings for ev in group])
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
            self._fill(ev.record, result, level)

    def _measure_whole(self, group: list[Evaluation], level: float) -> None:
        """``group`` (candidates whose system-wide values differ from the reference's) beside
        the reference in one switchback run, each whole: its ratio counts the server's
        throughput, the CPU a parallel plan takes from the other sessions included."""
        ctx = self.ctx
        labels, configs = self.arms(group)
        try:
            race = switchback_race(ctx, configs, labels,
                                   run_seconds(ctx.config.measure.per_transaction_s, len(group)),
                                   seed=ctx.config.seed + 1000 * self.wide_runs + 500)
        except HarmonyError as exc:
            for ev in group:
                ev.record.failure = f"switchback run failed: {exc}"
            return
        finally:
            self.wide_runs += 1
        self.wide_measured += len(group)
        for label, ev in zip(labels[1:], group, strict=True):
            fill_by_switchback(self.state.decide, self.label, ev.record, race.plain[label], level,
                               race.counts)

    def _run(self, candidates: list[dict[str, str]]) -> Trace:
        """One run of the reference (configuration 0) and ``candidates``."""
        ctx = self.ctx
        ctx.measurer.stop()  # the windows' workload must not run beside this one
        names = self.space.names
        configurations = [{n: self.reference.settings[n] for n in names},
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

    def _fill(self, record: PointRecord, result: PerTransactionComparison,
              level: float) -> None:
        """``record``'s per-transaction ratio to the reference, its interval and value."""
        interval = result.interval
        record.design = PER_TRANSACTION
        record.ratio, record.interval = interval.ratio, (interval.low, interval.high)
        record.transactions = result.transactions
        record.reference = [level]
        record.value = record.ratio * level
        self.state.decide(Decision.note(
            f"{self.label}: {record.settings}: {result.text()} over the reference",
            design=PER_TRANSACTION, settings={"candidate": dict(record.settings)},
            ratio=record.ratio, low=record.interval[0], high=record.interval[1],
            level=interval.level, counts=result.estimand, rounds=result.slices))

    def summary(self) -> Decision:
        """The session's design in one decision."""
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
                     f"not see: the candidates with other values than the reference's were "
                     f"measured whole by switchback beside it ({self.wide_measured} "
                     f"candidate(s) in {self.wide_runs} run(s))")
        return Decision.note(text, design=PER_TRANSACTION)


#: measure a session per transaction (:meth:`SessionEvaluations.run_session`)
run_per_transaction_session = PerTransactionEvaluations.run_session
