"""Fair reclamation: take Δ pages from k pools (Δ < 0 gives pages back) so that every pool
ends with (about) the same P_i/P_i*, from the pools' fitted curves.

The background's formula: Δ_i = (M_i + Mb_i) − β_i·(Σ_r (M_r + Mb_r) − Δ) with
β_i = (Pc_i/P_i* + 1)(M_i* + Mb_i) / Σ_r (Pc_r/P_r* + 1)(M_r* + Mb_r); new size M_i − Δ_i.
It equalises P_i/P_i* where the curves are in their hyperbolic part (H ≫ 2). ``exact=True``
instead solves the equation for one common ratio ρ = P_i/P_i* (a 1-D root find).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from bme.equation import BMEParams, miss_probability
from harmony_base.errors import ConfigError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reclamation:
    """Pages taken from each pool (``deltas``, Σ = Δ), the new ``sizes`` and P_i/P_i* after."""

    deltas: list[float]
    sizes: list[float]
    ratios: list[float]

    def to_dict(self) -> dict[str, list[float]]:
        return {"deltas": self.deltas, "sizes": self.sizes, "ratios": self.ratios}


def beta_shares(params: Sequence[BMEParams]) -> list[float]:
    """β_i: each pool's share of the shifted memory Σ (M_r + Mb_r) after reclamation."""
    weights = []
    for i, p in enumerate(params):
        if p.p_star <= 0:
            raise ConfigError(f"pool {i}: fair reclamation needs P* > 0 (it equalises P/P*), "
                              f"got P* = {p.p_star:g}")
        weights.append((p.p_c / p.p_star + 1.0) * (p.m_star + p.m_b))
    total = sum(weights)
    return [x / total for x in weights]


def fair_reclaim(params: Sequence[BMEParams], sizes: Sequence[float], delta: float, *,
                 exact: bool = False, integral: bool = False) -> Reclamation:
    """The Δ_i taking ``delta`` pages in all from pools of ``sizes`` so P_i/P_i* is equal.

    ``integral`` rounds to whole pages keeping Σ Δ_i = Δ (Δ and sizes must then be whole).
    Raises :class:`ConfigError` when a pool would end below 0 pages or the inputs mismatch.
    """
    k = len(params)
    if k == 0 or len(sizes) != k:
        raise ConfigError(f"got {k} parameter sets and {len(sizes)} sizes; give one size per pool")
    m = [float(x) for x in sizes]
    if any(not math.isfinite(x) or x < 0 for x in m):
        raise ConfigError(f"pool sizes must be finite and >= 0, got {list(sizes)}")
    if not math.isfinite(delta):
        raise ConfigError(f"delta must be a finite number of pages, got {delta!r}")
    target = sum(m) - delta
    if target < 0:
        raise ConfigError(f"cannot reclaim {delta:g} pages: the pools hold only {sum(m):g}")
    beta = beta_shares(params)
    if exact:
        new = _equal_ratio_sizes(params, target, beta)
    else:
        shifted_total = sum(m[i] + params[i].m_b for i in range(k)) - delta
        new = [beta[i] * shifted_total - params[i].m_b for i in range(k)]
    if integral:
        if any(not float(x).is_integer() for x in [*m, delta]):
            raise ConfigError("integral reclamation needs whole-page sizes and delta")
        new = [float(x) for x in round_preserving_sum(new, int(round(target)))]
    for i, x in enumerate(new):
        if x < -1e-9:
            raise ConfigError(
                f"reclaiming {delta:g} pages fairly would leave pool {i} with {x:.1f} pages "
                f"(below 0); reclaim less")
    new = [max(0.0, x) for x in new]
    deltas = [m[i] - new[i] for i in range(k)]
    ratios = [float(miss_probability(params[i], new[i])) / params[i].p_star for i in range(k)]
    return Reclamation(deltas=deltas, sizes=new, ratios=ratios)


def _size_at_ratio(p: BMEParams, rho: float) -> float:
    """The size at which P = ρ·P* (ρ >= 1), from the closed-form inverse (may be < 0)."""
    r = (rho * p.p_star + p.p_c) / (p.p_star + p.p_c)
    return r / (r * r - r + 1.0) * (p.m_star + p.m_b) - p.m_b


def _equal_ratio_sizes(params: Sequence[BMEParams], target: float,
                       beta: list[float]) -> list[float]:
    """Sizes summing to ``target`` with one common P_i/P_i* (pages past every knee by β)."""
    knees = [p.m_star for p in params]
    if target >= sum(knees):
        spare = target - sum(knees)
        return [knees[i] + beta[i] * spare for i in range(len(params))]

    def excess(log_rho: float) -> float:
        rho = math.exp(log_rho)
        return sum(_size_at_ratio(p, rho) for p in params) - target

    hi = 1.0
    while excess(hi) > 0:
        hi *= 2.0
        if hi > 700:
            raise ConfigError(f"no common miss ratio fits the pools into {target:g} pages")
    log_rho = brentq(excess, 0.0, hi, xtol=1e-14, rtol=1e-14, maxiter=500)
    sizes = [_size_at_ratio(p, math.exp(log_rho)) for p in params]
    fix = target - sum(sizes)          # remove the root finder's last rounding
    return [s + fix * beta[i] for i, s in enumerate(sizes)]


def round_preserving_sum(values: Sequence[float], total: int) -> list[int]:
    """Round to integers summing to ``total`` (largest remainders get the spare units)."""
    floors = [math.floor(v) for v in values]
    spare = total - sum(floors)
    order = np.argsort([-(v - f) for v, f in zip(values, floors, strict=True)], kind="stable")
    if spare >= 0:
        for i in order[:spare]:
            floors[int(i)] += 1
    else:
        for i in order[::-1][:-spare]:
            floors[int(i)] -= 1
    return floors
