"""The final race in two stages, when the engine chose windows for it and the
candidates
differ in a knob that ``SET LOCAL`` cannot carry (a restart-time one such as shared_buffers,
a reload-time one, or one with a system-wide side), so that no single per-transaction run
holds them all (issue 27).

Stage 1: the searched candidates (the best, its runners-up, the screening's prediction) that
share the best's settings of every such knob are chosen between in one per-transaction run,
the best its reference, on the server restarted once to those settings; the one with the
highest work-weighted speedup over the best (the best itself when none is faster) goes on.
The choice claims nothing, so its run ends once every candidate is ranked, as a search run
does (:func:`tuner_client.phases.search_stops.ranked`: each interval within ±3 %,
within a quarter of its effect, or below 1.05×), and its intervals are then nominal.
Stage 2 is the windows race (:class:`~tuner_client.phases.final_windows.Windows`) of the
original, the eligible
baselines (PGTune's rules) and that one chosen. A candidate that differs from the best in
such a knob cannot be compared in stage 1: the best-ranked of them races in windows too only
when the search ranks it within noise of the best (:func:`within_noise`), else it is dropped,
said why.

Bonferroni stays honest: the windows race and its decision count the candidates compared in
stage 1 and not carried on, beside the ones that race (:attr:`Narrowed.also_compared`).
(Stage 1 measured on its own seconds, so the windows race's claim would hold without them;
counting them is the conservative reading.)
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

from harmony_base.errors import HarmonyError
from tuner_client.engine.designs import SESSION, differing_knobs, knob_class
from tuner_client.engine.protocol import RaceOutcome, RaceRequest
from tuner_client.measurer import PointRecord
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.final_candidates import rank_configurations
from tuner_client.phases.final_design import FinalDesign, FinalRun
from tuner_client.phases.final_per_transaction import (
    PerTransaction,
    race_seconds,
    run_per_transaction,
)
from tuner_client.phases.search_stops import ranked
from tuner_client.phases.state import RunContext, RunState
from tuner_client.stats.noise import POINT_CV_20S
from workloads.per_transaction.from_config import unsupported_reason

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Narrowed:
    """The searched candidates that race in windows, and how many more were compared per
    transaction before (the windows race's Bonferroni counts them too)."""

    searched: list[str]
    also_compared: int = 0


def fixed_knobs(ctx: RunContext, a: Mapping[str, str], b: Mapping[str, str]) -> list[str]:
    """The knobs differing between ``a`` and ``b`` that a per-transaction run cannot compare:
    not session-settable, or with a system-wide side it does not see."""
    catalog = ctx.budget.catalog
    return [n for n in differing_knobs([a, b])
            if knob_class(n, catalog[n].context if n in catalog else "unknown") != SESSION]


def search_noise(records: list[PointRecord]) -> tuple[float, int]:
    """The relative noise of one search measurement and the blocks it comes from: the spread
    of the references' log(after/before) around their candidates over √2 (two measurements
    of one configuration minutes apart); (:data:`POINT_CV_20S`, 0) before two such blocks."""
    drifts = [math.log(r.reference[1] / r.reference[0]) for r in records
              if len(r.reference) == 2 and min(r.reference) > 0]
    if len(drifts) < 2:
        return POINT_CV_20S, 0
    return statistics.stdev(drifts) / math.sqrt(2.0), len(drifts)


@dataclass(frozen=True)
class NoiseCheck:
    """The search's ranking of ``other`` against the best: its mean value's ratio to the
    best's, and the largest shortfall the search's noise explains at the level."""

    ratio: float
    allowed: float
    noise: float
    blocks: int
    measured: tuple[int, int]

    @property
    def within(self) -> bool:
        return math.log(self.ratio) >= -self.allowed

    def text(self) -> str:
        source = (f"noise ±{100 * self.noise:.1f} % per measurement from {self.blocks} "
                  f"reference repeats" if self.blocks else
                  f"noise ±{100 * self.noise:.1f} % per measurement assumed (no reference "
                  f"repeats; stats.noise.POINT_CV_20S)")
        return (f"the search ranks it {self.ratio:.2f}× the best (means of "
                f"{self.measured[1]} and {self.measured[0]} measurements; {source}; within "
                f"noise down to {math.exp(-self.allowed):.2f}×)")


def within_noise(records: list[PointRecord], original: Mapping[str, str],
                 best: Mapping[str, str], other: Mapping[str, str], *, level: float = 0.95
                 ) -> NoiseCheck | None:
    """How the search ranks ``other`` against ``best`` (None: the search never measured
    one of them): within noise when the log of its mean's shortfall is at most z·σ·√(1/n₁ +
    1/n₂), σ from :func:`search_noise`, z two-sided at ``level``."""
    # the search's own ranking, as the final candidates were chosen by
    ranked = rank_configurations(records, original)
    found = [next((rs for settings, rs in ranked if settings == dict(c)), None)
             for c in (best, other)]
    values = [rs for rs in found if rs is not None]
    if len(values) < 2:
        return None
    noise, blocks = search_noise(records)
    means = [statistics.fmean(r.value or 0.0 for r in rs) for rs in values]
    if min(means) <= 0:
        return None
    z = NormalDist().inv_cdf(1.0 - (1.0 - level) / 2.0)
    allowed = z * noise * math.sqrt(1.0 / len(values[0]) + 1.0 / len(values[1]))
    return NoiseCheck(means[1] / means[0], allowed, noise, blocks,
                      (len(values[0]), len(values[1])))


#: the composition's name in the registry and the decisions
NARROWING = "narrowing"


class Narrowing(FinalDesign, name=NARROWING):
    """Stage 1 per transaction among the searched candidates that share the best's settings
    of every knob ``SET LOCAL`` cannot carry, then the race of the one chosen (and the
    candidates kept within noise) in ``then`` (see the module). ``why``: why one
    per-transaction run cannot hold every candidate and the original."""

    def __init__(self, then: FinalDesign, why: str) -> None:
        self.then, self.why = then, why

    def race(self, run: FinalRun, request: RaceRequest) -> RaceOutcome | None:
        narrowed = narrow_candidates(run.ctx, run.state, request.configurations,
                                     list(request.searched), self.why, level=request.level)
        rules = [c for c in request.candidates if c not in request.searched]
        return self.then.race(run, RaceRequest(
            request.configurations, (request.reference, *narrowed.searched, *rules),
            request.level, reported=request.reported, also_compared=narrowed.also_compared,
            searched=tuple(narrowed.searched), stage=request.stage))


def narrow_candidates(ctx: RunContext, state: RunState,
                      candidates: Mapping[str, Mapping[str, str]], searched: list[str],
                      why: str, *, level: float) -> Narrowed:
    """Stage 1 (see the module): the searched candidates that race in windows. ``why``: why
    one per-transaction run cannot hold every candidate and the original."""
    best = searched[0]
    state.decide(Decision.note(f"final: not one per-transaction run for every candidate: "
                               f"{why}", design=NARROWING, why=why))
    reason = unsupported_reason(ctx.config.workload) or (
        "the race runs over several replicas" if ctx.pool.replicated else None)
    if reason is not None:
        state.decide(Decision.note(f"final: every candidate races in windows: {reason}",
                                   design=NARROWING, reason=reason))
        return Narrowed(searched)
    group = [c for c in searched if not fixed_knobs(ctx, candidates[best], candidates[c])]
    kept = _keep_within_noise(ctx, state, candidates, best,
                              [c for c in searched if c not in group])
    if len(group) < 2:
        return Narrowed([best, *kept])
    state.decide(Decision.note(
        f"final: stage 1, per transaction: {', '.join(group)} share the best's settings of "
        f"every knob SET LOCAL cannot carry; one per-transaction run chooses one of them to "
        f"race in windows", design=NARROWING, stage="stage 1", labels=group))
    try:
        race = run_per_transaction(ctx, candidates, group, race_seconds(ctx),
                                   settled=lambda trace: ranked(trace, ctx.config.seed),
                                   level=level)
    except HarmonyError as exc:
        state.decide(Decision.of("final", Kind.FAILED, design=PerTransaction.name,
                                 reason=str(exc), text="every candidate races in windows"))
        return Narrowed(searched)
    for label, result in race.comparisons.items():
        iv = result.interval
        state.decide(Decision.note(f"final: stage 1: {label}/{best} {result.text()}",
                                   design=NARROWING, stage="stage 1", labels=(best, label),
                                   ratio=iv.ratio, low=iv.low, high=iv.high, level=iv.level,
                                   rounds=result.slices))
    faster = {label: r.interval.ratio for label, r in race.comparisons.items()
              if r.interval.ratio > 1.0}
    chosen = max(faster, key=lambda label: faster[label], default=best)
    # the highest point estimate: the fresh per-transaction run predicts each candidate's
    # speed better than the search's few windows did; the claim is the windows race's
    why = f"{faster[chosen]:.3f}× {best}, the highest speedup over it" if chosen != best \
        else "no candidate ran faster than it"
    state.decide(Decision.note(
        f"final: stage 1 chose {chosen} ({why}); the windows race's Bonferroni also counts "
        f"the {len(group) - 1} compared here and not carried on", design=NARROWING,
        stage="stage 1", labels=group, winner=chosen, reason=why))
    return Narrowed([chosen, *kept], also_compared=len(group) - 1)


def _keep_within_noise(ctx: RunContext, state: RunState,
                       candidates: Mapping[str, Mapping[str, str]], best: str,
                       others: list[str]) -> list[str]:
    """The best-ranked of ``others`` (they differ from the best in a knob stage 1 cannot
    compare) when the search ranks it within noise of the best; every other one dropped."""
    records = state.records[state.ranked_from:]
    kept: list[str] = []
    for label in others:
        knobs = ", ".join(f"{n} ({candidates[label].get(n)} vs {candidates[best].get(n)})"
                          for n in fixed_knobs(ctx, candidates[best], candidates[label]))
        check = within_noise(records, ctx.original, candidates[best], candidates[label],
                             level=ctx.config.final.level)
        if kept:
            state.decide(Decision.note(
                f"final: {label} differs from {best} in {knobs}; not raced: only the "
                f"best-ranked such candidate ({kept[0]}) races in windows", design=NARROWING,
                labels=(best, label)))
        elif check is None:
            state.decide(Decision.note(
                f"final: {label} differs from {best} in {knobs} and the search did not measure "
                f"it beside {best}; not raced", design=NARROWING, labels=(best, label)))
        elif check.within:
            kept.append(label)
            state.decide(Decision.note(
                f"final: {label} differs from {best} in {knobs}, which a per-transaction run "
                f"cannot compare; {check.text()}: it races in windows too", design=NARROWING,
                labels=(best, label), ratio=check.ratio, reason="within the search's noise"))
        else:
            state.decide(Decision.note(
                f"final: {label} differs from {best} in {knobs}, which a per-transaction run "
                f"cannot compare; {check.text()}: outside the noise, not raced",
                design=NARROWING, labels=(best, label), ratio=check.ratio,
                reason="outside the search's noise"))
    return kept
