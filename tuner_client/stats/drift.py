"""Drift of the reference arm (issue 51, item 5): whether the original's own level moves
during a race beyond what its noise explains (a table growing under inserts, a cache
filling), and by how much.

**Statistic.** Every race design measures the reference again and again over time (a duet's
batches, a switchback's slices, the windows' rounds). Its log level ``y`` at each time ``t``
(minutes) is regressed on time, ``y = a_g + b·t + e``, with one intercept per group where the
reference ran on more than one cluster (a duet's server and clone: the clone's fixed
asymmetry is not a drift). The slope ``b`` is the drift, a ratio ``exp(b)`` per minute and
``exp(b·T)`` over the ``T`` minutes the race spanned.

**Noise.** What the reference's noise explains is its short-term variation: how much one
observation differs from the next within a run of them (a duet's batches of one segment, a
switchback's slices, the windows' rounds), the mean squared successive difference (von
Neumann et al., "The distribution of the ratio of the mean square successive difference to
the variance", Annals of Mathematical Statistics 1941), each difference less the slope's share
of it: ``σ² = Σ (Δy − b·Δt)² / (2m)`` over the ``m`` differences. Unlike the residuals about a
straight line it is not inflated by a curved trend (a cache filling, a table growing: a
level falling from 24 to 6 transactions a second in 45 s read as AR(1) noise of ρ 0.95 to a
Prais–Winsten fit and as "no drift"). The slope's standard error is ``σ √((XᵀX)⁻¹)₁₁`` and
its interval uses a t quantile on ``m`` degrees of freedom. A level that wanders slowly
(the machine's load changing over minutes) moves beyond this noise too, and is said as a
drift: it is one, of the states the race measured in. Observations are batch means (5 s in
a duet), so the seconds' own autocorrelation stays inside a batch.

**Level.** :data:`LEVEL` (99 %): a run holds several races and each says its drift, so a
steady reference should almost never read as moving. The reference *moved* when the
interval of its change over the race excludes every change smaller than :data:`MATERIAL`
(5 %): a steady lookup read 0.957× (0.939–0.975) and 0.977× (0.956–0.999) over 19 s of a
per-transaction race on a machine whose load moved, beyond its noise and of no consequence
to the race's interval; a table growing under the race read 0.31×.

**What the race's interval then holds for.** Where the reference and the candidate run at
the same moments (a duet's clusters, a switchback's block of adjacent slices), a drift both
arms share cancels in each pair and the interval holds for the average of the states the
race saw. Where they run minutes apart (windows) the drift between one's window and the
other's enters each ratio; the alternating order cancels a linear drift only on average,
so the callers say it biases the comparison.

Pure: numpy and scipy; the callers pass times and levels.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from harmony_base.errors import ConfigError

#: the level of the drift's interval (see the module)
LEVEL = 0.99
#: fewest observations of the reference for a drift
MIN_OBSERVATIONS = 6
#: the least change of the reference's level over a race that is said as a drift
MATERIAL = 0.05
METHOD_TEXT = ("least-squares slope of the reference's log level on time against its "
               "short-term noise (mean squared successive difference)")


@dataclass(frozen=True)
class Drift:
    """The reference's drift over a race: ``per_minute`` (ratio per minute) and ``over``
    (ratio over the ``minutes`` spanned, last observation against first), each with its
    ``level`` interval; ``n`` observations (``unit``: batches, slices, rounds)."""

    per_minute: float
    per_minute_low: float
    per_minute_high: float
    over: float
    over_low: float
    over_high: float
    minutes: float
    n: int
    unit: str
    level: float = LEVEL

    @property
    def moved(self) -> bool:
        """The level moved beyond its noise and by more than :data:`MATERIAL` over the race:
        the interval of its change excludes every smaller change."""
        return self.over_low > 1.0 + MATERIAL or self.over_high < 1.0 / (1.0 + MATERIAL)

    def text(self) -> str:
        """``1.31× over the race's 3.9 min (99 % CI 1.18–1.45), 1.07× per minute, from 40
        batches``."""
        return (f"{self.over:.3g}× over the race's {self.minutes:.2g} min "
                f"({100 * self.level:.3g} % CI {self.over_low:.3g}–{self.over_high:.3g}), "
                f"{self.per_minute:.3g}× per minute, from {self.n} {self.unit}")


def reference_drift(times_s: Sequence[float], levels: Sequence[float | None], *,
                    groups: Sequence[Hashable] | None = None,
                    runs: Sequence[Hashable] | None = None, unit: str = "observations",
                    level: float = LEVEL) -> Drift | None:
    """The drift of a reference whose level was ``levels[i]`` (a count per second, > 0) at
    ``times_s[i]`` (seconds on one clock); ``groups``: where the reference ran (one intercept
    each); ``runs``: which observations follow each other without a break (a duet's segment;
    successive differences are taken within a run only; None: all one run). None with fewer
    than :data:`MIN_OBSERVATIONS` usable observations, fewer than 2 successive differences or
    no spread of time within a group."""
    if not 0.0 < level < 1.0:
        raise ConfigError(f"the drift's confidence level must be between 0 and 1, but got "
                          f"{level}")
    n_in = len(levels)
    if len(times_s) != n_in or any(k is not None and len(k) != n_in for k in (groups, runs)):
        raise ConfigError(f"a drift needs one time (and group and run) per level, but got "
                          f"{len(times_s)} times for {n_in} levels")
    group_of = list(groups) if groups is not None else [0] * n_in
    run_of = list(runs) if runs is not None else [0] * n_in
    rows = sorted((t, math.log(v), g, r) for t, v, g, r
                  in zip(times_s, levels, group_of, run_of, strict=True)
                  if v is not None and v > 0 and math.isfinite(v))
    if len(rows) < MIN_OBSERVATIONS:
        return None
    t = np.array([r[0] for r in rows]) / 60.0
    y = np.array([r[1] for r in rows])
    names = list(dict.fromkeys(r[2] for r in rows))
    x = np.column_stack([t - t.mean()] + [np.array([r[2] == g for r in rows], dtype=float)
                                          for g in names])
    if x.shape[0] - x.shape[1] < 2 or np.linalg.matrix_rank(x) < x.shape[1]:
        return None
    slope = float(np.linalg.lstsq(x, y, rcond=None)[0][0])
    steps = [(y[i + 1] - y[i]) - slope * (t[i + 1] - t[i]) for i in range(len(rows) - 1)
             if rows[i + 1][3] == rows[i][3] and rows[i + 1][2] == rows[i][2]]
    if len(steps) < 2:
        return None
    noise = float(np.sum(np.square(steps))) / (2 * len(steps))
    se = math.sqrt(noise * float(np.linalg.inv(x.T @ x)[0, 0]))
    half = float(sps.t.ppf(0.5 + level / 2, len(steps))) * se
    span = float(t[-1] - t[0])
    return Drift(math.exp(slope), math.exp(slope - half), math.exp(slope + half),
                 math.exp(slope * span), math.exp((slope - half) * span),
                 math.exp((slope + half) * span), span, len(rows), unit, level)
