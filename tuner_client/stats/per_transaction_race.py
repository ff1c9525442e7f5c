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

The reference's own level over the run's time slices (:func:`reference_drift_of`) is its
drift (issue 51, item 5; :mod:`tuner_client.stats.drift`): the quantity the ratio is computed
on, the reference's mix at each slice's per-template mean latencies against its whole run's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSONObject
from tuner_client.knobs.sides import SYSTEM_WIDE_KNOBS
from tuner_client.stats.drift import Drift, reference_drift
from tuner_client.stats.estimand import COUNTS, Estimand
from tuner_client.stats.levels import simultaneous_level
from tuner_client.stats.paired import Method
from tuner_client.stats.per_transaction import (
    DESIGN,
    Observations,
    PerTransactionComparison,
    _slice_sums,
    compare,
    estimand_of,
)
from tuner_client.stats.race_outcome import DesignRace

#: the interval method, as summary.json names it
METHOD_TEXT = ("block bootstrap over time slices (Student multiplier on the degrees of "
               "freedom the slices' kurtosis leaves), per-template mean latencies combined "
               "into the workload's count (tuner_client.stats.estimand)")


@dataclass(frozen=True)
class PerTransactionRace(DesignRace[PerTransactionComparison]):
    """Every candidate against the reference from one per-transaction run."""

    design: ClassVar[str] = DESIGN
    design_words: ClassVar[str] = "per transaction"
    method: ClassVar[Method] = "bootstrap"
    method_text: ClassVar[str] = METHOD_TEXT
    unit: ClassVar[str | None] = "slice"
    trace_note: ClassVar[str | None] = (
        "running interval: the confidence sequence over the run's time slices; the decision: "
        "the block bootstrap at the run's end")

    #: per candidate: the knobs whose system-wide side this design does not see
    system_wide: Mapping[str, tuple[str, ...]]
    #: the reference's own level over the run's time slices (None: too few slices)
    drift: Drift | None = None

    def design_line(self) -> str:
        return (f"final race measured {DESIGN}: every transaction drew one of "
                f"{len(self.comparisons) + 1} configurations at random (SET LOCAL); "
                f"the ratio counts {self.counts()}; intervals: block bootstrap over "
                f"time slices (kurtosis-adjusted Student multiplier) at "
                f"{100 * self.level:.4g} % (Bonferroni over {len(self.comparisons)} "
                f"candidates)")

    def comparison_lines(self, label: str, comparison: PerTransactionComparison) -> list[str]:
        lines = super().comparison_lines(label, comparison)
        if self.system_wide.get(label):
            lines.append(f"{label} changes {', '.join(self.system_wide[label])}, whose "
                         f"system-wide side a per-transaction comparison does not see; "
                         f"confirm it with whole-server windows")
        return lines

    def observations(self, comparison: PerTransactionComparison) -> int:
        return comparison.slices

    def counts(self) -> str:
        """What the ratios count (the client model of the run)."""
        return "; ".join(COUNTS[m] for m in sorted({c.estimand
                                                    for c in self.comparisons.values()}))

    def transactions(self) -> Mapping[str, tuple[int, int]]:
        return {label: r.transactions for label, r in self.comparisons.items()}

    def running_logs(self, comparison: PerTransactionComparison) -> Sequence[float]:
        """The slices' log speedups: the trace's running sequence over them (the decision's
        interval is the block bootstrap at the run's end, a length fixed in advance, not
        this sequence's last step, which is wider: it holds at every slice)."""
        return comparison.slice_logs

    def comparison_fields(self, label: str, comparison: PerTransactionComparison
                          ) -> JSONObject:
        return {"method": comparison.interval.method,
                "transactions": list(comparison.transactions), "slices": comparison.slices,
                "slice_s": comparison.slice_s,
                "system_wide_knobs": list(self.system_wide.get(label, ()))}


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
    slice_s = next(iter(plain.values())).slice_s
    return PerTransactionRace(reference=labels[0], comparisons=comparisons, plain=plain,
                              winner=winner, level=simultaneous, plain_level=level,
                              system_wide=system_wide, drift=reference_drift_of(obs, slice_s))


def reference_drift_of(obs: Observations, slice_s: float, reference: int = 0,
                       estimand: Estimand | None = None) -> Drift | None:
    """The reference's drift over the run's slices of ``slice_s`` (the comparisons' own;
    :mod:`tuner_client.stats.drift`, its noise from successive slices). Its level in a slice
    is what the ratio is computed on with that slice's transactions of the reference in the
    candidate's place: the reference's mix at the slice's per-template mean latencies, as
    the workload's client counts it (``estimand``, default the trace's), relative to the
    whole run's; so a slice that drew more of a slow template is not a slower slice. At
    the slice's middle; a slice without a reference transaction is left out.

    The run's wrapper (``BEGIN; SET LOCAL ...; END``), which the ratio subtracts as one cost
    measured over the whole run, stays in: it slows and speeds with the machine as the body
    does, and one fixed cost taken from every slice magnifies the slices' changes (a
    read-only lookup of 0.1 ms under a wrapper of 0.08 ms, beside other work on 2 cores, read
    151× over 20 s with it subtracted and 9.9× without)."""
    estimand = estimand if estimand is not None else estimand_of(obs)
    # the slices are cut from the run's first transaction, whatever the other arm is
    sums, counts = _slice_sums(obs, (reference, 1 if reference == 0 else 0), slice_s,
                               wrapper=True)
    own_s, own_n = sums[..., 0], counts[..., 0]
    whole_s = np.broadcast_to(own_s.sum(axis=0), own_s.shape)
    whole_n = np.broadcast_to(own_n.sum(axis=0), own_n.shape)
    latency = estimand.latency_ratio(np.stack([whole_s, own_s], axis=-1),
                                     np.stack([whole_n, own_n], axis=-1))
    with np.errstate(divide="ignore", invalid="ignore"):
        speed = np.where(latency > 0, 1.0 / latency, np.nan)
    middles = float(obs.start.min()) + (np.arange(speed.size) + 0.5) * slice_s
    return reference_drift(middles.tolist(), speed.tolist(), unit="slices")
