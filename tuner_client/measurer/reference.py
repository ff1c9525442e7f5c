"""The original configuration as the reference of the run: each template's cost for the work
estimators, and live traffic's statement mix for the latency estimator
(:mod:`tuner_client.stats.mix`), learned once and frozen."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from harmony_base.errors import WorkloadError
from tuner_client.measurer.options import LiveWatch
from tuner_client.stats.mix import MixReference
from workloads.sample import Sample, reference_costs

logger = logging.getLogger(__name__)


class Reference:
    """What the reference configuration's samples taught: ``costs`` (each template's mean
    latency s, frozen for the run; a template the reference never completed gets the mean
    latency of its first completion) and ``mix`` (live traffic's per-statement costs and
    shares; ``min_calls`` / ``min_coverage`` say which statements a window compares)."""

    def __init__(self, live: LiveWatch) -> None:
        self.costs: dict[str, float] | None = None
        self.mix: MixReference | None = None
        self.min_calls, self.min_coverage = live.min_calls, live.min_coverage
        self.guard = live.guard

    def learn(self, taken: list[Sample], observed: list[Any], estimator: str) -> dict[str, float]:
        """Freeze the reference from its samples ``taken`` (and, live, the server's
        ``observed`` windows beside them); raises :class:`WorkloadError` when they completed
        no query."""
        if estimator == "latency":
            self._learn_mix(taken, observed)
        costs = reference_costs(taken)
        if not costs:
            raise WorkloadError("the reference configuration completed no query in "
                                f"{sum(s.seconds for s in taken):.0f} s: no work reference; "
                                "lengthen measure.seconds or measure.queries")
        self.costs = costs
        logger.info("work reference (mean latency s under the original configuration, "
                    "frozen for the run): %s", {q: round(c, 4) for q, c in costs.items()})
        return costs

    def forget(self) -> None:
        """Drop the frozen reference (costs, statement mix, the guardrail's reference)."""
        self.costs = None
        self.mix = None
        if self.guard is not None:
            self.guard.reference, self.guard.level = None, 1.0

    def _learn_mix(self, taken: list[Sample], observed: list[Any]) -> None:
        """Freeze the reference's statement costs and shares (live traffic), and its error
        rate for the guardrail."""
        windows = [{q: (st.completed, st.mean) for q, st in s.per_query.items()} for s in taken]
        self.mix = MixReference.learn(windows, min_calls=self.min_calls,
                                      min_coverage=self.min_coverage,
                                      seconds=sum(s.seconds for s in taken))
        ref = self.mix
        if ref.ignored:
            logger.info("live reference: %d statements with fewer than %d calls per window "
                        "are left out (%d calls in all): %s", len(ref.ignored), self.min_calls,
                        sum(ref.ignored.values()), dict(list(ref.ignored.items())[:10]))
        logger.info("live reference: %d statements compared (%d calls), time shares %s",
                    len(ref.shares), ref.calls,
                    {q: round(w, 3) for q, w in sorted(ref.shares.items(),
                                                        key=lambda kv: -kv[1])[:10]})
        if self.guard is not None:
            self.guard.reference = ref
            seen = [w for w in observed if w is not None]
            errors = sum(w.xact_rollback + w.deadlocks for w in seen)
            finished = sum(w.xact_commit + w.xact_rollback for w in seen)
            self.guard.baseline_error_rate = errors / finished if finished else 0.0
            logger.info("guardrail baseline: %.2f %% of %d transactions rolled back or "
                        "deadlocked under the reference", 100 * self.guard.baseline_error_rate,
                        finished)

    def work_per_s(self, got: Sample) -> float | None:
        """Reference-seconds of work per second in sample ``got`` (None without costs)."""
        return got.work_per_s(self._costs_for(got)) if self.costs is not None else None

    def _costs_for(self, got: Sample) -> dict[str, float]:
        """The frozen reference costs, plus first-sight costs of templates the reference
        never completed (frozen from then on)."""
        costs = self.costs if self.costs is not None else {}
        for query, stats in got.per_query.items():
            if stats.completed and stats.mean is not None and query not in costs:
                logger.info("work reference: %s never completed under the reference "
                            "configuration; its cost is frozen at its first mean latency "
                            "%.3f s", query, stats.mean)
                costs[query] = stats.mean
        if self.costs is not None:
            self.costs = costs
        return costs

    def live_speed(self, got: Sample, at_original: Callable[[], bool]) -> float:
        """The latency estimator's value of a live window; while the original configuration
        is in force (``at_original()``) the guardrail follows its drift."""
        if self.mix is None:
            raise WorkloadError("measure.estimator latency: no reference statement costs yet")
        per_query = {q: (st.completed, st.mean) for q, st in got.per_query.items()}
        score = self.mix.score(per_query)
        if score is None:
            raise self.mix.coverage_error(per_query, got.seconds)
        if self.guard is not None and at_original():
            self.guard.level = score.ratio  # the guardrail follows the original's drift
        if score.left_out:
            logger.info("%d of %d reference statements had fewer than %d calls in this "
                        "window and are left out (%.0f %% of the reference's time compared)",
                        len(score.left_out), len(self.mix.shares), self.mix.min_calls,
                        100 * score.covered)
        return score.speed
