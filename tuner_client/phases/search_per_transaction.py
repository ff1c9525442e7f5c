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
design read 0.86× per transaction and was never kept. A batch is split by the candidates'
values of those knobs: every arm of a group's run carries the group's values (so the whole
server runs them), the reference arm differs from the reference only there, and the
group's ratio to the reference is the per-transaction ratio times that of the reference
with the group's values over the reference itself. That factor is measured once per value by
switchback (issue 51, item 3): the values a batch needs that have none yet share one
switchback run beside the reference (:func:`tuner_client.phases.search_switchback.switchback_race`:
slices of ``measure.slice_s``, blocks in a balanced random order, ALTER SYSTEM + reload), so
each factor is a paired ratio with its interval (Student t over blocks, as the switchback
search's: :func:`~tuner_client.phases.search_switchback.search_interval`), and the record's interval
adds the two parts' log-scale half-widths in quadrature (:func:`combined`). Before, it was
ONE paired whole-server window block per value, a single ratio without an interval
multiplying every per-transaction ratio that carried it: a default-path run read 4.76× and
0.64× from such blocks (noise at a per-window sd of 7–15 %). Routing such a batch
to the switchback search instead would lose the per-transaction precision of every knob the
group shares; here only the system-wide part is measured by switchback.

The two factors share one objective, the workload's count: the switchback's driver counts
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
import math
from dataclasses import dataclass, field
from typing import ClassVar

from harmony_base.errors import HarmonyError
from tuner_client.engine.designs import PER_TRANSACTION, SWITCHBACK, SYSTEM_WIDE_KNOBS
from tuner_client.measurer import PointRecord
from tuner_client.phases.decisions import Decision
from tuner_client.phases.search_batches import (
    LEVEL,
    MAX_BATCH,
    REFERENCE,
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
from tuner_client.phases.search_switchback import (
    interval_text,
    search_interval,
    switchback_race,
)
from tuner_client.stats.estimand import COUNTS, DRAWS
from tuner_client.stats.paired import RatioInterval
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
    #: per value of the system-wide knobs: the reference with it over the reference, by
    #: switchback (its paired ratio and interval; None: the run failed)
    wide_factors: dict[WideKey, RatioInterval | None] = field(default_factory=dict)
    #: the switchback runs that measured them
    wide_runs: int = 0

    @property
    def wide(self) -> list[str]:
        """The searched knobs with a system-wide side, measured by switchback."""
        return [n for n in self.space.names if n in SYSTEM_WIDE_KNOBS]

    def measure_feasible(self, runnable: list[Evaluation], level: float) -> None:
        """Run ``runnable`` beside the reference, one run per group of system-wide values
        (each group's factor measured first by switchback, where none is yet)."""
        groups: dict[WideKey, list[Evaluation]] = {}
        for ev in runnable:
            groups.setdefault(self._wide_key(ev.settings), []).append(ev)
        self._measure_wide([key for key in groups if not self._is_reference(key)
                            and key not in self.wide_factors])
        for key, group in groups.items():
            self._measure_group(key, group, level)

    def _wide_key(self, settings: dict[str, str]) -> WideKey:
        """``settings``' values of the system-wide knobs."""
        return tuple((n, settings[n]) for n in self.wide)

    def _is_reference(self, key: WideKey) -> bool:
        return all(self.reference.settings.get(n) == v for n, v in key)

    def _measure_group(self, key: WideKey, group: list[Evaluation],
                       level: float) -> None:
        """One run of ``group`` (candidates sharing the system-wide values ``key``) beside the
        reference with those values; each ratio times that reference's switchback factor."""
        factor = None if self._is_reference(key) else self.wide_factors.get(key)
        if factor is None and not self._is_reference(key):
            for ev in group:
                ev.record.failure = (f"{dict(key)} could not be measured by switchback beside "
                                     f"the reference")
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

    def _measure_wide(self, keys: list[WideKey]) -> None:
        """The reference with each of the system-wide values ``keys`` over the reference
        itself: one switchback run over the reference and all of them (its paired ratio and
        interval per value; None where the run failed)."""
        if not keys:
            return
        ctx, names = self.ctx, self.space.names
        base = {n: self.reference.settings[n] for n in names}
        labels = [REFERENCE, *(str(dict(key)) for key in keys)]
        configs = [base, *({**base, **dict(key)} for key in keys)]
        try:
            race = switchback_race(ctx, configs, labels,
                                   run_seconds(ctx.config.measure.per_transaction_s, len(keys)),
                                   seed=ctx.config.seed + 1000 * self.wide_runs + 500)
        except HarmonyError as exc:
            for key in keys:
                self.wide_factors[key] = None
            self.state.decide(Decision.note(
                f"{self.label}: {', '.join(labels[1:])} ha{'s' if len(keys) == 1 else 've'} a "
                f"system-wide side per-transaction latency does not see; the switchback beside "
                f"the reference failed ({exc})", design=SWITCHBACK, reason=str(exc)))
            return
        finally:
            self.wide_runs += 1
        for label, key in zip(labels[1:], keys, strict=True):
            comparison = race.plain[label]
            iv = self.wide_factors[key] = search_interval(comparison)
            said = "failed (fewer than 2 blocks)" if iv is None else \
                f"measured by switchback beside the reference: {interval_text(iv, comparison)}"
            self.state.decide(Decision.note(
                f"{self.label}: {label} has a system-wide side per-transaction latency does "
                f"not see; {said}", design=SWITCHBACK, settings={"candidate": dict(key)},
                ratio=comparison.interval.ratio, low=iv.low if iv else None,
                high=iv.high if iv else None, level=LEVEL, counts=race.counts,
                rounds=comparison.blocks))

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
              factor: RatioInterval | None, wide: dict[str, str]) -> None:
        """``record``'s ratio: the per-transaction one times the switchback ``factor`` of its
        system-wide values ``wide`` (None: they are the reference's), the two parts'
        log-scale half-widths added in quadrature (independent runs)."""
        interval = result.interval
        record.design = PER_TRANSACTION
        record.ratio, record.interval = combined(interval, factor)
        record.transactions = result.transactions
        record.reference = [level]
        record.value = record.ratio * level
        scaled = "" if factor is None else (
            f", times {factor.text()} for {wide} by switchback → {record.ratio:.3f}× "
            f"({record.interval[0]:.3f}–{record.interval[1]:.3f}, both parts' widths)")
        self.state.decide(Decision.note(
            f"{self.label}: {record.settings}: {result.text()} over the "
            f"reference{' with ' + str(wide) if scaled else ''}{scaled}",
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
                     f"not see: its values were measured by switchback beside the reference "
                     f"({len(self.wide_factors)} value(s) in {self.wide_runs} run(s)) and a "
                     f"run's arms all carried them")
        return Decision.note(text, design=PER_TRANSACTION)


def combined(part: RatioInterval, factor: RatioInterval | None
             ) -> tuple[float, tuple[float, float]]:
    """The ratio ``part`` × ``factor`` and its interval: each side's log distance from the
    ratio, the two parts' added in quadrature (``factor`` None: ``part`` alone)."""
    if factor is None:
        return part.ratio, (part.low, part.high)
    ratio = part.ratio * factor.ratio
    down = math.hypot(math.log(part.ratio / part.low), math.log(factor.ratio / factor.low))
    up = math.hypot(math.log(part.high / part.ratio), math.log(factor.high / factor.ratio))
    return ratio, (ratio * math.exp(-down), ratio * math.exp(up))


#: measure a session per transaction (:meth:`SessionEvaluations.run_session`)
run_per_transaction_session = PerTransactionEvaluations.run_session
