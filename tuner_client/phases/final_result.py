"""The run's result from the final race, whatever its design: one place turns a
:class:`~tuner_client.engine.protocol.RaceOutcome` into the :class:`TuneResult` (the
recommended configuration, or the original unless a winner; the decision; for a design that
measures in rounds, the means the result reports) and exports the decision's metrics."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence

from tuner_client.engine.protocol import RaceOutcome, Traced
from tuner_client.phases.final_design import FinalRun, Recommends, Rounds
from tuner_client.phases.result import Best, Evidence, Intervals, Throughput, TuneResult, Work


def conclude(run: FinalRun, configurations: Mapping[str, Mapping[str, str]],
             outcome: RaceOutcome | None, baselines: Sequence[str] = ()) -> TuneResult:
    """The result of a race's ``outcome`` (None: nothing raced) among ``configurations``;
    ``baselines``: labels whose means (in a design measuring in rounds) the result
    reports."""
    ctx, state = run.ctx, run.state
    rounds: list[dict[str, float | None]] = \
        [dict(r) for r in outcome.rounds] if isinstance(outcome, Rounds) else []
    decision = outcome.to_final_decision() if outcome is not None else None
    trace = outcome.trace() if isinstance(outcome, Traced) else None

    def mean(which: str) -> float | None:
        vals = [v for row in rounds if (v := row.get(which)) is not None]
        return statistics.fmean(vals) if vals else None

    default_qpm = mean("default")
    winner = decision.winner if decision is not None else None
    best, best_qpm = dict(ctx.original), default_qpm
    if winner is not None:
        recommended = outcome.recommended() if isinstance(outcome, Recommends) \
            else configurations[winner]
        best = dict(recommended) if recommended is not None else best
        best_qpm = mean(winner)
    if decision is not None:
        ctx.metrics.record_final_comparison(decision.to_dict())
    for row in rounds:  # what the comparison calls "tuned": the result, measured each round
        row["tuned"] = row.get(winner or "default")
    if default_qpm is not None:
        ctx.metrics.record_default(default_qpm)
    throughput = Throughput(
        default=default_qpm, best=best_qpm,
        search_best=state.best.value if state.best is not None else None,
        recommended=mean("recommended"), unit=ctx.unit,
        baselines={b: q for b in baselines if (q := mean(b)) is not None})
    work = Work(passes=state.passes,
                evaluations=sum(1 for r in state.records if not r.session.startswith("final")),
                sessions=[s.name for s, _ in state.sessions], decisions=list(state.decisions),
                decision_records=[d.to_dict() for d in state.decision_records])
    return TuneResult.conclude(Best(best, dict(ctx.original), throughput),
                               Intervals(rounds, decision, trace), work,
                               Evidence(bme=state.bme, screening=state.screening))
