"""The feasible region a constraint plugin hands to strategies: membership, sampling, projection.

Points are converted to grid indices of the (narrowed) space and checked against the
polytope's integer rows in Python; sampling and projection stay on the grid.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harmony_base.errors import ConstraintError, HarmonyError
from harmony_base.jsontypes import JSON
from harmony_base.space import IntParam, Point, RealParam, Space, Value
from plugins.grid_polytope import GridPolytope, IntegerRow
from plugins.projection import GridParam, IndexCost, nearest_feasible, unit_value

logger = logging.getLogger(__name__)

#: uniform draws in the bounding box before sampling switches to isl
_REJECTION_TRIES = 64
#: largest box whose feasible points are enumerated once for uniform sampling
_ENUMERATE_LIMIT = 100_000
#: feasible points drawn once as starting points for projections
_ANCHORS = 8


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
        self._anchor_points: list[tuple[int, ...]] | None = None

    # -- FeasibleRegion ---------------------------------------------------------
    def contains(self, point: Mapping[str, JSON]) -> bool:
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
        costs = [IndexCost(p, t) for p, t in zip(self.dims, targets, strict=True)]
        nearest = tuple(next(c.order())[1] for c in costs)
        if self.polytope.contains(nearest):  # the nearest grid point is already feasible
            return self._point(snapped, nearest)
        best = nearest_feasible(self.polytope, costs, self._anchors())
        return None if best is None else self._point(snapped, best)

    # -- helpers ----------------------------------------------------------------
    def indices(self, point: Mapping[str, Any]) -> tuple[int, ...] | None:
        """Grid indices of the constrained parameters; ``None`` if ``point`` is off the grid."""
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

    def violated(self, point: Mapping[str, JSON]) -> list[str]:
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

    def _unit(self, p: GridParam, value: Value) -> float:
        return unit_value(p, float(value))

    def _anchors(self) -> list[tuple[int, ...]]:
        """A few fixed feasible index vectors spread over the set (projection starts from them)."""
        if self._anchor_points is None:
            rng = np.random.default_rng(0)
            self._anchor_points = [self.polytope.sample_sequential(rng) for _ in range(_ANCHORS)]
        return self._anchor_points


def _grid_param(space: Space, name: str) -> GridParam:
    p = space[name]
    if not isinstance(p, IntParam | RealParam) or (isinstance(p, RealParam) and not p.discrete):
        raise ConstraintError(f"parameter {name!r} has no step grid; constraints need one")
    return p


def _grid_tolerance(p: GridParam) -> float:
    if isinstance(p, IntParam):
        return 0.0
    return 1e-9 * max(1.0, abs(p.min), abs(p.max))
