"""The final race measured per transaction (``measure.design: per-transaction``): every
candidate and the original share one run, each transaction drawing one of them at random
and running under ``SET LOCAL`` (issue 27).

Only where the design applies: every knob whose value differs between the candidates must be
session-settable (``pg_settings.context`` user or superuser) and the workload must have a
per-transaction driver (TPC-H mixes, pgbench, scripts), and no knob with a system-wide side
(parallel query, which per-transaction latency misjudges: :func:`system_wide_reason`) may
differ, and no candidate may raise work memory into the upper part of the memory budget
(:func:`memory_pressure_reason`). Otherwise the decisions say why and the race runs by
switchback (whole-server slices) where that applies, else in windows, as before. The knobs the
candidates share are put in force on the server first (the original's values), so
``SET LOCAL`` carries exactly the differences.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

from harmony_base.errors import HarmonyError
from tuner_client.budget import ONLINE_MEMORY_KNOBS, BudgetView
from tuner_client.measurer import objective_unit
from tuner_client.phases.result import Best, Evidence, Intervals, Throughput, TuneResult, Work
from tuner_client.phases.state import RunContext, RunState
from tuner_client.stats.decision import FinalDecision
from tuner_client.stats.per_transaction import MIN_SLICES
from tuner_client.stats.per_transaction_race import (
    SYSTEM_WIDE_KNOBS,
    PerTransactionRace,
    race_per_transaction,
)
from workloads.per_transaction.from_config import make_assignment, unsupported_reason
from workloads.per_transaction.settings import SESSION_CONTEXTS
from workloads.per_transaction.trace import Settled

logger = logging.getLogger(__name__)

#: the ``measure.design`` value that asks for this race
PER_TRANSACTION = "per-transaction"
#: a candidate whose worst-case work memory takes more of the online budget than this share
#: races on the whole server (:func:`memory_pressure_reason`)
MEMORY_PRESSURE_SHARE = 0.4
#: the run's length when ``final.max_seconds`` sets none, and its bounds (s)
DEFAULT_SECONDS = 120
MIN_SECONDS, MAX_SECONDS = 30, 600


class RaceOutcome(Protocol):
    """A race run in one design (per transaction, switchback): its winner and decision."""

    @property
    def winner(self) -> str | None: ...

    def to_final_decision(self) -> FinalDecision: ...


def differing_knobs(candidates: Sequence[Mapping[str, str]]) -> list[str]:
    """The knobs whose value is not the same in every candidate (absent counts as a value)."""
    names = sorted({n for c in candidates for n in c})
    return [n for n in names if len({c.get(n) for c in candidates}) > 1]


def why_not_per_transaction(ctx: RunContext, candidates: Sequence[Mapping[str, str]]
                            ) -> str | None:
    """Why these candidates cannot be compared per transaction here (None: they can)."""
    reason = unsupported_reason(ctx.config.workload)
    if reason is not None:
        return reason
    if ctx.pool.replicated:
        return "the race runs over several replicas"
    for name in differing_knobs(candidates):
        context = ctx.budget.catalog[name].context if name in ctx.budget.catalog else "unknown"
        if context not in SESSION_CONTEXTS:
            return (f"{name} differs between the candidates and its pg_settings context is "
                    f"{context!r}; SET LOCAL needs 'user' or 'superuser'")
    return None


def system_wide_reason(candidates: Sequence[Mapping[str, str]]) -> str | None:
    """Why these candidates' race must switch the whole server: a knob with a system-wide
    side differs between them (None: none does)."""
    wide = [n for n in differing_knobs(candidates) if n in SYSTEM_WIDE_KNOBS]
    if not wide:
        return None
    # measured: parallel workers 2→0 read 0.77× per transaction and 1.22× in windows
    # (benchmarks/results/evidence_pertx.quick.md); in the demo 0.86× against 1.26×
    return (f"{', '.join(wide)} differs between the candidates and has a system-wide side "
            f"per-transaction latency does not see (parallel workers 2→0 read 0.77× per "
            f"transaction and 1.22× in whole-server windows)")


def memory_pressure_reason(budget: BudgetView, in_force: Mapping[str, str],
                           candidates: Sequence[Mapping[str, str]]) -> str | None:
    """Why these candidates' race must run on the whole server: a candidate (after the first,
    the reference) changes an online memory knob (work_mem, maintenance_work_mem,
    temp_buffers) and its worst case takes more than
    :data:`MEMORY_PRESSURE_SHARE` of the online memory budget, and more than the reference's
    (None: none does). Knobs a candidate leaves out have their values ``in_force``.

    In a per-transaction run a candidate holds only its share of the transactions, so the
    server feels the average of the arms' work memory, not the candidate's. Measured, work_mem
    64kB→4MB on TPC-H 2Q6,6Q13 (scouts ``benchmarks/results/evidence_power.*2Q6,6Q13.md``, truths
    ``benchmarks/results/evidence_power.truth.s1[23]q*.md``), per transaction against 20
    whole-server window rounds, with the 4MB point's share of the
    default budget (work_mem counted hash_mem_multiplier 2 times per connection) and, in
    brackets, of a budget that counts it once (``budget.work_mem_held: 1``):

    - 320 MB cgroup, 208 % (142 %): 1.099× (1.071–1.129) against 1.002× (0.942–1.066);
    - 512 MB, 69 % (47 %): 1.128× (1.088–1.170) against 0.946× (0.860–1.042);
    - 1 GB, 25 % (17 %): 1.082× (1.044–1.122) against 1.080× (1.010–1.155), agreeing.

    The 40 % line lies between the agreeing cell and the disagreeing ones under either count."""
    reference = {**in_force, **candidates[0]}
    base = budget.online_share(reference)
    for config in candidates[1:]:
        changed = [n for n in ONLINE_MEMORY_KNOBS
                   if config.get(n, reference.get(n)) != reference.get(n)]
        if not changed:
            continue
        share = budget.online_share({**reference, **config})
        if share is not None and share > MEMORY_PRESSURE_SHARE and (base is None or share > base):
            return (f"{', '.join(changed)} differs between the candidates and one's worst case "
                    f"takes {100 * share:.0f} % of the online memory budget (over "
                    f"{100 * MEMORY_PRESSURE_SHARE:.0f} %): per transaction it held only its "
                    f"share of the transactions, so the server did not feel its memory "
                    f"pressure")
    return None


def per_transaction_reason(ctx: RunContext, candidates: Sequence[Mapping[str, str]]
                           ) -> str | None:
    """Why these candidates' final race does not run per transaction (None: it does)."""
    return (why_not_per_transaction(ctx, candidates) or system_wide_reason(candidates)
            or memory_pressure_reason(ctx.budget, ctx.measurer.in_force, candidates))


def race_per_transaction_run(ctx: RunContext, state: RunState,
                             candidates: Mapping[str, dict[str, str]], labels: list[str]
                             ) -> PerTransactionRace | None:
    """Race ``labels`` (the first is the reference) in one per-transaction run of
    :func:`race_seconds` (where :func:`per_transaction_reason` gives none); None, said why,
    when the run fails."""
    try:
        race = run_per_transaction(ctx, candidates, labels, race_seconds(ctx))
    except HarmonyError as exc:
        state.decide(f"final: the per-transaction run failed ({exc}); measured in windows")
        return None
    for line in race.decisions():
        state.decide(f"final: {line}")
    return race


def race_seconds(ctx: RunContext) -> int:
    """A per-transaction race's length: ``final.max_seconds`` (default
    :data:`DEFAULT_SECONDS`) within [:data:`MIN_SECONDS`, :data:`MAX_SECONDS`]."""
    wanted = ctx.config.final.max_seconds or DEFAULT_SECONDS
    return int(min(MAX_SECONDS, max(MIN_SECONDS, wanted)))


def run_per_transaction(ctx: RunContext, candidates: Mapping[str, dict[str, str]],
                        labels: list[str], seconds: int, settled: Settled | None = None
                        ) -> PerTransactionRace:
    """One per-transaction run of ``labels`` (the first is the reference) for ``seconds``
    (sooner once ``settled`` says so, from :data:`MIN_SLICES` s on: only for a choice that
    claims nothing): the knobs they share are put in force on the server first (a restart
    when a restart-time one changes), so ``SET LOCAL`` carries exactly the differences.
    Raises :class:`HarmonyError` when the run fails."""
    configs = [candidates[label] for label in labels]
    differing = differing_knobs(configs)
    shared = {n: v for n, v in configs[0].items() if n not in differing}
    ctx.measurer.stop()  # the windows' workload must not run beside this one
    ctx.apply(shared, check_budget=False, warm_up=False)
    assignment = make_assignment(ctx.config.workload, ctx.target.dsn,
                                 [{n: c[n] for n in differing if n in c} for c in configs],
                                 seed=ctx.config.seed)
    logger.info("=== per-transaction run: %s for %s%d s ===", " vs ".join(labels),
                "up to " if settled is not None else "", seconds)
    trace = assignment.run(seconds, settled=settled, min_s=float(MIN_SLICES))
    return race_per_transaction(trace, labels, configs, level=ctx.config.final.level,
                                seed=ctx.config.seed)


def per_transaction_result(ctx: RunContext, state: RunState,
                           candidates: Mapping[str, dict[str, str]],
                           race: RaceOutcome) -> TuneResult:
    """The run's result from a per-transaction or switchback race (the original unless a
    winner): no absolute throughput (every configuration ran in the same seconds), the
    ratios and their intervals in the decision."""
    best = dict(candidates[race.winner]) if race.winner is not None else dict(ctx.original)
    return decision_result(ctx, state, race.to_final_decision(), best)


def decision_result(ctx: RunContext, state: RunState, decision: FinalDecision,
                    best: dict[str, str]) -> TuneResult:
    """The run's result from a race's ``decision`` (a per-transaction, switchback or split
    one) and the configuration it leaves (``best``; the original when no winner)."""
    ctx.metrics.record_final_comparison(decision.to_dict())
    unit = objective_unit(ctx.config.measure.estimator, ctx.config.workload.kind)
    work = Work(passes=state.passes,
                evaluations=sum(1 for r in state.records if not r.session.startswith("final")),
                sessions=[s.name for s, _ in state.sessions], decisions=list(state.decisions))
    return TuneResult.conclude(
        Best(best, dict(ctx.original), Throughput(
            default=None, best=None, unit=unit,
            search_best=state.best.value if state.best is not None else None)),
        Intervals([], decision), work, Evidence(bme=state.bme, screening=state.screening))
