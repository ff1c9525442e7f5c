"""Carry-over of a switchback: how long after a switch the previous configuration still shows.

A slice is only as good as its settled part. After ``ALTER SYSTEM`` + reload a backend takes
the new value at its next command, but state built under the previous configuration (cached
plans, the buffer cache, dirty pages the background writer has not caught up with, a WAL
writer's rhythm) may keep the old speed for a while. Measured with two configurations of
known, different speeds: each slice's observations are binned by the time since its switch,
each bin's work is priced at its own configuration's *steady* per-template cost (the second
half of that configuration's slices), and the bin's log of spent/priced time, signed towards
the previous configuration, is averaged over slices. A carry-over shows as early bins away
from 0: above (the slice still runs at the previous configuration's speed) or below (an
overshoot). The settle time is the end of the last unsettled bin in the first half of the
slice, a bin being unsettled when its mean over slices is both significantly away from 0
(Bonferroni over those bins, two-sided 95 %) and beyond ``tolerance`` of the configurations'
steady difference.

Pure: numpy only; the spans and observations come from :mod:`tuner_client.switchback`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from harmony_base.errors import ConfigError
from tuner_client.stats.switchback import SliceSpan, attribute

#: a bin counts as unsettled only when its deviation exceeds this share of the effect
TOLERANCE = 0.1


@dataclass(frozen=True)
class CarryOver:
    """The settle profile: per bin since the switch, the mean signed log deviation from the
    steady speed (positive: towards the previous configuration), its standard error and the
    slices behind it; ``effect`` the steady |log ratio| of the configurations."""

    bin_s: float
    profile: tuple[tuple[float, float, float, int], ...]
    effect: float
    settle_s: float

    def rows(self) -> list[str]:
        """One printable line per bin."""
        return [f"{t:6.2f} s: {100 * (math.exp(m) - 1):+6.1f} % ± {100 * 1.96 * se:.1f} % "
                f"({n} slices)" for t, m, se, n in self.profile]


def _steady_costs(spans: Sequence[SliceSpan], where: np.ndarray, start: np.ndarray,
                  latency: np.ndarray, template: np.ndarray, configs: int,
                  templates: int) -> np.ndarray:
    """Mean latency per (configuration, template) over the second half of each slice."""
    sums, counts = np.zeros((configs, templates)), np.zeros((configs, templates))
    keep = where >= 0
    begin = np.array([s.begin for s in spans])[where[keep]]
    end = np.array([s.end for s in spans])[where[keep]]
    late = start[keep] >= (begin + end) / 2
    config = np.array([s.config for s in spans])[where[keep]][late]
    np.add.at(sums, (config, template[keep][late]), latency[keep][late])
    np.add.at(counts, (config, template[keep][late]), 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)


def carry_over(spans: Sequence[SliceSpan], template: np.ndarray, start: np.ndarray,
               latency: np.ndarray, ok: np.ndarray, *, bin_s: float,
               tolerance: float = TOLERANCE) -> CarryOver:
    """The settle profile of a switchback run (transactions in the slice they started in,
    nothing settled away)."""
    if not bin_s > 0:
        raise ConfigError(f"bin_s must be > 0 seconds, but got {bin_s}")
    where, _, _ = attribute(spans, start, latency, ok, settle_s=0.0)
    configs = max(s.config for s in spans) + 1
    templates = int(template.max(initial=-1)) + 1
    cost = _steady_costs(spans, where, start, latency, template, configs, templates)
    # the steady speed of each configuration relative to configuration 0, on 0's work mix
    work = np.nan_to_num(cost[0])
    level = np.array([np.nansum(np.where(np.isnan(cost[k]), 0, cost[k]) * (work > 0))
                      / work.sum() for k in range(configs)])
    effect = float(np.max(np.abs(np.log(level / level[0])))) if (level > 0).all() else 0.0
    longest = max(s.end - s.begin for s in spans)
    bins = int(math.ceil(longest / bin_s))
    per_slice = np.full((len(spans), bins), np.nan)
    for i, span in enumerate(spans[1:], 1):
        previous = spans[i - 1].config
        if previous == span.config:
            continue  # no switch: the same configuration ran on
        mine = where == i
        rel_bin = np.floor((start[mine] - span.begin) / bin_s).astype(int)
        t = template[mine]
        spent = np.bincount(rel_bin, latency[mine], minlength=bins)
        priced = np.bincount(rel_bin, np.nan_to_num(cost[span.config, t]), minlength=bins)
        toward = math.copysign(1.0, math.log(level[previous] / level[span.config])) \
            if level[previous] != level[span.config] else 1.0
        with np.errstate(divide="ignore", invalid="ignore"):
            per_slice[i] = toward * np.log(spent / priced)
    per_slice[~np.isfinite(per_slice)] = np.nan
    profile = []
    for b in range(bins):
        col = per_slice[:, b][~np.isnan(per_slice[:, b])]
        if col.size >= 2:
            profile.append((b * bin_s, float(col.mean()),
                            float(col.std(ddof=1) / math.sqrt(col.size)), int(col.size)))
    # the first half of a slice is where a carry-over shows (the second half is the steady
    # reference); its bins are tested together (Bonferroni), in either direction: a switch may
    # also overshoot (fsync off→on: the first flushes pay for the WAL written under off)
    early = [row for row in profile if row[0] + bin_s <= longest / 2]
    z = float(stats.norm.ppf(1.0 - 0.025 / max(1, len(early))))
    unsettled = [t + bin_s for t, m, se, _ in early
                 if abs(m) > z * se and abs(m) > tolerance * effect]
    return CarryOver(bin_s, tuple(profile), effect, max(unsettled, default=0.0))
