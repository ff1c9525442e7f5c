"""Knob screening per transaction (issue 27): does moving a knob away from the setting in
force, toward either end of its range, gain throughput? Two Plackett–Burman designs share one
randomized per-transaction run (each transaction draws one of their rows at random and runs
under its settings with ``SET LOCAL``): in the *up* design a knob's −1 level is the setting in
force and its +1 level the high end of its range, in the *down* design the low end. A knob's
effect in a direction is the work-weighted speedup of the transactions whose row moved it
over those whose row left it in force, among that design's rows:
:func:`tuner_client.stats.per_transaction.compare` on the run with its arms relabelled by the
knob's column (:func:`column_comparison`).

**Why from the setting in force, not between the ends.** A tuner searches a knob because
moving it might gain. Between the ends, random_page_cost 0.1 → 30 read 1.18× (1.12–1.25) on the
one-pass mix because 0.1 is far worse than the default 4, not because anything beats 4: 30
itself read 0.86× the default in the search that followed, and the search spent its budget
there. From the setting in force the same question reads "down: a loss; up: no gain", and
the knob is held. A knob *clears* when one direction's interval lies wholly above 1 (a gain);
a clear loss in both directions, or no effect, holds it. The design's predicted best moves
each cleared knob to its gaining end.

**Why the effects are main effects.** PB columns are orthogonal and balanced: within the rows
where knob j moved, every other column moved in exactly half, and so within those where it
did not. Pooling one side against the other averages the other knobs' moves out alike on
both sides, and aliases the effect with two-knob interactions, as every screening design's
is.

**What pooling buys.** Every row shares every second of the machine's drift and every
co-tenant's burst, so no reference is measured between runs, and each direction's comparison
uses the transactions of half the run (its design's rows), half on each side. The interval
is :func:`compare`'s (block bootstrap over time slices, degrees of freedom from the slices'
kurtosis) at the two-sided normal level of ``z`` (z = 2: 95.45 %); ``se`` is its log
half-width over ``z``. The other knobs' effects stay in the pooled sides' spread, which the
bootstrap sees.

**The spare columns.** A PB design's unused columns split its rows into two balanced halves
in which every knob moved equally often: their "effects" carry only interactions and noise,
an A/A check the decisions print beside the knobs.

Pure: numpy only, on any object with the arrays of
:class:`~tuner_client.stats.per_transaction.Observations`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSON
from tuner_client.stats.paired import RatioInterval
from tuner_client.stats.per_transaction import (
    DESIGN,
    RESAMPLES,
    Observations,
    PerTransactionComparison,
    compare,
    estimand_of,
)
from tuner_client.stats.screening import Z_DEFAULT, KnobEffect, KnobLevels, Screening


@dataclass(frozen=True)
class _Split:
    """A run's arrays with ``config`` replaced by one column's level (0: −1, 1: +1) and the
    transactions of other rows marked as not counted (``ok`` False)."""

    config: np.ndarray
    template: np.ndarray
    start: np.ndarray
    latency: np.ndarray
    ok: np.ndarray


def level_of(z: float) -> float:
    """The two-sided normal level of ``z`` standard errors (2.0: 0.9545)."""
    return float(2.0 * sps.norm.cdf(z) - 1.0)


def column_comparison(obs: Observations, matrix: np.ndarray, column: int, *, level: float,
                      offset: int = 0, seed: int = 0, resamples: int = RESAMPLES
                      ) -> PerTransactionComparison:
    """Among configurations ``offset`` … ``offset + N − 1`` of ``obs`` (the N rows of
    ``matrix``, in order), the transactions of the rows where ``column`` is +1 against those
    where it is −1; other configurations' transactions are left out. Above 1: the +1 side is
    faster."""
    config = np.asarray(obs.config, dtype=int)
    rows = config - offset
    inside = (rows >= 0) & (rows < matrix.shape[0])
    side = (matrix[np.where(inside, rows, 0), column] > 0).astype(int)
    split = _Split(side, obs.template, obs.start, obs.latency, np.asarray(obs.ok) & inside)
    return compare(split, 0, 1, level=level, seed=seed, resamples=resamples,
                   estimand=estimand_of(obs))


@dataclass(frozen=True)
class Direction:
    """One knob's move from its setting in force to one end of its range: the speedup of the
    rows that moved it over those that left it (above 1: a gain), None where the end is the
    setting in force (nothing to move)."""

    to: Any
    result: PerTransactionComparison | None

    @property
    def gains(self) -> bool:
        return self.result is not None and self.result.interval.low > 1.0

    def text(self) -> str:
        if self.result is None:
            return f"{self.to} is the setting in force"
        return f"to {self.to} {self.result.interval.text()}"


def design_rows(knobs: Sequence[KnobLevels], default: Mapping[str, JSON],
                matrix: np.ndarray) -> list[dict[str, Any]]:
    """The run's configurations: the up design's N rows (knob j at its high level where column
    j is +1, else at ``default``), then the down design's N rows (its low level)."""
    return [{**default, **{k.name: (k.high if up else k.low) if row[j] > 0 else default[k.name]
                           for j, k in enumerate(knobs)}}
            for up in (True, False) for row in matrix]


def screen_from_default(obs: Observations, knobs: Sequence[KnobLevels],
                        default: Mapping[str, JSON], matrix: np.ndarray, *,
                        z: float = Z_DEFAULT, seed: int = 0, resamples: int = RESAMPLES
                        ) -> tuple[Screening, tuple[RatioInterval, ...]]:
    """Each knob's moves from ``default`` toward both ends, from a run of
    :func:`design_rows` (configurations 0 … 2N − 1): the screening, largest gain first, and the
    spare columns' intervals of both designs (the A/A check)."""
    if z <= 0:
        raise ConfigError(f"screening needs z > 0, but got {z}")
    if not 0 < len(knobs) <= matrix.shape[1]:
        raise ConfigError(f"a design of {matrix.shape[1]} columns screens 1 to "
                          f"{matrix.shape[1]} knobs, but got {len(knobs)}")
    missing = [k.name for k in knobs if k.name not in default]
    if missing:
        raise ConfigError(f"the setting in force of every screened knob is needed, but "
                          f"{missing} have none")
    n = matrix.shape[0]
    top = int(np.asarray(obs.config).max(initial=-1))
    if top >= 2 * n:
        raise ConfigError(f"the run's configurations must be the two designs' {2 * n} rows, "
                          f"but it has configuration {top}")
    level = level_of(z)

    def compared(j: int, offset: int, i: int) -> PerTransactionComparison:
        return column_comparison(obs, matrix, j, level=level, offset=offset,
                                 seed=seed + 2 * i + (offset > 0), resamples=resamples)

    effects, slices = [], []
    for j, knob in enumerate(knobs):
        up = Direction(knob.high, None if knob.high == default[knob.name] else compared(j, 0, j))
        down = Direction(knob.low, None if knob.low == default[knob.name]
                         else compared(j, n, j))
        effects.append(_effect(knob, default[knob.name], up, down, z))
        slices += [d.result.slices for d in (up, down) if d.result is not None]
    spare = tuple(compared(j, offset, j).interval
                  for offset in (0, n) for j in range(len(knobs), matrix.shape[1]))
    effects.sort(key=lambda e: (e.cleared, abs(math.log(e.ratio))), reverse=True)
    ses = [e.se for e in effects if e.se > 0]
    screening = Screening(
        effects=tuple(effects), design="pb", design_runs=2 * n, replicates=1,
        evaluations=2 * n, noise_sd=math.sqrt(float(np.mean(np.square(ses)))) if ses else 0.0,
        noise_df=min(slices, default=1) - 1, z=z, threshold=z, measurements=(),
        measured=DESIGN, transactions=int(np.asarray(obs.ok).sum()))
    return screening, spare


def _effect(knob: KnobLevels, in_force: object, up: Direction, down: Direction,
            z: float) -> KnobEffect:
    """The knob's verdict: its best direction (a gain where one clears), as a
    :class:`KnobEffect` from the setting in force (``low``) to that end (``high``)."""
    moves = [d for d in (up, down) if d.result is not None]
    best = max(moves, key=lambda d: (d.gains, d.result.interval.ratio if d.result else 0.0),
               default=None)
    if best is None or best.result is None:
        return KnobEffect(knob=knob.name, ratio=1.0, se=0.0, cleared=False,
                          reason=f"both ends are the setting in force {in_force}; left as it "
                                 f"is", low=in_force, high=in_force)
    interval = best.result.interval
    verdict = (f"moving it to {best.to} gains; searched" if best.gains else
               f"no move from {in_force} gains (none has an interval wholly above 1); left as "
               f"it is")
    return KnobEffect(
        knob=knob.name, ratio=interval.ratio, se=best.result.half_width / z,
        cleared=best.gains,
        reason=f"from {in_force} {_way(up, in_force, 'up')} {up.text()}, "
               f"{_way(down, in_force, 'down')} {down.text()}, per transaction "
               f"({sum(best.result.transactions):,} transactions a direction): {verdict}",
        low=in_force, high=best.to)


def _way(move: Direction, in_force: object, way: str) -> str:
    """``way`` (the end's side of the range), or the other word where the setting in force
    lies beyond that end (outside the configured range: both ends are then one way)."""
    try:
        if move.result is not None and (move.to > in_force) != (way == "up"):
            return "up" if way == "down" else "down"
    except TypeError:  # an enumeration's values have no order
        pass
    return way
