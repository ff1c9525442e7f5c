"""Knob screening: before searching, rank the configured knobs by their effect on throughput
against the noise, from a small two-level design, so the search spends its evaluations only
on knobs whose effect clears the noise.

Two designs: one-at-a-time at the ends (``oat``: each knob at its low and its high end, the
others at the default; 2k runs) and Plackett–Burman (``pb``: N runs for up to N − 1 knobs,
N = 8, 12, 16, 20 or 24, from the cyclic generator rows of Plackett and Burman, *The design
of optimum multifactorial experiments*, Biometrika 33, 1946; the unused columns are dummies
whose apparent effects measure the noise). A knob's main effect is the change in log
throughput from its low to its high end (a ratio once exponentiated); in a PB design it is
aliased with two-knob interactions, as every screening design's is.

The machine drifts by ±15 % over minutes, more than the effects sought, so the default point
is measured before the first run, after every ``default_every`` runs and after the last, and
every run is divided by the default's level interpolated (in log) between the measurements
around it: the effects are paired with the default as the racing and the final rounds are.
The noise of one corrected run is estimated from the design's spare degrees of freedom (PB
dummies, replicates) pooled with the spread of the default measurements about their own
interpolation; a knob clears the noise when ``|effect| ≥ t · se``, t being Student's quantile
for the estimate's degrees of freedom at the two-sided normal level of ``z`` (z = 2: 95.45 %;
t ≈ 2 only with many degrees of freedom, 3.3 with the 4 of one PB run of 6 knobs).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
from scipy import stats as sps

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSON, JSONObject
from tuner_client.stats.paired import t_quantile
from tuner_client.stats.screening_designs import Design, design_matrix

logger = logging.getLogger(__name__)

#: one measurement of a point (a full configuration): its value, higher is better; None or a
#: non-finite value is a failed measurement
MeasurePoint = Callable[[JSONObject], float | None]

#: the default threshold: an effect clears the noise at |effect| ≥ 2 standard errors
Z_DEFAULT = 2.0


@dataclass(frozen=True)
class KnobLevels:
    """A knob's two screening levels (any values the measure callback understands, e.g.
    ``"64MB"``/``"1GB"`` or ``"off"``/``"on"``)."""

    name: str
    low: Any
    high: Any


@dataclass(frozen=True)
class KnobEffect:
    """One knob's screened effect: ``ratio`` is throughput at ``high`` over throughput at
    ``low`` (others as the design sets them); ``se`` the standard error of its log (≈ a
    fraction); ``cleared`` whether ``|log ratio| ≥ threshold · se`` (see :func:`screen`);
    ``reason`` says so in words."""

    knob: str
    ratio: float
    se: float
    cleared: bool
    reason: str
    low: Any
    high: object

    @property
    def z_score(self) -> float:
        if self.se > 0:
            return abs(math.log(self.ratio)) / self.se
        return 0.0 if self.ratio == 1.0 else math.inf  # 0: nothing was moved

    def to_dict(self) -> JSONObject:
        return {"knob": self.knob, "ratio": self.ratio, "se": self.se, "cleared": self.cleared,
                "reason": self.reason, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class Screening:
    """A screening's ranking (largest effect first) and its evidence."""

    effects: tuple[KnobEffect, ...]
    design: Design
    design_runs: int
    replicates: int
    evaluations: int
    noise_sd: float
    noise_df: int
    z: float
    threshold: float
    measurements: tuple[tuple[str, JSONObject, float | None], ...]
    #: how the design was measured: ``windows`` (a throughput sample per run, the default
    #: between runs) or ``per-transaction`` (:mod:`tuner_client.stats.screening_per_transaction`)
    measured: str = "windows"
    #: the transactions a per-transaction screening compared (0 in windows)
    transactions: int = 0

    @property
    def cleared(self) -> list[str]:
        """Knobs whose effect clears the noise, largest first: the ones to search."""
        return [e.knob for e in self.effects if e.cleared]

    @property
    def held(self) -> list[str]:
        """Knobs left as they are: their effect is within the noise."""
        return [e.knob for e in self.effects if not e.cleared]

    def predicted_best(self, default: Mapping[str, JSON],
                       fits: Callable[[dict[str, Any]], str | None] | None = None,
                       ) -> tuple[dict[str, Any], dict[str, str]]:
        """The main-effects model's best point: each cleared knob at its better end (by the
        sign of its effect), every other knob as in ``default``. It pools all the design's
        runs, unlike any single design point (one short, unpaired sample).

        With ``fits`` (why a point breaks a constraint, or None) the moves are taken largest
        effect first and a move that breaks it is left out: a design's ranges share the memory
        budget beside each other's levels, so two knobs' better ends, or one beside a held
        knob's setting, may not fit together (a CI run's temp_buffers cleared at 8.5MB, a
        level the design ran beside work_mem 2.5MB, and work_mem was held at 4MB; the
        prediction broke the budget and was not raced). Returns the point and the moves left
        out, each with the reason."""
        point: dict[str, Any] = dict(default)
        left_out: dict[str, str] = {}
        # where ``default`` itself breaks it, no move is to blame: none is left out
        check = fits if fits is not None and fits(point) is None else None
        for effect in sorted(self.effects, key=lambda e: abs(math.log(e.ratio)), reverse=True):
            if not effect.cleared:
                continue
            moved = {**point, effect.knob: effect.high if effect.ratio > 1 else effect.low}
            reason = check(moved) if check is not None else None
            if reason is None:
                point = moved
            else:
                left_out[effect.knob] = reason
        return point, left_out

    def lines(self) -> list[str]:
        """The ranking in words, one knob a line."""
        return [f"{e.knob}: {e.reason}" for e in self.effects]

    def to_dict(self) -> JSONObject:
        return {"design": self.design, "design_runs": self.design_runs,
                "replicates": self.replicates, "evaluations": self.evaluations,
                "noise_sd": self.noise_sd, "noise_df": self.noise_df, "z": self.z,
                "threshold": self.threshold, "measured": self.measured,
                "transactions": self.transactions,
                "effects": [e.to_dict() for e in self.effects]}


def _usable(value: float | None) -> TypeGuard[float]:
    return value is not None and math.isfinite(value) and value > 0


def _interpolate(times: Sequence[float], logs: Sequence[float],
                 t: float) -> tuple[float, float]:
    """The log level at ``t`` between the default measurements around it, and the variance
    factor of that interpolation (w² + (1 − w)² for weights w, 1 − w; 1 outside the ends)."""
    if t <= times[0]:
        return logs[0], 1.0
    if t >= times[-1]:
        return logs[-1], 1.0
    k = int(np.searchsorted(times, t))
    t0, t1 = times[k - 1], times[k]
    w = (t1 - t) / (t1 - t0)
    return w * logs[k - 1] + (1 - w) * logs[k], w * w + (1 - w) * (1 - w)


def screen(knobs: Sequence[KnobLevels], default: Mapping[str, JSON], measure: MeasurePoint, *,
           design: Design = "pb", replicates: int = 1, default_every: int = 2,
           z: float = Z_DEFAULT, seed: int = 0) -> Screening:
    """Screen ``knobs`` around the ``default`` point (every configured knob's value) and rank
    them by effect over noise.

    The design's runs (``replicates`` times, each replicate in a fresh seeded random order)
    set the screened knobs to their low/high levels on top of ``default``; the default itself
    is measured around them every ``default_every`` runs. Evaluations: design runs ×
    replicates plus ⌈that / default_every⌉ + 1 defaults (PB, 6 knobs, once: 8 + 5 = 13).
    """
    _check_screen_inputs(knobs, default, replicates, default_every, z)
    matrix = design_matrix(design, len(knobs))
    rng = np.random.default_rng(seed)
    order = [int(i) for _ in range(replicates) for i in rng.permutation(len(matrix))]
    runs = _run_design(knobs, default, measure, matrix, order, default_every)
    fit = _fit_effects(runs, matrix, len(knobs), design, len(order))
    # z is read as a two-sided normal level (2.0: 95.45 %) and held at that level with the
    # few degrees of freedom the noise estimate has: Student's quantile, not z itself
    # (measured, PB of 6 knobs once, df 4: z itself passes an irrelevant knob in 12 %)
    threshold = t_quantile(float(sps.norm.cdf(z)), fit.df)
    effects = _rank_effects(knobs, fit, threshold)
    result = Screening(effects=tuple(effects), design=design, design_runs=len(matrix),
                       replicates=replicates, evaluations=len(runs.measurements),
                       noise_sd=math.sqrt(fit.var_run), noise_df=fit.df, z=z,
                       threshold=threshold, measurements=tuple(runs.measurements))
    for line in result.lines():
        logger.info("screening: %s", line)
    return result


def _check_screen_inputs(knobs: Sequence[KnobLevels], default: Mapping[str, JSON],
                         replicates: int, default_every: int, z: float) -> None:
    """Each knob once, with a default value; positive replicates, default_every and z."""
    names = [k.name for k in knobs]
    if len(set(names)) != len(names):
        raise ConfigError(f"each knob may be screened once, but got {names}")
    missing = [n for n in names if n not in default]
    if missing:
        raise ConfigError(f"the default point must give every screened knob's value, but "
                          f"lacks {missing}")
    if replicates < 1 or default_every < 1 or z <= 0:
        raise ConfigError(f"screening needs replicates ≥ 1, default_every ≥ 1 and z > 0, but "
                          f"got replicates {replicates}, default_every {default_every}, z {z}")


@dataclass
class _Runs:
    """What the design measured: every measurement in order, the default's log levels and
    the design runs' log values, each at its position ``t`` in the sequence."""

    measurements: list[tuple[str, JSONObject, float | None]]
    default_t: list[float]
    default_logs: list[float]
    run_t: list[float]
    run_rows: list[int]
    run_logs: list[float]


def _run_design(knobs: Sequence[KnobLevels], default: Mapping[str, JSON],
                measure: MeasurePoint, matrix: np.ndarray, order: list[int],
                default_every: int) -> _Runs:
    """Measure the design's rows in ``order``, the default before the first, after every
    ``default_every`` runs and after the last; failed measurements are left out."""
    k = len(knobs)
    runs = _Runs([], [], [], [], [], [])

    def point(row: np.ndarray) -> JSONObject:
        out = dict(default)
        for knob, x in zip(knobs, row[:k], strict=True):
            if x:
                out[knob.name] = knob.high if x > 0 else knob.low
        return out

    def take(label: str, p: JSONObject) -> float | None:
        value = measure(dict(p))
        kept = float(value) if _usable(value) else None
        runs.measurements.append((label, p, kept))
        if kept is None:
            logger.info("screening: %s failed (%s); left out", label, value)
        return kept

    def take_default(t: int) -> None:
        if (v := take("default", dict(default))) is not None:
            runs.default_t.append(t)
            runs.default_logs.append(math.log(v))

    t = 0
    take_default(t)
    for i, r in enumerate(order, 1):
        t += 1
        if (v := take(f"run {r + 1}", point(matrix[r]))) is not None:
            runs.run_t.append(t)
            runs.run_rows.append(r)
            runs.run_logs.append(math.log(v))
        if i % default_every == 0 or i == len(order):
            t += 1
            take_default(t)
    if len(runs.default_logs) < 2:
        raise ConfigError("screening needs at least two successful measurements of the default "
                          f"point to cancel the drift, but got {len(runs.default_logs)}")
    return runs


@dataclass(frozen=True)
class _Fit:
    """The regression of the drift-corrected runs on the design: coefficients, their
    covariance, the column of each knob's slope, one run's noise variance and its df."""

    coef: np.ndarray
    cov: np.ndarray
    slope: list[int]
    var_run: float
    df: int


def _fit_effects(runs: _Runs, matrix: np.ndarray, k: int, design: Design,
                 planned: int) -> _Fit:
    """Regress the runs, relative to the default's interpolated level, on the design and pool
    the residuals with the defaults' own spread into one run's noise variance."""
    # runs relative to the default's interpolated level; inflation = that level's own noise
    corrected, inflation = [], []
    for tr, lr in zip(runs.run_t, runs.run_logs, strict=True):
        level, factor = _interpolate(runs.default_t, runs.default_logs, tr)
        corrected.append(lr - level)
        inflation.append(1.0 + factor)
    # the design's columns for the regression: PB an intercept and the knobs; OAT per knob a
    # slope and its own offset (the default need not lie midway between the ends)
    rows = matrix[runs.run_rows, :k].astype(float)
    if design == "pb":
        x = np.column_stack([np.ones(len(rows)), rows])
        slope = list(range(1, k + 1))
    else:
        x = np.column_stack([c for j in range(k) for c in (rows[:, j], np.abs(rows[:, j]))])
        slope = [2 * j for j in range(k)]
    y = np.asarray(corrected)
    if len(y) < x.shape[1] or np.linalg.matrix_rank(x) < x.shape[1]:
        raise ConfigError(f"too many failed runs: {len(y)} of {planned} design runs "
                          "measured, too few to estimate every knob's effect")
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    df_design = len(y) - x.shape[1]
    rss = float(resid @ resid)
    sq_default = _default_spread(runs.default_t, runs.default_logs)
    mean_inflation = float(np.mean(inflation)) if inflation else 1.0
    df = df_design + len(sq_default)
    if df < 1:
        raise ConfigError("the screening has no degrees of freedom left to estimate the noise: "
                          "use more replicates, measure the default more often "
                          "(default_every), or a PB design with a spare column")
    # σ² of one corrected run, pooled; the defaults' σ² scaled by the correction's inflation
    var_run = (rss + mean_inflation * math.fsum(sq_default)) / df
    cov = var_run * np.linalg.inv(x.T @ x)
    return _Fit(coef=coef, cov=cov, slope=slope, var_run=var_run, df=df)


def _default_spread(default_t: Sequence[float], default_logs: Sequence[float]) -> list[float]:
    """Each inner default's squared distance from its neighbours' interpolation, scaled to one
    measurement's variance (the distance's is σ²·(1 + w² + (1 − w)²))."""
    sq_default = []
    for j in range(1, len(default_t) - 1):
        level, factor = _interpolate([default_t[j - 1], default_t[j + 1]],
                                     [default_logs[j - 1], default_logs[j + 1]], default_t[j])
        sq_default.append((default_logs[j] - level) ** 2 / (1.0 + factor))
    return sq_default


def _rank_effects(knobs: Sequence[KnobLevels], fit: _Fit, threshold: float) -> list[KnobEffect]:
    """Each knob's low-to-high effect with its standard error and verdict, largest first."""
    effects = []
    for j, knob in enumerate(knobs):
        col = fit.slope[j]
        log_effect = 2.0 * float(fit.coef[col])
        se = 2.0 * math.sqrt(float(fit.cov[col, col]))
        cleared = abs(log_effect) >= threshold * se
        ratio = math.exp(log_effect)
        verdict = (f"clears the noise ({abs(log_effect) / se:.1f} se ≥ {threshold:.2f})"
                   if cleared else f"within the noise ({abs(log_effect) / se:.1f} se < "
                                   f"{threshold:.2f}); left as it is")
        effects.append(KnobEffect(
            knob=knob.name, ratio=ratio, se=se, cleared=cleared,
            reason=f"{ratio:.2f}× from {knob.low} to {knob.high} (se {100 * se:.1f} %): "
                   f"{verdict}", low=knob.low, high=knob.high))
    effects.sort(key=lambda e: abs(math.log(e.ratio)), reverse=True)
    return effects
