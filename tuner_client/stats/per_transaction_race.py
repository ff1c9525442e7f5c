"""The final race decided per transaction: every candidate and the reference share one run
(each transaction drawing one of them), each candidate's work-weighted speedup over the
reference with a simultaneous interval, and the decision with the design named.

The run's length is fixed in advance, so the block-bootstrap intervals of
:mod:`tuner_client.stats.per_transaction` are valid as they stand; picking the best of m
candidates is paid for with a Bonferroni level (1 − 0.05/m), as in
:mod:`tuner_client.stats.decision`. A candidate wins only when that interval lies above 1;
otherwise the original stays.

Per-transaction latency sees a knob's direct effect only. Knobs that trade one query's latency
against the others' resources (parallel workers take cores from the other queries) are
flagged: the decision says so and asks for a window-level confirmation
(``benchmarks/results/evidence_pertx*.md`` measures the agreement per knob class).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSONObject
from tuner_client.knobs.sides import SYSTEM_WIDE_KNOBS
from tuner_client.stats.decision import FinalDecision, race_decision, race_verdict
from tuner_client.stats.estimand import COUNTS
from tuner_client.stats.levels import simultaneous_level
from tuner_client.stats.per_transaction import (
    DESIGN,
    Observations,
    PerTransactionComparison,
    compare,
)
from tuner_client.stats.trace import RaceTrace, running_sequence

#: the interval method, as summary.json names it
METHOD_TEXT = ("block bootstrap over time slices (Student multiplier on the degrees of "
               "freedom the slices' kurtosis leaves), per-template mean latencies combined "
               "into the workload's count (tuner_client.stats.estimand)")


@dataclass(frozen=True)
class PerTransactionRace:
    """Every candidate against the reference from one per-transaction run."""

    reference: str
    #: each candidate against the reference at the simultaneous (Bonferroni) level
    comparisons: Mapping[str, PerTransactionComparison]
    winner: str | None
    level: float
    #: per candidate: the knobs whose system-wide side this design does not see
    system_wide: Mapping[str, tuple[str, ...]]
    #: the same comparisons at the plain level (e.g. 95 %)
    plain: Mapping[str, PerTransactionComparison]
    plain_level: float

    def verdict(self) -> str:
        """The decision in one line."""
        return race_verdict(self.winner, self.reference,
                            {label: c.interval for label, c in self.comparisons.items()},
                            "per transaction")

    def decisions(self) -> list[str]:
        """The decision's lines: the verdict, the design, each candidate's interval."""
        lines = [self.verdict(), f"final race measured {DESIGN}: every transaction drew one of "
                 f"{len(self.comparisons) + 1} configurations at random (SET LOCAL); "
                 f"the ratio counts {self.counts()}; intervals: block bootstrap over "
                 f"time slices (kurtosis-adjusted Student multiplier) at "
                 f"{100 * self.level:.4g} % (Bonferroni over {len(self.comparisons)} "
                 f"candidates)"]
        for label, result in self.comparisons.items():
            lines.append(f"{label}/{self.reference}: {result.text()}")
            if self.system_wide.get(label):
                lines.append(f"{label} changes {', '.join(self.system_wide[label])}, whose "
                             f"system-wide side a per-transaction comparison does not see; "
                             f"confirm it with whole-server windows")
        return lines

    def counts(self) -> str:
        """What the ratios count (the client model of the run)."""
        return "; ".join(COUNTS[m] for m in sorted({c.estimand
                                                    for c in self.comparisons.values()}))

    def to_final_decision(self) -> FinalDecision:
        """The race as the tuner's :class:`FinalDecision` (summary.json, the report)."""
        return race_decision(
            winner=self.winner, reference=self.reference,
            plain={label: r.interval for label, r in self.plain.items()},
            simultaneous={label: r.interval for label, r in self.comparisons.items()},
            rounds={label: r.slices for label, r in self.comparisons.items()},
            transactions={label: r.transactions for label, r in self.comparisons.items()},
            lines=self.decisions(), level=self.plain_level, decision_level=self.level,
            method="bootstrap", design=DESIGN, method_text=METHOD_TEXT)

    def trace(self) -> RaceTrace:
        """The run slice by slice: each candidate's confidence sequence over its time slices
        after every slice, at the plain level. The decision's interval is the block
        bootstrap at the run's end (a length fixed in advance), not this sequence's last
        step, which is wider: it holds at every slice."""
        return RaceTrace(DESIGN, "slice", self.reference, self.plain_level, "anytime",
                         {label: running_sequence(r.slice_logs, self.plain_level)
                          for label, r in self.plain.items()},
                         note="running interval: the confidence sequence over the run's time "
                              "slices; the decision: the block bootstrap at the run's end")

    def summary(self) -> JSONObject:
        """What summary.json records: the design, its observations and each interval."""
        return {"design": DESIGN, "reference": self.reference, "winner": self.winner,
                "level": self.level,
                "comparisons": {
                    label: {"ratio": r.interval.ratio, "low": r.interval.low,
                            "high": r.interval.high, "method": r.interval.method,
                            "transactions": list(r.transactions), "slices": r.slices,
                            "slice_s": r.slice_s,
                            "system_wide_knobs": list(self.system_wide.get(label, ()))}
                    for label, r in self.comparisons.items()}}


def race_per_transaction(obs: Observations, labels: Sequence[str],
                         settings: Sequence[Mapping[str, str]], *, level: float = 0.95,
                         seed: int = 0) -> PerTransactionRace:
    """Configuration 0 (``labels[0]``) is the reference; every other one a candidate."""
    if len(labels) != len(settings) or len(labels) < 2:
        raise ConfigError(f"a race needs a reference and at least one candidate, with one label "
                          f"per configuration, but got {len(labels)} labels and "
                          f"{len(settings)} configurations")
    m = len(labels) - 1
    simultaneous = simultaneous_level(level, m)
    comparisons = {labels[k]: compare(obs, 0, k, level=simultaneous, seed=seed + k)
                   for k in range(1, len(labels))}
    plain = {labels[k]: compare(obs, 0, k, level=level, seed=seed + k)
             for k in range(1, len(labels))}
    system_wide = {labels[k]: tuple(sorted(
        name for name in set(settings[k]) | set(settings[0])
        if name in SYSTEM_WIDE_KNOBS and settings[k].get(name) != settings[0].get(name)))
        for k in range(1, len(labels))}
    clear = [label for label, r in comparisons.items() if r.interval.above_one]
    winner = max(clear, key=lambda label: comparisons[label].interval.ratio, default=None)
    return PerTransactionRace(labels[0], comparisons, winner, simultaneous, system_wide, plain,
                              level)
