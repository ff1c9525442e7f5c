"""The final race's candidates: the search's best distinct configurations, ranked by the
mean of their measurements, the screening's predicted best, and the rules-of-thumb baselines
(PGTune's), each checked against the memory budget (said why when one is not raced)."""

from __future__ import annotations

import logging
import os
import statistics
from collections.abc import Mapping

from tuner_client.knobs.pgtune import Machine, pgtune_on_grid
from tuner_client.measurer import PointRecord
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.state import RunContext, RunState
from tuner_client.stats.ledger import Ledger

logger = logging.getLogger(__name__)


def screened_races(ctx: RunContext, state: RunState, candidates: Mapping[str, dict[str, str]]
              ) -> bool:
    """Whether the screening's predicted best races too: it pools the whole design, so it
    can be right where the search's few noisy evaluations ranked it low (on
    ``3Q6,3Q7,3Q8,3Q13`` three screenings in three runs put random_page_cost at its low end,
    the grid's best, and two searches kept the original). Not when it is already a
    candidate, the original, or breaks the memory budget (said why)."""
    screened = state.screened
    if screened is None or any(screened == s for s in candidates.values()):
        return False
    reason = ctx.budget_violation(screened)
    if reason is not None:
        state.decide(Decision.note(f"final: the screening's predicted best {screened} breaks "
                                   f"the memory budget ({reason}); not raced",
                                   labels=("screened",), reason=reason))
        return False
    return True


def baseline_settings(ctx: RunContext, state: RunState, label: str) -> dict[str, str] | None:
    """A baseline's settings for the tuned knobs, or None (said why) when it cannot run."""
    if label != "pgtune":
        return None
    budget = ctx.budget.budget
    machine = Machine(ram_bytes=budget.ram_bytes, cpus=os.cpu_count() or 1,
                      connections=budget.connections,
                      db_type="oltp" if ctx.config.workload.kind in ("pgbench", "observe")
                      else "dw")
    settings = {**ctx.original, **pgtune_on_grid(machine, ctx.budget.catalog, ctx.original)}
    if settings == ctx.original:
        state.decide(Decision.note("final: PGTune's rules set none of the tuned knobs "
                                   "differently from the original; not measured as a baseline",
                                   labels=("pgtune",)))
        return None
    reason = ctx.budget_violation(settings)
    if reason is not None:
        state.decide(Decision.note(f"final: PGTune's rules {settings} break the memory budget "
                                   f"({reason}); not measured as a baseline",
                                   labels=("pgtune",), reason=reason))
        return None
    return settings


def ranked_candidates(ctx: RunContext, state: RunState, count: int) -> list[dict[str, str]]:
    """The ``count`` best distinct configurations the search measured under the current
    workload, other than the original: the search's best (``state.best``, which a ratio over
    the incumbent itself may have made best against the values) first, then the others by
    :func:`rank_configurations` (by their ratio to the original through the run's ledger of
    paired comparisons where it reaches them).

    A configuration that breaks the memory budget as a whole is skipped (and said so when it
    is the search's best): an offline point was measured under the original online settings,
    which the online budget may refuse.
    """
    out: list[dict[str, str]] = []
    ranked = rank_configurations(state.records[state.ranked_from:], ctx.original,
                                 state.ledger)
    ranked.sort(key=lambda kv: not any(r is state.best for r in kv[1]))  # stable: best first
    for settings, records in ranked:
        if len(out) >= count:
            break
        reason = ctx.budget_violation({**records[-1].in_force, **settings})
        if reason is not None:
            text = f"final: {settings} not re-measured: {reason}"
            if any(r is state.best for r in records):
                state.decide(Decision.note(text, labels=("best",), reason=reason))
            else:
                logger.info(text)
            continue
        out.append(settings)
        standing = state.ledger.standing(settings) if state.ledger is not None else None
        if standing is not None:
            # the ranking, as the decisions show it: a ratio carried through the chain of
            # paired comparisons, not a level
            low, high = standing.interval()
            state.decide(Decision.of("final", Kind.RANKED, step="ledger", count=len(out),
                                     settings={"candidate": settings}, ratio=standing.ratio,
                                     low=low, high=high, level=0.95, rounds=standing.links,
                                     text=standing.text()))
    return out


def rank_configurations(records: list[PointRecord], original: Mapping[str, str],
                        ledger: Ledger | None = None
                        ) -> list[tuple[dict[str, str], list[PointRecord]]]:
    """The distinct configurations of the knobs in ``original`` that the search measured,
    other than the original, best first: those the ``ledger`` reaches by their ratio to the
    original through its chain of paired comparisons, each link shrunk toward no change by
    its noise (:meth:`~tuner_client.stats.ledger.Ledger.scores`; never by absolute levels
    measured under different designs or minutes apart), then the others by the mean of their
    values:
    a configuration measured several times is ranked by all its measurements, not by its
    luckiest one.

    Screening's design points are not candidates: each is one short sample at the ends of
    the knobs' ranges, taken to rank the knobs, and its value is not paired with a
    reference, so a lucky one would enter the race on noise (the 320 MB headroom run on
    ``3Q6,3Q7,3Q8,3Q13`` raced such a point and claimed 1.32× that re-measured at 1.04×).
    Nor are the final rounds' own measurements.
    """
    names = list(original)
    measured: dict[tuple[str, ...], list[PointRecord]] = {}
    for r in records:
        if r.value is None or r.session.startswith("final") or r.session == "screening":
            continue
        key = tuple(r.in_force.get(n, original[n]) for n in names)
        if key != tuple(original.values()):
            measured.setdefault(key, []).append(r)
    scores = ledger.scores() if ledger is not None else {}

    def rank(kv: tuple[tuple[str, ...], list[PointRecord]]) -> tuple[int, float]:
        score = scores.get(ledger.key(dict(zip(names, kv[0], strict=True)))) \
            if ledger is not None else None
        if score is not None:
            return 1, score
        return 0, statistics.fmean(r.value or 0.0 for r in kv[1])

    ranked = sorted(measured.items(), reverse=True, key=rank)
    return [(dict(zip(names, key, strict=True)), rs) for key, rs in ranked]
