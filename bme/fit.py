"""Fitting the Buffer Miss Equation to measured (size, miss) points by least squares.

The fit separates the parameters: for fixed shape (Mb, M*) the curve is linear in P* and
c = P* + Pc (P = P* + c·(G(H) − 1)), so those two are solved in closed form on a log-spaced
grid of shapes; the best grid shapes then start a bounded ``scipy.optimize.least_squares``
polish of all parameters in log space. With P* unknown it is searched together with the rest.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import least_squares

from bme.equation import BMEParams, miss_probability, miss_slope
from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSONObject

__all__ = ["BMEFit", "BMEParams", "fit_bme", "fit_bme_counts", "miss_probability", "miss_slope"]

logger = logging.getLogger(__name__)

#: smallest allowed c = P* + Pc (normalised units): keeps the curve strictly falling
_C_MIN = 1e-12
#: grid of (M + Mb) offsets at the smallest size and of M* (both relative to the largest size)
_OFFSET_GRID = np.logspace(-5.0, 3.0, 33)
_MSTAR_DECADES = 4.0
_N_MSTAR = 41
#: how many of the best grid shapes are polished
_N_STARTS = 6
#: relative weighting divides residuals by max(value, this fraction of the largest value)
_RELATIVE_FLOOR = 1e-3
#: points within this fraction above the minimum value count as the plateau
_PLATEAU_TOL = 0.05


@dataclass(frozen=True)
class BMEFit:
    """A fitted curve with its goodness of fit; ``counts`` marks the count form (P* in misses)."""

    params: BMEParams
    r2: float
    n_points: int
    rmse: float
    p_star_given: bool
    plateau: bool
    counts: bool = False

    def predict(self, m: ArrayLike) -> NDArray[np.float64] | float:
        """The fitted curve at size(s) ``m`` (forward or backward of the data)."""
        return miss_probability(self.params, m)

    def to_dict(self) -> JSONObject:
        """The four parameters plus r2, n_points, rmse and how the fit was made."""
        return {**self.params.to_dict(), "r2": self.r2, "n_points": self.n_points,
                "rmse": self.rmse, "p_star_given": self.p_star_given, "plateau": self.plateau,
                "counts": self.counts}


def fit_bme(sizes: ArrayLike, misses: ArrayLike, *, p_star: float | None = None,
            plateau: bool | None = None, weighting: str = "relative") -> BMEFit:
    """Fit P(M) to miss probabilities; ``p_star`` fixes the floor (searched when ``None``).

    M* is kept at or beyond the largest size unless the data plateau (auto-detected when
    ``plateau`` is ``None``). ``weighting="relative"`` (default) minimises relative errors,
    so the small miss rates near the knee count as much as the large ones at small sizes;
    ``"absolute"`` is plain least squares. Raises :class:`ConfigError` for negative sizes,
    probabilities outside [0, 1], or fewer than 3 distinct sizes among the finite points.
    """
    m, y = _usable_points(sizes, misses, what="miss probability", upper=1.0)
    if p_star is not None and not (math.isfinite(p_star) and 0.0 <= p_star <= 1.0):
        raise ConfigError(f"p_star must be a probability in [0, 1], got {p_star!r}")
    return _fit(m, y, p_star, plateau, weighting, counts=False)


def fit_bme_counts(sizes: ArrayLike, n_miss: ArrayLike, *, n_star: float | None = None,
                   plateau: bool | None = None, weighting: str = "relative") -> BMEFit:
    """Fit the count form n_miss(M) (reference count unknown: only reads are visible).

    The result's parameters are in miss counts: ``p_star`` is n* (cold misses), ``p_c`` is n_c.
    """
    m, y = _usable_points(sizes, n_miss, what="miss count", upper=None)
    if n_star is not None and not (math.isfinite(n_star) and n_star >= 0.0):
        raise ConfigError(f"n_star must be a count >= 0, got {n_star!r}")
    return _fit(m, y, n_star, plateau, weighting, counts=True)


# -- input checks ------------------------------------------------------------------------

def _usable_points(sizes: ArrayLike, values: ArrayLike, *, what: str,
                   upper: float | None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    try:
        m = np.asarray(sizes, dtype=float).ravel()
        y = np.asarray(values, dtype=float).ravel()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"sizes and {what} values must be numbers: {exc}") from None
    if m.shape != y.shape:
        raise ConfigError(f"got {m.size} sizes but {y.size} {what} values; they must pair up")
    finite = np.isfinite(m) & np.isfinite(y)
    if not finite.all():
        logger.warning("BME fit: ignoring %d non-finite point(s)", int((~finite).sum()))
    for i in np.flatnonzero(finite & (m < 0)):
        raise ConfigError(f"point {i}: size must be >= 0, got {m[i]:g}")
    lo_bad = finite & (y < 0)
    hi_bad = finite & (y > upper) if upper is not None else np.zeros_like(finite)
    for i in np.flatnonzero(lo_bad | hi_bad):
        allowed = f"in [0, {upper:g}]" if upper is not None else ">= 0"
        raise ConfigError(f"point {i}: {what} must be {allowed}, got {y[i]:g}")
    m, y = m[finite], y[finite]
    distinct = np.unique(m).size
    if distinct < 3:
        raise ConfigError(f"the BME fit needs at least 3 usable points at distinct sizes, got "
                          f"{distinct} distinct size(s) among {m.size} usable point(s)")
    return m, y


def plateaus(sizes: NDArray[np.float64], values: NDArray[np.float64]) -> bool:
    """True when the largest sizes sit on a floor: at least 2 distinct sizes, the largest
    among them, within 5 % (relative, or 0.5 % of the value range) of the smallest value."""
    low, span = float(values.min()), float(values.max() - values.min())
    if span <= 0:
        return True
    near = values <= low + max(_PLATEAU_TOL * low, 0.005 * span)
    at_max = near[sizes == sizes.max()].any()
    return bool(at_max and np.unique(sizes[near]).size >= 2)


# -- the fit -------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Problem:
    """The data in normalised units (sizes / largest size, values / largest value)."""

    u: NDArray[np.float64]
    y: NDArray[np.float64]
    u_min: float
    mstar_lo: float
    p_fixed: float | None
    w: NDArray[np.float64]


def _fit(m: NDArray[np.float64], y: NDArray[np.float64], p_star: float | None,
         plateau: bool | None, weighting: str, *, counts: bool) -> BMEFit:
    size_scale = float(m.max())
    value_scale = float(y.max()) if counts and y.max() > 0 else 1.0
    u, yn = m / size_scale, y / value_scale
    if plateau is not None:
        is_plateau = bool(plateau)
    elif p_star is not None:      # a known floor: one point on it is enough
        floor = p_star / value_scale
        is_plateau = bool((yn <= floor * (1 + _PLATEAU_TOL) + 1e-12).any())
    else:
        is_plateau = plateaus(u, yn)
    u_min = float(u.min())
    if is_plateau:
        positive = u[u > 0]
        mstar_lo = u_min if u_min > 0 else 0.5 * float(positive.min())
    else:
        mstar_lo = 1.0
    if weighting == "relative":
        weights = 1.0 / np.maximum(yn, _RELATIVE_FLOOR * float(yn.max()) or 1.0)
    elif weighting == "absolute":
        weights = np.ones_like(yn)
    else:
        raise ConfigError(f"weighting must be 'relative' or 'absolute', got {weighting!r}")
    prob = _Problem(u, yn, u_min, mstar_lo, None if p_star is None else p_star / value_scale,
                    weights)

    starts = _grid_starts(prob)
    best_theta, best_sse = starts[0], math.inf
    for theta0 in starts:
        theta, sse = _polish(prob, theta0)
        if sse < best_sse:
            best_theta, best_sse = theta, sse
    offset, mstar, c, p = _unpack(prob, best_theta)
    params = BMEParams(p_star=p * value_scale, p_c=(c - p) * value_scale,
                       m_b=(offset - u_min) * size_scale, m_star=mstar * size_scale)
    resid = np.asarray(miss_probability(params, m)) - y
    sse = float(resid @ resid)
    sst = float(((y - y.mean()) ** 2).sum())
    if sst > 0:
        r2 = 1.0 - sse / sst
    else:
        r2 = 1.0 if sse <= 1e-24 * max(1.0, float(y @ y)) else 0.0
    fit = BMEFit(params=params, r2=r2, n_points=int(m.size), rmse=math.sqrt(sse / m.size),
                 p_star_given=p_star is not None, plateau=is_plateau, counts=counts)
    logger.debug("BME fit: %s", fit)
    return fit


def _excess(u: NDArray[np.float64], u_min: float, offset: NDArray[np.float64] | float,
            mstar: NDArray[np.float64] | float) -> NDArray[np.float64]:
    """G(H) − 1 (>= 0) at normalised sizes ``u`` for shapes given by offset = u_min + Mb, M*."""
    x = u - u_min + offset                       # M + Mb, > 0 by construction
    k = mstar - u_min + offset                   # M* + Mb
    on_curve = u < mstar
    h = np.where(on_curve, 1.0 + k / x, 2.0)
    return np.where(on_curve, 0.5 * (h + np.sqrt(np.maximum(h * h - 4.0, 0.0))) - 1.0, 0.0)


def _linear_part(prob: _Problem, g: NDArray[np.float64]) -> tuple[NDArray[np.float64], ...]:
    """Best (c, p) with c >= _C_MIN, 0 <= p <= 1 for each row of ``g`` under the point
    weights (a convex QP in two variables: the free optimum or the best edge); returns c, p,
    weighted SSE."""
    w = prob.w
    yw, gw = prob.y * w, g * w
    ww, wy = float(w @ w), float(w @ yw)
    gg, gy, gwsum = (gw * gw).sum(axis=1), gw @ yw, gw @ w
    safe_gg = np.where(gg > 0, gg, 1.0)

    def c_for(p: float) -> NDArray[np.float64]:
        """The best c >= _C_MIN for a fixed floor p."""
        return np.maximum(np.where(gg > 0, (gy - p * gwsum) / safe_gg, _C_MIN), _C_MIN)

    def sse(c: NDArray[np.float64], p: NDArray[np.float64]) -> NDArray[np.float64]:
        r = p[:, None] * w + c[:, None] * gw - yw
        return (r * r).sum(axis=1)

    rows = g.shape[0]
    if prob.p_fixed is not None:
        p = np.full(rows, prob.p_fixed)
        c = c_for(prob.p_fixed)
        return c, p, sse(c, p)
    det = ww * gg - gwsum * gwsum
    ok = det > 1e-300 * max(ww, 1.0)
    safe_det = np.where(ok, det, 1.0)
    c_free = np.where(ok, (ww * gy - gwsum * wy) / safe_det, -1.0)
    p_free = np.where(ok, (gg * wy - gwsum * gy) / safe_det, -1.0)
    feasible = ok & (c_free >= _C_MIN) & (p_free >= 0) & (p_free <= 1)
    c0 = np.where(feasible, c_free, _C_MIN)
    p0 = np.where(feasible, p_free, 0.0)
    candidates = [(c0, p0, np.where(feasible, sse(c0, p0), np.inf))]
    for p_edge in (0.0, 1.0):
        pe = np.full(rows, p_edge)
        ce = c_for(p_edge)
        candidates.append((ce, pe, sse(ce, pe)))
    c_edge = np.full(rows, _C_MIN)
    p_edge_c = np.clip((wy - _C_MIN * gwsum) / ww, 0.0, 1.0)
    candidates.append((c_edge, p_edge_c, sse(c_edge, p_edge_c)))
    stack_sse = np.stack([cand[2] for cand in candidates])
    pick = stack_sse.argmin(axis=0)
    idx = np.arange(rows)
    c = np.stack([cand[0] for cand in candidates])[pick, idx]
    p = np.stack([cand[1] for cand in candidates])[pick, idx]
    return c, p, stack_sse[pick, idx]


def _grid_starts(prob: _Problem) -> list[NDArray[np.float64]]:
    """The best few shapes of a log grid over (offset, M*), as start vectors for the polish."""
    mstars = prob.mstar_lo * np.logspace(0.0, _MSTAR_DECADES, _N_MSTAR)
    if prob.mstar_lo < 1.0:  # plateau: make sure the grid is dense inside the data range
        mstars = np.unique(np.concatenate([mstars, np.geomspace(prob.mstar_lo, 1.0, 25)]))
    off_grid, ms_grid = np.meshgrid(_OFFSET_GRID, mstars, indexing="ij")
    off, ms = off_grid.ravel(), ms_grid.ravel()
    g = _excess(prob.u[None, :], prob.u_min, off[:, None], ms[:, None])
    c, p, sse = _linear_part(prob, g)
    order = np.argsort(sse, kind="stable")[:_N_STARTS]
    starts = []
    for i in order:
        theta = [math.log(off[i]), math.log(ms[i]), math.log(max(c[i], _C_MIN))]
        if prob.p_fixed is None:
            theta.append(float(p[i]))
        starts.append(np.array(theta))
    return starts


def _bounds(prob: _Problem) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    lo = [math.log(_OFFSET_GRID[0]) - 3.0, math.log(prob.mstar_lo),
          math.log(_C_MIN)]
    hi = [math.log(_OFFSET_GRID[-1]) + 3.0,
          math.log(prob.mstar_lo) + (_MSTAR_DECADES + 2.0) * math.log(10.0), math.log(1e6)]
    if prob.p_fixed is None:
        lo.append(0.0)
        hi.append(1.0)
    return np.array(lo), np.array(hi)


def _unpack(prob: _Problem, theta: Sequence[float] | NDArray[np.float64],
            ) -> tuple[float, float, float, float]:
    offset, mstar, c = math.exp(theta[0]), math.exp(theta[1]), math.exp(theta[2])
    p = prob.p_fixed if prob.p_fixed is not None else float(theta[3])
    return offset, mstar, c, p


def _polish(prob: _Problem, theta0: NDArray[np.float64]) -> tuple[NDArray[np.float64], float]:
    """Bounded least squares of all free parameters from one start; returns (theta, SSE)."""
    lo, hi = _bounds(prob)
    span = hi - lo
    x0 = np.clip(theta0, lo + 1e-9 * span, hi - 1e-9 * span)

    def residuals(theta: NDArray[np.float64]) -> NDArray[np.float64]:
        offset, mstar, c, p = _unpack(prob, theta)
        return (p + c * _excess(prob.u, prob.u_min, offset, mstar) - prob.y) * prob.w

    r0 = residuals(x0)
    best = (x0, float(r0 @ r0))
    try:
        result = least_squares(residuals, x0, bounds=(lo, hi), method="trf",
                               xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=400)
    except (ValueError, FloatingPointError) as exc:  # pragma: no cover - defensive
        logger.debug("BME polish failed from %s: %s", x0, exc)
        return best
    sse = float(result.fun @ result.fun)
    return (result.x, sse) if sse < best[1] else best
