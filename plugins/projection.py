"""Nearest feasible grid point under affine integer constraints (branch and bound).

The distance is Euclidean in the space's unit coordinates (log-scaled parameters
logarithmically). Lower bounds come from the continuous relaxation: in scaled index
coordinates ``y_j = m_j * k_j`` (``m_j`` = the smallest unit distance per grid step) every
cost is at least ``|y - y0|^2``, and Hildreth's dual coordinate ascent gives a valid lower
bound for that quadratic program after any number of sweeps (weak duality).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence

from harmony_base.space import IntParam, RealParam
from plugins.grid_polytope import GridPolytope, IntegerRow, in_box_and_rows

logger = logging.getLogger(__name__)

GridParam = IntParam | RealParam

#: branch-and-bound nodes before the search settles for the best point found so far
NODE_LIMIT = 400
#: dual sweeps per node (more = tighter bounds, fewer nodes, more time per node)
_NODE_SWEEPS = 16
_ROOT_SWEEPS = 300
#: sweeps between checks of the dual value
_CHECK_EVERY = 4
_EPS = 1e-12


def unit_value(p: GridParam, v: float) -> float:
    """Like :meth:`Space.to_unit_value` but without clipping (targets may lie outside)."""
    hi = p.upper
    if hi == p.min:
        return 0.5
    if p.log:
        lo = math.log(p.min)
        return (math.log(max(v, p.min * 1e-12)) - lo) / (math.log(hi) - lo)
    return (v - p.min) / (hi - p.min)


class IndexCost:
    """Squared unit distance from a target to each grid index of one parameter."""

    def __init__(self, p: GridParam, target: float):
        self.p = p
        self.target = target
        self.upper = p.size - 1
        # the smallest unit distance per index step: cost(k) >= (slope * (k - center))^2
        if p.size <= 1:
            self.slope = 1.0
        elif p.log:
            top = max(float(p.upper), float(p.min))
            self.slope = min(1.0 / (p.size - 1),
                             p.step / (top * (math.log(p.upper) - math.log(p.min))))
        else:
            self.slope = 1.0 / (p.size - 1)
        #: the target's position in (continuous) index units
        self.center = self._position()

    def _position(self) -> float:
        if self.upper == 0:
            return 0.0
        lo, hi = 0, self.upper
        if self.target <= self.u(0):
            return (self.target - self.u(0)) / self.slope
        if self.target >= self.u(hi):
            return hi + (self.target - self.u(hi)) / self.slope
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.u(mid) <= self.target:
                lo = mid
            else:
                hi = mid
        span = self.u(hi) - self.u(lo)
        return lo + ((self.target - self.u(lo)) / span if span > 0 else 0.0)

    def u(self, i: int) -> float:
        return unit_value(self.p, self.p.value_at(i))

    def cost(self, i: int) -> float:
        d = self.u(i) - self.target
        return d * d

    def order(self) -> Iterator[tuple[float, int]]:
        """Grid indices by increasing cost, with their costs."""
        start = min(max(int(round(self.center)), 0), self.upper)
        left, right = start - 1, start + 1
        yield self.cost(start), start
        while left >= 0 or right <= self.upper:
            cl = self.cost(left) if left >= 0 else math.inf
            cr = self.cost(right) if right <= self.upper else math.inf
            if cl <= cr:
                yield cl, left
                left -= 1
            else:
                yield cr, right
                right += 1


class _Relaxation:
    """Hildreth's method for ``min |y - y0|^2`` over the free dimensions of a node.

    Rows ``level_r + sum_j a_rj k_j >= 0`` become ``g_r . y <= level_r`` with
    ``g_rj = -a_rj / m_j``; the box ``0 <= k_j <= u_j`` is kept as bounds on ``y_j``.
    """

    def __init__(self, rows: Sequence[IntegerRow], costs: Sequence[IndexCost]):
        self.n = len(costs)
        self.m = [c.slope for c in costs]
        self.y0 = [c.slope * c.center for c in costs]
        self.top = [c.slope * c.upper for c in costs]
        self.equality = [r.equality for r in rows]
        self.g = [[-a / m for a, m in zip(r.coeffs, self.m, strict=True)] for r in rows]

    def bound(self, first_free: int, level: Sequence[float], lam: list[float],
              box_lo: list[float], box_hi: list[float], sweeps: int,
              enough: float = math.inf) -> tuple[float, list[float]]:
        """A lower bound on the relaxed cost of the free dims ``first_free..n-1``, and ``y``.

        ``lam``, ``box_lo``, ``box_hi`` are the dual variables (updated in place: warm start).
        Stops early once the bound reaches ``enough`` or stops improving.
        """
        free = range(first_free, self.n)
        y = list(self.y0)
        for r, g in enumerate(self.g):
            if lam[r]:
                for j in free:
                    y[j] -= lam[r] * g[j]
        for j in free:
            y[j] += box_lo[j] - box_hi[j]
        norms = [sum(g[j] * g[j] for j in free) for g in self.g]
        value = previous = self._dual(free, level, lam, box_lo, box_hi, y)
        for sweep in range(1, sweeps + 1):
            self._sweep(free, level, lam, box_lo, box_hi, y, norms)
            if sweep % _CHECK_EVERY == 0 or sweep == sweeps:
                value = self._dual(free, level, lam, box_lo, box_hi, y)
                if value >= enough or value - previous <= 1e-9 * max(1.0, value):
                    break
                previous = value
        return value, y

    def _sweep(self, free: range, level: Sequence[float], lam: list[float], box_lo: list[float],
               box_hi: list[float], y: list[float], norms: Sequence[float]) -> None:
        for r, g in enumerate(self.g):
            if norms[r] <= _EPS:
                lam[r] = 0.0  # no free dimension left in this row: it cannot help the bound
                continue
            viol = sum(g[j] * y[j] for j in free) - level[r]
            new = lam[r] + viol / norms[r]
            if not self.equality[r] and new < 0.0:
                new = 0.0
            delta = new - lam[r]
            if delta:
                lam[r] = new
                for j in free:
                    y[j] -= delta * g[j]
        for j in free:
            # -y_j <= 0 (dual box_lo) and y_j <= top_j (dual box_hi)
            new = max(0.0, box_lo[j] - y[j])
            y[j] += new - box_lo[j]
            box_lo[j] = new
            new = max(0.0, box_hi[j] + y[j] - self.top[j])
            y[j] -= new - box_hi[j]
            box_hi[j] = new

    def _dual(self, free: range, level: Sequence[float], lam: Sequence[float],
              box_lo: Sequence[float], box_hi: Sequence[float], y: Sequence[float]) -> float:
        """Twice the dual objective: -|y - y0|^2 + 2 sum lam (g.y0 - h) + box terms (valid >= 0)."""
        dual = -0.5 * sum((y[j] - self.y0[j]) ** 2 for j in free)
        for r, g in enumerate(self.g):
            if lam[r]:
                dual += lam[r] * (sum(g[j] * self.y0[j] for j in free) - level[r])
        for j in free:
            dual += box_lo[j] * (-self.y0[j]) + box_hi[j] * (self.y0[j] - self.top[j])
        return max(0.0, 2.0 * dual)


def nearest_feasible(poly: GridPolytope, costs: Sequence[IndexCost],
                     anchors: Sequence[tuple[int, ...]] = (),
                     node_limit: int = NODE_LIMIT) -> tuple[int, ...] | None:
    """The feasible index vector of least total cost (exact unless ``node_limit`` is hit).

    ``anchors`` are known feasible vectors; the search starts from the best point on the
    way from the relaxed optimum to one of them, then proves or improves it. Dimensions are
    branched coarsest grid first; the last one is solved in closed form.
    """
    n = len(costs)
    if n == 0:
        return ()
    order = sorted(range(n), key=lambda j: (-costs[j].slope, j))
    costs = [costs[j] for j in order]
    rows = [IntegerRow(tuple(r.coeffs[j] for j in order), r.constant, r.equality, r.text)
            for r in poly.rows]
    upper = [poly.upper[j] for j in order]
    relax = _Relaxation(rows, costs)
    search = _BranchAndBound(rows, costs, upper, relax, node_limit)
    for k in _starts(rows, upper, relax, [tuple(a[j] for j in order) for a in anchors]):
        c = sum(cost.cost(i) for cost, i in zip(costs, k, strict=True))
        if c < search.best_cost:
            search.best_cost, search.best = c, k
    search.search(0, 0.0)
    if search.nodes >= node_limit:
        logger.debug("projection stopped after %d nodes; returning the best point found",
                     search.nodes)
    if search.best is None:
        return None
    out = [0] * n
    for position, j in enumerate(order):
        out[j] = search.best[position]
    return tuple(out)


class _BranchAndBound:
    """Depth-first branch and bound over the reordered dimensions: each level tries its
    indices cheapest first, prunes by the rows' reachable ranges and the relaxation's bound,
    and solves the last dimension in closed form; ``best`` / ``best_cost`` the incumbent."""

    def __init__(self, rows: list[IntegerRow], costs: list[IndexCost], upper: list[int],
                 relax: _Relaxation, node_limit: int) -> None:
        n = len(costs)
        self.rows, self.costs, self.upper, self.relax = rows, costs, upper, relax
        self.node_limit = node_limit
        self.best_cost: float = math.inf
        self.best: tuple[int, ...] | None = None
        # per row and depth: the largest / smallest contribution the free dims can still add
        self.tail_max = [[0] * (n + 1) for _ in rows]
        self.tail_min = [[0] * (n + 1) for _ in rows]
        for r, row in enumerate(rows):
            for d in range(n - 1, -1, -1):
                a = row.coeffs[d] * upper[d]
                self.tail_max[r][d] = self.tail_max[r][d + 1] + max(0, a)
                self.tail_min[r][d] = self.tail_min[r][d + 1] + min(0, a)
        self.chosen = [0] * n
        self.level = [row.constant for row in rows]
        self.lam_stack = [[0.0] * len(rows) for _ in range(n + 1)]
        self.lo_stack = [[0.0] * n for _ in range(n + 1)]
        self.hi_stack = [[0.0] * n for _ in range(n + 1)]
        self.nodes = 0
        self.last = n - 1

    def search(self, d: int, spent: float) -> None:
        """Branch on dimension ``d`` with ``spent`` the cost of the dimensions before it."""
        rows, level, last = self.rows, self.level, self.last
        if d == last:
            found = _best_last(rows, level, last, self.upper[last], self.costs[last])
            if found is not None and spent + found[0] < self.best_cost:
                self.chosen[last] = found[1]
                self.best_cost, self.best = spent + found[0], tuple(self.chosen)
            return
        for c, i in self.costs[d].order():
            if spent + c >= self.best_cost - _EPS or self.nodes >= self.node_limit:
                break
            self.nodes += 1
            self.chosen[d] = i
            for r, row in enumerate(rows):
                level[r] += row.coeffs[d] * i
            if _may_hold(level, rows, self.tail_max, self.tail_min, d + 1):
                self.lam_stack[d + 1][:] = self.lam_stack[d]
                self.lo_stack[d + 1][:] = self.lo_stack[d]
                self.hi_stack[d + 1][:] = self.hi_stack[d]
                rest, _ = self.relax.bound(d + 1, level, self.lam_stack[d + 1],
                                           self.lo_stack[d + 1], self.hi_stack[d + 1],
                                           _NODE_SWEEPS, enough=self.best_cost - spent - c)
                if spent + c + rest < self.best_cost - _EPS:
                    self.search(d + 1, spent + c)
            for r, row in enumerate(rows):
                level[r] -= row.coeffs[d] * i


def _best_last(rows: Sequence[IntegerRow], level: Sequence[int], d: int, upper: int,
               cost: IndexCost) -> tuple[float, int] | None:
    """The cheapest feasible value of the last dimension given the others (or ``None``)."""
    lo, hi = 0, upper
    for row, v in zip(rows, level, strict=True):
        a = row.coeffs[d]
        if a == 0:
            if v < 0 or (row.equality and v != 0):
                return None
        elif row.equality:
            if v % a:
                return None
            lo, hi = max(lo, -v // a), min(hi, -v // a)
        elif a > 0:
            lo = max(lo, -(v // a))  # a*k + v >= 0  <=>  k >= ceil(-v / a)
        else:
            hi = min(hi, v // -a)  # k <= floor(v / -a)
        if lo > hi:
            return None
    center = min(max(cost.center, lo), hi)
    candidates = {min(max(math.floor(center), lo), hi), min(max(math.ceil(center), lo), hi)}
    return min((cost.cost(k), k) for k in candidates)


def _may_hold(level: Sequence[int], rows: Sequence[IntegerRow], tail_max: Sequence[Sequence[int]],
              tail_min: Sequence[Sequence[int]], d: int) -> bool:
    for r, row in enumerate(rows):
        if level[r] + tail_max[r][d] < 0:
            return False
        if row.equality and level[r] + tail_min[r][d] > 0:
            return False
    return True


def _starts(rows: Sequence[IntegerRow], upper: Sequence[int], relax: _Relaxation,
            anchors: Sequence[tuple[int, ...]]) -> Iterator[tuple[int, ...]]:
    """Feasible starting points: the rounded relaxed optimum, else the feasible point
    closest to it on the segment towards each anchor (found by bisection)."""
    n = relax.n
    level = [float(r.constant) for r in rows]
    _, y = relax.bound(0, level, [0.0] * len(rows), [0.0] * n, [0.0] * n, _ROOT_SWEEPS)
    x = [yj / m for yj, m in zip(y, relax.m, strict=True)]

    def at(t: float, a: Sequence[int]) -> tuple[int, ...]:
        return tuple(min(max(int(round(xj + t * (aj - xj))), 0), u)
                     for xj, aj, u in zip(x, a, upper, strict=True))

    def feasible(k: Sequence[int]) -> bool:
        return in_box_and_rows(rows, upper, k)

    rounded = at(0.0, [0] * n)
    if feasible(rounded):
        yield rounded
        return
    for anchor in anchors:
        lo, hi = 0.0, 1.0
        for _ in range(30):
            mid = (lo + hi) / 2
            if feasible(at(mid, anchor)):
                hi = mid
            else:
                lo = mid
        yield at(hi, anchor) if feasible(at(hi, anchor)) else tuple(anchor)
