"""The feasible region a constraint plugin hands to strategies: membership, sampling, projection.

Points are converted to grid indices of the (narrowed) space and checked against the
polytope's integer rows in Python; sampling and projection stay on the grid.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from harmony.errors import ConstraintError, HarmonyError
from plugins.grid_polytope import GridPolytope, IntegerRow
from strategies.space import IntParam, Point, RealParam, Space

GridParam = IntParam | RealParam

logger = logging.getLogger(__name__)

#: uniform draws in the bounding box before sampling switches to isl
_REJECTION_TRIES = 64
#: largest box whose feasible points are enumerated once for uniform sampling
_ENUMERATE_LIMIT = 100_000


class ConstrainedRegion:
    """The points of ``space`` whose constrained parameters lie in ``polytope``.

    ``polytope`` is indexed on the grids of ``space`` (already narrowed to the bounding box).
    """

    def __init__(self, space: Space, polytope: GridPolytope):
        self.space = space
        self.polytope = polytope
        self.dims: tuple[GridParam, ...] = tuple(_grid_param(space, n) for n in polytope.names)
        position = {n: i for i, n in enumerate(polytope.names)}
        #: for every space parameter, its polytope dimension or None
        self._dim_of = [position.get(p.name) for p in space.params]
        self._tolerance = [_grid_tolerance(p) for p in self.dims]

    # -- FeasibleRegion ---------------------------------------------------------
    def contains(self, point: Mapping[str, Any]) -> bool:
        """True when ``point`` is on the space's grid and satisfies every constraint."""
        k = self.indices(point)
        return k is not None and self.polytope.contains(k)

    def sample(self, rng: np.random.Generator) -> Point:
        """A feasible point: uniform by rejection in the box, else from isl (seeded by ``rng``)."""
        poly = self.polytope
        others = self.space.random_point(rng)
        k: tuple[int, ...] | None = None
        for _ in range(_REJECTION_TRIES):
            draw = tuple(int(rng.integers(u + 1)) for u in poly.upper)
            if poly.contains(draw):
                k = draw
                break
        if k is None:
            if poly.box_size() <= _ENUMERATE_LIMIT:
                points = poly.points()
                k = points[int(rng.integers(len(points)))]
            else:
                k = poly.sample_sequential(rng)
        return self._point(others, k)

    def project(self, point: Mapping[str, Any]) -> Point | None:
        """The feasible grid point nearest to ``point`` in unit-normalised Euclidean distance.

        Unconstrained parameters are snapped to their grid; the constrained ones are found by
        branch and bound over the grid indices (exact).
        """
        self.space.check_point(point)
        snapped = self.space.snap(point)
        targets = [self._unit(p, point[p.name]) for p in self.dims]
        best = _nearest(self.polytope, [_IndexCost(p, t) for p, t in zip(self.dims, targets,
                                                                         strict=True)])
        return None if best is None else self._point(snapped, best)

    # -- helpers ----------------------------------------------------------------
    def indices(self, point: Mapping[str, Any]) -> tuple[int, ...] | None:
        """The grid indices of the constrained parameters, or ``None`` if ``point`` is off the grid."""
        try:
            for p, dim in zip(self.space.params, self._dim_of, strict=True):
                if dim is None and p.snap(point[p.name]) != point[p.name]:
                    return None
            k = []
            for p, tol in zip(self.dims, self._tolerance, strict=True):
                v = point[p.name]
                if isinstance(v, bool) or not isinstance(v, int | float):
                    return None
                i = int(round((v - p.min) / p.step))
                if abs(p.value_at(i) - v) > tol:
                    return None
                k.append(i)
            return tuple(k)
        except (KeyError, HarmonyError, ValueError, TypeError, OverflowError) as exc:
            logger.debug("point %s is not in the space: %s", point, exc)
            return None

    def violated(self, point: Mapping[str, Any]) -> list[str]:
        """The texts of the constraints ``point`` breaks (``["off the grid"]`` if off the grid)."""
        k = self.indices(point)
        if k is None:
            return ["off the grid or outside the feasible bounding box"]
        rows: list[IntegerRow] = self.polytope.violated(k)
        if any(x < 0 or x > u for x, u in zip(k, self.polytope.upper, strict=True)):
            return ["outside the feasible bounding box"] + [r.text for r in rows]
        return list(dict.fromkeys(r.text for r in rows))

    def _point(self, base: Point, k: Sequence[int]) -> Point:
        out = dict(base)
        for p, i in zip(self.dims, k, strict=True):
            out[p.name] = p.value_at(i)
        return {n: out[n] for n in self.space.names}

    def _unit(self, p: GridParam, value: Any) -> float:
        return _unit_value(p, float(value))


def _grid_param(space: Space, name: str) -> GridParam:
    p = space[name]
    if not isinstance(p, IntParam | RealParam) or (isinstance(p, RealParam) and not p.discrete):
        raise ConstraintError(f"parameter {name!r} has no step grid; constraints need one")
    return p


def _grid_tolerance(p: GridParam) -> float:
    if isinstance(p, IntParam):
        return 0.0
    return 1e-9 * max(1.0, abs(p.min), abs(p.max))


def _unit_value(p: GridParam, v: float) -> float:
    """Like :meth:`Space.to_unit_value` but without clipping (targets may lie outside)."""
    hi = p.upper
    if hi == p.min:
        return 0.5
    if p.log:
        return (math.log(max(v, p.min * 1e-12)) - math.log(p.min)) / (math.log(hi) - math.log(p.min))
    return (v - p.min) / (hi - p.min)


class _IndexCost:
    """Squared unit distance from a target to each grid index of one parameter."""

    def __init__(self, p: GridParam, target: float):
        self.p = p
        self.target = target
        self.upper = p.size - 1
        # the smallest unit distance per index step: a lower bound used for pruning
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
            return 0.0 + (self.target - self.u(0)) / self.slope
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
        return _unit_value(self.p, self.p.value_at(i))

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


def _nearest(poly: GridPolytope, costs: Sequence[_IndexCost]) -> tuple[int, ...] | None:
    """Exact nearest feasible index vector by depth-first branch and bound."""
    n = len(costs)
    rows = poly.rows
    # per row: the largest contribution the dimensions from position d onwards can add
    tail_max = [[0] * (n + 1) for _ in rows]
    for r, row in enumerate(rows):
        for d in range(n - 1, -1, -1):
            a = row.coeffs[d]
            tail_max[r][d] = tail_max[r][d + 1] + max(0, a * poly.upper[d])
    tail_min = [[0] * (n + 1) for _ in rows]
    for r, row in enumerate(rows):
        for d in range(n - 1, -1, -1):
            a = row.coeffs[d]
            tail_min[r][d] = tail_min[r][d + 1] + min(0, a * poly.upper[d])
    # continuous lower bound on the cost of fixing a row with the free dimensions
    weight = [[0.0] * (n + 1) for _ in rows]
    shift = [[0.0] * (n + 1) for _ in rows]
    for r, row in enumerate(rows):
        for d in range(n - 1, -1, -1):
            a = row.coeffs[d]
            weight[r][d] = weight[r][d + 1] + (a / costs[d].slope) ** 2
            shift[r][d] = shift[r][d + 1] + a * costs[d].center
    best_cost = math.inf
    best: list[tuple[int, ...]] = []
    chosen = [0] * n
    partial = [row.constant for row in rows]

    def lower_bound(d: int) -> float:
        bound = 0.0
        for r, row in enumerate(rows):
            level = partial[r]
            if level + tail_max[r][d] < 0:
                return math.inf
            if row.equality and level + tail_min[r][d] > 0:
                return math.inf
            gap = level + shift[r][d]
            if gap < 0 or (row.equality and gap > 0):
                if weight[r][d] == 0:
                    return math.inf if gap != 0 else 0.0
                bound = max(bound, gap * gap / weight[r][d])
        return bound

    def search(d: int, spent: float) -> None:
        nonlocal best_cost
        if d == n:
            if all(p == 0 if row.equality else p >= 0 for p, row in zip(partial, rows, strict=True)):
                if spent < best_cost - 1e-15:
                    best_cost = spent
                    best[:] = [tuple(chosen)]
            return
        for c, i in costs[d].order():
            if spent + c >= best_cost - 1e-15:
                break
            chosen[d] = i
            for r, row in enumerate(rows):
                partial[r] += row.coeffs[d] * i
            if spent + c + lower_bound(d + 1) < best_cost - 1e-15:
                search(d + 1, spent + c)
            for r, row in enumerate(rows):
                partial[r] -= row.coeffs[d] * i

    search(0, 0.0)
    return best[0] if best else None

