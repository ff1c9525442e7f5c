"""The final race measured per transaction: every candidate and the original share one run,
each transaction drawing one of them at random and running under ``SET LOCAL`` (issue 27).

The engine chooses it where it is valid (:mod:`tuner_client.engine.designs`: every differing
knob session-settable, none with a system-wide side, no memory pressure, a per-transaction
driver, one server). The knobs the candidates share are put in force on the server first
(the original's values), so ``SET LOCAL`` carries exactly the differences. The reference's
own level over the run's slices is its drift (:data:`HOLDS`: what the interval then holds
for).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from harmony_base.errors import HarmonyError
from tuner_client.engine.designs import PER_TRANSACTION
from tuner_client.engine.protocol import RaceRequest
from tuner_client.phases.decisions import Decision, Kind, drift_record, race_records
from tuner_client.phases.final_design import FinalDesign, FinalRun, shared_in_force
from tuner_client.phases.state import RunContext, RunState
from tuner_client.stats.per_transaction import MIN_SLICES
from tuner_client.stats.per_transaction_race import PerTransactionRace, race_per_transaction
from workloads.per_transaction.from_config import make_assignment
from workloads.per_transaction.trace import Settled

logger = logging.getLogger(__name__)

#: the run's length when ``final.max_seconds`` sets none, and its bounds (s)
DEFAULT_SECONDS = 120
MIN_SECONDS, MAX_SECONDS = 30, 600

#: what a per-transaction race's interval holds for when its reference drifted (issue 51,
#: item 5)
HOLDS = ("every transaction drew its configuration at random, so the reference and the "
         "candidates ran interleaved at the same moments of every slice and a drift they "
         "share cancels within each slice: the interval holds for the average of the states "
         "the race saw, not for the reference's level at its start or at its end")


class PerTransaction(FinalDesign, name=PER_TRANSACTION):
    """Race the request's labels (the first the reference) in one per-transaction run of
    :func:`race_seconds`; None, said why, when the run fails."""

    def race(self, run: FinalRun, request: RaceRequest) -> PerTransactionRace | None:
        try:
            race = run_per_transaction(run.ctx, request.configurations, list(request.labels),
                                       race_seconds(run.ctx), level=request.level)
        except HarmonyError as exc:
            run.state.decide(Decision.of("final", Kind.FAILED, design=self.name,
                                         stage=request.stage, reason=str(exc),
                                         text="measured in windows"))
            return None
        decide_race(run.state, race, stage=request.stage)
        return race


def decide_race(state: RunState, race: PerTransactionRace, *, stage: str | None = None
                ) -> None:
    """The race's records: its verdict and account, then its reference's drift (none when
    the run had too few slices for one)."""
    for record in race_records(race.to_final_decision(), stage=stage, counts=race.counts()):
        state.decide(record)
    if race.drift is not None:
        state.decide(drift_record(race.drift, reference=race.reference, design=PER_TRANSACTION,
                                  stage=stage, holds=HOLDS))


def race_seconds(ctx: RunContext, wanted: float | None = None) -> int:
    """A race's length: ``wanted`` (default ``final.max_seconds``, then
    :data:`DEFAULT_SECONDS`) within [:data:`MIN_SECONDS`, :data:`MAX_SECONDS`]."""
    wanted = wanted or ctx.config.final.max_seconds or DEFAULT_SECONDS
    return int(min(MAX_SECONDS, max(MIN_SECONDS, wanted)))


def run_per_transaction(ctx: RunContext, candidates: Mapping[str, Mapping[str, str]],
                        labels: list[str], seconds: int, settled: Settled | None = None, *,
                        level: float) -> PerTransactionRace:
    """One per-transaction run of ``labels`` (the first is the reference) for ``seconds``
    (sooner once ``settled`` says so, from :data:`MIN_SLICES` s on: only for a choice that
    claims nothing), its claim at ``level``: the knobs they share are put in force on the
    server first (a restart when a restart-time one changes), so ``SET LOCAL`` carries
    exactly the differences. Raises :class:`HarmonyError` when the run fails."""
    configs = [dict(candidates[label]) for label in labels]
    differing = shared_in_force(ctx, configs)
    assignment = make_assignment(ctx.config.workload, ctx.target.dsn,
                                 [{n: c[n] for n in differing if n in c} for c in configs],
                                 seed=ctx.config.seed)
    logger.info("=== per-transaction run: %s for %s%d s ===", " vs ".join(labels),
                "up to " if settled is not None else "", seconds)
    trace = assignment.run(seconds, settled=settled, min_s=float(MIN_SLICES))
    return race_per_transaction(trace, labels, configs, level=level, seed=ctx.config.seed)
