"""The final race measured per transaction: every candidate and the original share one run,
each transaction drawing one of them at random and running under ``SET LOCAL`` (issue 27).

The engine chooses it where it is valid (:mod:`tuner_client.engine.designs`: every differing
knob session-settable, none with a system-wide side, no memory pressure, a per-transaction
driver, one server). The knobs the candidates share are put in force on the server first
(the original's values), so ``SET LOCAL`` carries exactly the differences.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from harmony_base.errors import HarmonyError
from tuner_client.engine.designs import differing_knobs
from tuner_client.measurer import objective_unit
from tuner_client.phases.result import Best, Evidence, Intervals, Throughput, TuneResult, Work
from tuner_client.phases.state import RunContext, RunState
from tuner_client.stats.decision import FinalDecision
from tuner_client.stats.per_transaction import MIN_SLICES
from tuner_client.stats.per_transaction_race import PerTransactionRace, race_per_transaction
from workloads.per_transaction.from_config import make_assignment
from workloads.per_transaction.trace import Settled

logger = logging.getLogger(__name__)

#: the run's length when ``final.max_seconds`` sets none, and its bounds (s)
DEFAULT_SECONDS = 120
MIN_SECONDS, MAX_SECONDS = 30, 600


class RaceOutcome(Protocol):
    """A race run in one design (per transaction, switchback): its winner and decision."""

    @property
    def winner(self) -> str | None: ...

    def to_final_decision(self) -> FinalDecision: ...


def race_per_transaction_run(ctx: RunContext, state: RunState,
                             candidates: Mapping[str, dict[str, str]], labels: list[str]
                             ) -> PerTransactionRace | None:
    """Race ``labels`` (the first is the reference) in one per-transaction run of
    :func:`race_seconds`, where the engine chose it
    (:func:`tuner_client.phases.design_choice.choose_for`); None, said why, when the run
    fails."""
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
