"""Knob screening per transaction (issue 27): the rows of a Plackett–Burman design run as the
arms of one randomized per-transaction run (each transaction draws a row at random and runs
under its settings with ``SET LOCAL``), and each knob's main effect is the work-weighted
speedup of the transactions that ran with the knob at its high end over those that ran with it
at its low end: :func:`tuner_client.stats.per_transaction.compare` on the run with its arms
relabelled by the knob's column of the design.

**Why that is the main effect.** PB columns are orthogonal and balanced: within the rows where
knob j is high, every other column is high in exactly half, and so within those where it is
low. Pooling the high rows against the low rows therefore averages the other knobs' levels out
alike on both sides, as the windows design's regression coefficient does
(:mod:`tuner_client.stats.screening`), and is aliased with two-knob interactions the same way.

**What differs is the noise.** Every row shares every second of the machine's drift and every
co-tenant's burst, so no default is measured between runs, and each knob's comparison uses all
of the run's transactions, half on each side. The interval is :func:`compare`'s (block
bootstrap over time slices, degrees of freedom from the slices' kurtosis) at the two-sided
normal level of ``z`` (z = 2: 95.45 %); a knob clears the noise when that interval excludes 1.
Its ``se`` is the interval's log half-width over ``z``, so ``|log ratio| ≥ z · se`` says the
same. The other knobs' effects stay in the pooled arms' spread (a knob worth 1.3× widens the
others' intervals), which the bootstrap sees.

**The spare columns.** A PB design's unused columns split the rows into two balanced halves
in which every knob is high equally often: their "effects" carry only interactions and noise,
an A/A check read beside the knobs (``dummies``). Interactions are not what a screening
estimates; a spare column whose interval excludes 1 says the main-effects model is not the
whole story, and the decisions print it.

Pure: numpy only, on any object with the arrays of
:class:`~tuner_client.stats.per_transaction.Observations`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from harmony.base.errors import ConfigError
from tuner_client.stats.paired import RatioInterval
from tuner_client.stats.per_transaction import (
    DESIGN,
    RESAMPLES,
    Observations,
    PerTransactionComparison,
    compare,
)
from tuner_client.stats.screening import Z_DEFAULT, KnobEffect, KnobLevels, Screening


@dataclass(frozen=True)
class _Split:
    """A run's arrays with ``config`` replaced by one column's level (0 low, 1 high)."""

    config: np.ndarray
    template: np.ndarray
    start: np.ndarray
    latency: np.ndarray
    ok: np.ndarray


def level_of(z: float) -> float:
    """The two-sided normal level of ``z`` standard errors (2.0: 0.9545)."""
    return float(2.0 * sps.norm.cdf(z) - 1.0)


def column_comparison(obs: Observations, matrix: np.ndarray, column: int, *, level: float,
                      seed: int = 0, resamples: int = RESAMPLES) -> PerTransactionComparison:
    """The transactions of the rows where ``column`` of ``matrix`` is +1 against those where
    it is −1 (configuration ``i`` of ``obs`` is row ``i``): above 1, the high side is faster."""
    config = np.asarray(obs.config, dtype=int)
    if config.size and (config.min() < 0 or config.max() >= matrix.shape[0]):
        raise ConfigError(f"the run's configurations must be the design's {matrix.shape[0]} "
                          f"rows, but it has configuration {int(config.max())}")
    high = (matrix[config, column] > 0).astype(int)
    split = _Split(high, obs.template, obs.start, obs.latency, obs.ok)
    return compare(split, 0, 1, level=level, seed=seed, resamples=resamples)


def screen_trace(obs: Observations, knobs: Sequence[KnobLevels], matrix: np.ndarray, *,
                 z: float = Z_DEFAULT, seed: int = 0, resamples: int = RESAMPLES
                 ) -> tuple[Screening, tuple[RatioInterval, ...]]:
    """Each knob's main effect from a per-transaction run of ``matrix``'s rows (knob j is
    column j; the columns past the knobs are spare): the screening, largest effect first, and
    the spare columns' intervals (the A/A check)."""
    if z <= 0:
        raise ConfigError(f"screening needs z > 0, but got {z}")
    if not 0 < len(knobs) <= matrix.shape[1]:
        raise ConfigError(f"a design of {matrix.shape[1]} columns screens 1 to "
                          f"{matrix.shape[1]} knobs, but got {len(knobs)}")
    level = level_of(z)
    effects, spans = [], []
    for j, knob in enumerate(knobs):
        result = column_comparison(obs, matrix, j, level=level, seed=seed + j,
                                   resamples=resamples)
        effects.append(_effect(knob, result, z))
        spans.append(result)
    dummies = tuple(column_comparison(obs, matrix, j, level=level, seed=seed + j,
                                      resamples=resamples).interval
                    for j in range(len(knobs), matrix.shape[1]))
    effects.sort(key=lambda e: abs(math.log(e.ratio)), reverse=True)
    ses = [e.se for e in effects]
    screening = Screening(
        effects=tuple(effects), design="pb", design_runs=int(matrix.shape[0]), replicates=1,
        evaluations=int(matrix.shape[0]), noise_sd=math.sqrt(float(np.mean(np.square(ses)))),
        noise_df=min(r.slices for r in spans) - 1, z=z, threshold=z, measurements=(),
        measured=DESIGN, transactions=int(np.asarray(obs.ok).sum()))
    return screening, dummies


def _effect(knob: KnobLevels, result: PerTransactionComparison, z: float) -> KnobEffect:
    interval = result.interval
    se = result.half_width / z
    cleared = interval.low > 1.0 or interval.high < 1.0
    verdict = (f"clears the noise ({abs(math.log(interval.ratio)) / se:.1f} se ≥ {z:g})"
               if cleared else f"within the noise ({abs(math.log(interval.ratio)) / se:.1f} "
                               f"se < {z:g}); left as it is")
    return KnobEffect(knob=knob.name, ratio=interval.ratio, se=se, cleared=cleared,
                      reason=f"{interval.text()} from {knob.low} to {knob.high}, per "
                             f"transaction: "
                             f"{sum(result.transactions):,} transactions: {verdict}",
                      low=knob.low, high=knob.high)
