"""Partitioning one buffer of M pages among k pools with fitted miss curves.

Minimises Σ w_i·f_i(M_i) subject to Σ M_i = M, integer M_i >= 0 and optional per-pool caps
f_i(M_i) <= max_miss (a cap is a lower bound on M_i, since f_i falls with size). BME curves
are convex at small sizes but concave just below M* (they dive into the knee), so plain
greedy marginal gains can be wrong: the exact method is a min-plus dynamic programme over
pages (vectorised, O(k·M²) at worst); for problems too large for it, a greedy allocation on
each curve's lower convex hull (exact for convex curves, near-optimal otherwise).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from bme.equation import BMEParams, miss_probability
from bme.size import size_for_target
from harmony_base.errors import ConfigError

logger = logging.getLogger(__name__)

#: the exact DP is used while it needs at most this many (m, j) cells
EXACT_CELL_BUDGET = 3 * 10**8
_ROW_CHUNK_CELLS = 4 * 10**6


@dataclass(frozen=True)
class Partition:
    """Sizes per pool (pages, summing to the total), their miss probabilities, and the
    weighted aggregate Σ w_i P_i with weights normalised to sum 1."""

    sizes: list[int]
    miss: list[float]
    aggregate_miss: float
    method: str

    def to_dict(self) -> dict[str, object]:
        return {"sizes": self.sizes, "miss": self.miss, "aggregate_miss": self.aggregate_miss,
                "method": self.method}


def miss_table(params: BMEParams, limit: int) -> NDArray[np.float64]:
    """P at sizes 0 .. limit, clipped to at most 1 (a probability; inf outside the domain)."""
    p = np.asarray(miss_probability(params, np.arange(limit + 1, dtype=float)))
    return np.minimum(p, 1.0)


def partition(curves: Sequence[BMEParams], total: int, *,
              weights: Sequence[float] | None = None,
              max_miss: float | Sequence[float | None] | None = None,
              method: str = "auto") -> Partition:
    """Split ``total`` pages among the pools of ``curves`` minimising the weighted miss.

    ``weights`` are reference shares (default equal; normalised to sum 1); ``max_miss`` caps
    P_i per pool (one number for all, or one per pool, ``None`` = no cap). ``method`` is
    ``"exact"`` (DP), ``"greedy"`` (convex hulls) or ``"auto"`` (exact while affordable).
    """
    k = len(curves)
    if k == 0:
        raise ConfigError("partition needs at least one pool")
    if isinstance(total, bool) or not isinstance(total, int | np.integer) or total < 0:
        raise ConfigError(f"total size must be a whole number of pages >= 0, got {total!r}")
    total = int(total)
    w = _weights(weights, k)
    caps = _caps(max_miss, k)
    lower = [_lower_bound(curves[i], caps[i], i) for i in range(k)]
    if sum(lower) > total:
        raise ConfigError(
            f"the miss caps need at least {sum(lower)} pages (per pool {lower}), but the total "
            f"is {total}: raise the total or relax max_miss")
    # beyond M* a pool gains nothing, so it never needs more than max(lower, ceil(M*))
    upper = [min(total, max(lower[i], math.ceil(curves[i].m_star))) for i in range(k)]
    costs = [w[i] * miss_table(curves[i], upper[i]) for i in range(k)]
    cells = sum(total * (u + 1) for u in upper[1:-1]) + total
    if method == "auto":
        method = "exact" if cells <= EXACT_CELL_BUDGET else "greedy"
    if method == "exact":
        sizes = _exact(costs, lower, total)
    elif method == "greedy":
        sizes = _greedy(costs, lower, total)
    else:
        raise ConfigError(f"partition method must be 'auto', 'exact' or 'greedy', got {method!r}")
    sizes = _hand_out_rest(sizes, total, w)
    miss = [float(min(miss_probability(curves[i], sizes[i]), 1.0)) for i in range(k)]
    aggregate = float(sum(w[i] * miss[i] for i in range(k)))
    logger.debug("partition of %d pages by %s: %s", total, method, sizes)
    return Partition(sizes=sizes, miss=miss, aggregate_miss=aggregate, method=method)


def _weights(weights: Sequence[float] | None, k: int) -> list[float]:
    if weights is None:
        return [1.0 / k] * k
    w = [float(x) for x in weights]
    if len(w) != k:
        raise ConfigError(f"got {len(w)} weights for {k} pools; give one weight per pool")
    if any(not math.isfinite(x) or x < 0 for x in w) or sum(w) <= 0:
        raise ConfigError(f"weights must be finite, >= 0 and not all 0, got {w}")
    s = sum(w)
    return [x / s for x in w]


def _caps(max_miss: float | Sequence[float | None] | None, k: int) -> list[float | None]:
    if max_miss is None or isinstance(max_miss, int | float):
        caps: list[float | None] = [max_miss] * k
    else:
        caps = list(max_miss)
        if len(caps) != k:
            raise ConfigError(f"got {len(caps)} miss caps for {k} pools")
    for cap in caps:
        if cap is not None and not (math.isfinite(cap) and cap > 0):
            raise ConfigError(f"max_miss must be a positive probability, got {cap!r}")
    return caps


def _lower_bound(params: BMEParams, cap: float | None, pool: int) -> int:
    """The fewest pages with P <= cap (0 without a cap)."""
    if cap is None:
        return 0
    if cap < params.p_star:
        raise ConfigError(f"pool {pool}: max_miss {cap:g} is below its cold-miss floor "
                          f"P* = {params.p_star:g}; no size reaches it")
    size = max(0, math.ceil(size_for_target(params, cap) - 1e-9))
    while size > 0 and miss_probability(params, size - 1) <= cap:  # rounding guard
        size -= 1
    while miss_probability(params, size) > cap:
        size += 1
    return size


def _exact(costs: list[NDArray[np.float64]], lower: list[int], total: int) -> list[int]:
    """Min-plus DP; best[m] = least cost of the pools so far using at most m pages.

    Costs are non-increasing in size, so the first pool simply takes min(m, its upper bound);
    the last pool only needs the row m = total.
    """
    k = len(costs)
    m_all = np.arange(total + 1)
    lo0, hi0 = lower[0], costs[0].size - 1
    choice0 = np.minimum(m_all, hi0)
    best = np.where(m_all >= lo0, costs[0][choice0], np.inf)
    choices: list[NDArray[np.int64]] = [choice0]
    for i in range(1, k):
        cost, lo = costs[i], lower[i]
        hi = cost.size - 1
        width = hi - lo + 1
        # padded[m + q] = best[m - (hi - q)], inf where m - j < 0
        padded = np.concatenate([np.full(hi, np.inf), best])
        windows = np.lib.stride_tricks.sliding_window_view(padded, width)
        cost_rev = cost[lo:][::-1].copy()              # cost_rev[q] = cost[hi - q]
        first_row = total if i == k - 1 else 0       # the last pool needs only m = total
        n_rows = total + 1 - first_row
        new_best = np.empty(n_rows)
        choice = np.empty(n_rows, dtype=np.int64)
        chunk = max(1, _ROW_CHUNK_CELLS // width)
        for start in range(0, n_rows, chunk):
            stop = min(n_rows, start + chunk)
            table = windows[first_row + start:first_row + stop] + cost_rev
            q = table.argmin(axis=1)
            new_best[start:stop] = np.take_along_axis(table, q[:, None], axis=1)[:, 0]
            choice[start:stop] = hi - q
        choices.append(choice)
        best = new_best
    if not math.isfinite(float(best[-1])):
        raise ConfigError("no partition meets the miss caps within the total")  # pragma: no cover
    sizes = [0] * k
    remaining = total
    for i in range(k - 1, -1, -1):
        sizes[i] = int(choices[i][0] if i == k - 1 and k > 1 else choices[i][remaining])
        remaining -= sizes[i]
    return sizes


def _lower_hull_slopes(cost: NDArray[np.float64], lo: int) -> NDArray[np.float64]:
    """Per-page slopes of the lower convex hull of cost[lo:] (non-decreasing)."""
    pts = np.arange(lo, cost.size)
    vals = cost[lo:]
    hull: list[int] = []
    for idx in range(pts.size):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # drop b when it lies on or above the chord from a to idx
            if (vals[b] - vals[a]) * (idx - a) >= (vals[idx] - vals[a]) * (b - a):
                hull.pop()
            else:
                break
        hull.append(idx)
    slopes = np.empty(pts.size - 1)
    for a, b in zip(hull[:-1], hull[1:], strict=True):
        slopes[a:b] = (vals[b] - vals[a]) / (b - a)
    return slopes


def _greedy(costs: list[NDArray[np.float64]], lower: list[int], total: int) -> list[int]:
    """Give each free page to the pool whose convex-hull slope falls most (the best gain)."""
    slopes = [_lower_hull_slopes(c, lower[i]) for i, c in enumerate(costs)]
    free = total - sum(lower)
    allsl = np.concatenate(slopes) if slopes else np.zeros(0)
    owner = np.concatenate([np.full(s.size, i) for i, s in enumerate(slopes)])
    take = min(free, int((allsl < 0).sum()))
    picked = np.argsort(allsl, kind="stable")[:take]
    counts = np.bincount(owner[picked], minlength=len(costs))
    return [lower[i] + int(counts[i]) for i in range(len(costs))]


def _hand_out_rest(sizes: list[int], total: int, w: list[float]) -> list[int]:
    """Pages no pool can use (all at their knee) go out by weight, so Σ sizes = total."""
    rest = total - sum(sizes)
    if rest <= 0:
        return sizes
    shares = [rest * x for x in w]
    extra = [int(math.floor(s)) for s in shares]
    order = sorted(range(len(w)), key=lambda i: shares[i] - extra[i], reverse=True)
    for i in order[: rest - sum(extra)]:
        extra[i] += 1
    return [s + e for s, e in zip(sizes, extra, strict=True)]
