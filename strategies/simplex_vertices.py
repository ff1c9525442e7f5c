"""Where a simplex's vertices go: unit coordinates of snapped points, the initial simplex
(around a point, a Latin hypercube, random or given), the randomly oriented simplex of a
restart and its radius, the test for a simplex the grid has flattened, and what becomes of
a candidate vertex outside the feasible region.

An infeasible (or refused) candidate is handled by ``reject_method``: ``penalty`` scores it
:attr:`Strategy.PENALTY`, ``random`` replaces it by a random feasible point, ``project`` by
the region's projection. A mixin of :class:`strategies.simplex.SimplexStrategy`, which sets
the attributes declared here.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from harmony_base.errors import ConfigError
from harmony_base.region import FeasibleRegion, WholeSpace
from harmony_base.space import Point, Space, Value

logger = logging.getLogger(__name__)

Key = tuple[Value, ...]

#: attempts at drawing a non-degenerate random / Latin-hypercube initial simplex
_INIT_ATTEMPTS = 20
#: attempts at drawing a feasible replacement for an infeasible candidate
_REPLACE_ATTEMPTS = 100
#: restarts in a row that needed no new measurement before the restart radius starts to grow
_WIDEN_AFTER_SILENT = 6


@dataclass
class Candidate:
    """A vertex waiting for its value: unit coordinates, snapped point, and its value."""

    u: np.ndarray
    point: Point
    key: Key
    value: float | None = None
    handed_out: bool = False


def candidate_value(c: Candidate | None) -> float:
    """A candidate's value for ranking: infinite while it has none (or there is none)."""
    return float(c.value) if c is not None and c.value is not None else math.inf


class SimplexVertices:
    """The vertices of simplices in the unit cube of a space (see the module docstring)."""

    space: Space
    region: FeasibleRegion
    rng: np.random.Generator
    simplex_size: int
    init_method: str
    init_point: Point
    init_radius: float
    init_simplex: list[Point] | None
    restart_decay: float
    active_axes: list[int]
    _continuous: np.ndarray
    _min_step: np.ndarray
    _all_continuous: bool
    _rank_scale: np.ndarray

    name: ClassVar[str]
    PENALTY: ClassVar[float]
    reject_method: str
    _refused: dict[Key, None]
    _memo: dict[Key, float]

    def _candidate(self, u: np.ndarray) -> Candidate:
        point = self.space.from_unit(u)
        c = Candidate(u=self._unit(point, raw=u), point=point, key=self.space.key(point))
        if not self._feasible(point):
            self._reject(c, None)
        if c.value is None:
            c.value = self._memo.get(c.key)
        return c

    def _feasible(self, point: Point) -> bool:
        if self._refused and self.space.key(point) in self._refused:
            return False
        # every snapped point is in the whole space: skip the check for the trivial region
        return isinstance(self.region, WholeSpace) or self.region.contains(point)

    def _reject(self, c: Candidate, hint: Point | None) -> None:
        """Apply ``reject_method`` to an infeasible or refused candidate."""
        if self.reject_method != "penalty":
            for replacement in self._replacements(c.point, hint):
                try:
                    replacement = self.space.snap(replacement)
                except ConfigError as exc:
                    logger.warning("%s: ignoring a replacement that is not a point: %s",
                                   self.name, exc)
                    continue
                if self._feasible(replacement):
                    c.point, c.key, c.u = (replacement, self.space.key(replacement),
                                           self._unit(replacement))
                    return
        c.value = self.PENALTY

    def _replacements(self, point: Point, hint: Point | None) -> Iterator[Point]:
        if hint is not None:
            yield hint
        if self.reject_method == "project":
            projected = self.region.project(point)
            if projected is not None:
                yield projected
        else:
            for _ in range(_REPLACE_ATTEMPTS):
                yield self.region.sample(self.rng)

    def _unit(self, point: Point, raw: np.ndarray | None = None) -> np.ndarray:
        """Unit coordinates of a snapped point (continuous axes keep the exact ``raw``)."""
        u = self.space.to_unit(point)
        if raw is not None:
            u = np.where(self._continuous, np.clip(raw, 0.0, 1.0), u)
        return u

    def _degenerate(self, vertices: np.ndarray) -> bool:
        n_eff = len(self.active_axes)
        if n_eff == 0:
            return False
        active = vertices[:, self.active_axes]
        if self._all_continuous and not np.any((active == 0.0) | (active == 1.0)):
            # off the grid and off the bounds nothing snaps, so nothing can flatten the simplex
            return False
        diffs = (active[1:] - active[0]) * self._rank_scale[self.active_axes]
        return int(np.linalg.matrix_rank(diffs)) < n_eff

    def restart_radius(self, k: int) -> float:
        """The radius (unit cube) of the ``k``-th restart: ``init_radius`` shrunk ``k`` times by
        ``restart_decay`` down to one grid step, then from ``init_radius`` again."""
        floor = float(np.max(self._min_step[self.active_axes])) if self.active_axes else 1.0
        if self.init_radius <= floor:
            return self.init_radius
        cycle = int(math.ceil(math.log(floor / self.init_radius) / math.log(self.restart_decay)))
        return max(self.init_radius * self.restart_decay ** (k % (cycle + 1)), floor)

    def _stall_radius(self, restarts: int, silent_restarts: int) -> float:
        """The radius of the restart after ``restarts`` ones, ``silent_restarts`` of them in a
        row reaching only measured points."""
        radius = self.restart_radius(restarts)
        if silent_restarts > _WIDEN_AFTER_SILENT:
            # the neighbourhood is all measured (an exact grid optimum, or a corner): look
            # wider, at a random radius so that every distance gets its chance
            widest = min(1.0, max(radius, self.init_radius)
                         * 2.0 ** (silent_restarts - _WIDEN_AFTER_SILENT))
            radius = float(self.rng.uniform(radius, widest))
        return radius

    def _restart_simplex(self, point: Point | None,
                         simplex: list[Point] | None) -> list[np.ndarray]:
        """The vertices of :meth:`SimplexStrategy.restart`: the given ``simplex``, an axis
        simplex around ``point``, or a new initial simplex (never the previous one)."""
        if simplex is not None:
            if len(simplex) != self.simplex_size:
                raise ConfigError(f"strategy {self.name!r}: a restart simplex needs "
                                  f"{self.simplex_size} points (simplex_size), got {len(simplex)}")
            return [self._unit(self.space.snap(p)) for p in simplex]
        if point is not None:
            return self._axis_simplex(self._unit(self.space.snap(point)),
                                      np.maximum(self.init_radius, self._min_step))
        if self.init_method in ("point", "simplex"):
            centre = self.init_point if self.init_method == "point" or not self.init_simplex \
                else self.init_simplex[0]
            return self._oriented_simplex(self._unit(self.space.snap(centre)), self.init_radius)
        return self._initial_simplex()

    def _oriented_simplex(self, x0: np.ndarray, radius: float) -> list[np.ndarray]:
        """``x0`` plus ``simplex_size - 1`` vertices at ``radius`` in a random orientation.

        The first ``n`` directions are the columns of a random orthogonal matrix (so the simplex
        is a rotated, reflected axis simplex); further vertices take random unit directions.
        Every axis moves at least one grid step. If the grid flattens the rotated simplex, a
        randomly signed axis simplex in random axis order is used instead.
        """
        axes = self.active_axes
        n_eff = len(axes)
        if n_eff == 0:
            return [np.array(x0, dtype=float)] * self.simplex_size
        q, r = np.linalg.qr(self.rng.standard_normal((n_eff, n_eff)))
        q = q * np.sign(np.diag(r))  # a uniformly random orthogonal matrix
        directions = [q[:, j] for j in range(n_eff)]
        for _ in range(self.simplex_size - 1 - n_eff):
            d = self.rng.standard_normal(n_eff)
            directions.append(d / np.linalg.norm(d))
        step = np.maximum(radius, self._min_step[axes])
        us = [np.array(x0, dtype=float)]
        for d in directions[: self.simplex_size - 1]:
            u = np.array(x0, dtype=float)
            moved = u[axes] + step * d
            # a step out of the unit cube goes the other way along that axis
            out = (moved < 0.0) | (moved > 1.0)
            moved[out] = u[axes][out] - (step * d)[out]
            u[axes] = np.clip(moved, 0.0, 1.0)
            us.append(self._unit(self.space.from_unit(u), raw=u))
        if not self._degenerate(np.array(us)):
            return us
        order = self.rng.permutation(n_eff)
        signs = self.rng.choice([-1.0, 1.0], size=n_eff)
        us = [np.array(x0, dtype=float)]
        for j in range(1, self.simplex_size):
            k = order[(j - 1) % n_eff]
            axis = axes[k]
            ring = (j - 1) // n_eff
            u = np.array(x0, dtype=float)
            delta = signs[k] * (1 if ring % 2 == 0 else -1) * step[k] * (1 + ring // 2)
            moved = u[axis] + delta
            if moved > 1.0 or moved < 0.0:
                moved = u[axis] - delta
            u[axis] = min(max(moved, 0.0), 1.0)
            us.append(u)
        return us


    def _initial_simplex(self) -> list[np.ndarray]:
        if self.init_method == "simplex" and self.init_simplex is not None:
            out = []
            for point in self.init_simplex:
                if not self._feasible(point):
                    point = self.space.snap(self.region.sample(self.rng))
                out.append(self._unit(point))
            return out
        if self.init_method in ("point", "random-point"):
            start = self.init_point if self.init_method == "point" \
                else self.space.snap(self.region.sample(self.rng))
            return self._axis_simplex(self._unit(start),
                                      np.maximum(self.init_radius, self._min_step))
        best: list[np.ndarray] = []
        for _ in range(_INIT_ATTEMPTS):
            if self.init_method == "lhs":
                us = self._latin_hypercube()
            else:
                us = [self._unit(self.space.snap(self.region.sample(self.rng)))
                      for _ in range(self.simplex_size)]
            best = us
            if not self._degenerate(np.array(us)):
                break
        return best

    def _latin_hypercube(self) -> list[np.ndarray]:
        """``simplex_size`` points, one per stratum of every axis; infeasible ones resampled."""
        k, dim = self.simplex_size, self.space.dim
        u = np.full((k, dim), 0.5)
        for axis in range(dim):
            u[:, axis] = (self.rng.permutation(k) + self.rng.random(k)) / k
        out = []
        for row in u:
            point = self.space.from_unit(row)
            if not self._feasible(point):
                for _ in range(_REPLACE_ATTEMPTS):
                    sampled = self.space.snap(self.region.sample(self.rng))
                    if self._feasible(sampled):
                        point = sampled
                        break
            out.append(self._unit(point, raw=row if self._feasible(point) else None))
        return out

    def _axis_simplex(self, x0: np.ndarray, radius: np.ndarray,
                      sign: float = 1.0) -> list[np.ndarray]:
        """``x0`` plus axis steps (like scipy's initial simplex): vertex j moves along one axis.

        With more vertices than movable axes + 1, later rounds step the other way and further.
        A step that would leave the unit cube is taken in the opposite direction.
        """
        us = [np.array(x0, dtype=float)]
        n_eff = len(self.active_axes)
        if n_eff == 0:  # nothing can move: every vertex is the one point of the space
            return us * self.simplex_size
        for j in range(1, self.simplex_size):
            axis = self.active_axes[(j - 1) % n_eff]
            ring = (j - 1) // n_eff
            direction = sign if ring % 2 == 0 else -sign
            step = float(radius[axis]) * (1 + ring // 2)
            us.append(self._axis_vertex(us, axis, direction * step))
        return us

    def _axis_vertex(self, us: list[np.ndarray], axis: int, delta: float) -> np.ndarray:
        """The first vertex ``us[0]`` moved along ``axis`` by ``delta``, or the other way when
        that leaves the unit cube. Where both ways give a point the simplex already holds
        (after snapping: a start at one end of a knob's range, whose second ring of vertices
        stepped back onto its first), the vertex goes to the axis's far end instead, the other
        end of the knob's range, as a screening design sets it: a repeated vertex measures
        nothing new and flattens the simplex. On the capture benchmark's surface (work_mem
        1MB–128MB on a linear scale from 128MB, where the best needs work_mem ≤ 4MB) the old
        simplex's ten evaluations reached it in none of 100 replays, this rule alone in 6 (the
        lone step to 1MB read below the others), with ``combine`` in 92
        (``benchmarks/results/capture_search.s33.md``)."""
        x0 = us[0]
        held = {self.space.key(self.space.from_unit(u)) for u in us}
        for moved in (x0[axis] + delta, x0[axis] - delta):
            if 0.0 <= moved <= 1.0:
                u = np.array(x0, dtype=float)
                u[axis] = moved
                if self.space.key(self.space.from_unit(u)) not in held:
                    return u
        u = np.array(x0, dtype=float)
        far = 0.0 if x0[axis] >= 0.5 else 1.0
        u[axis] = far
        if self.space.key(self.space.from_unit(u)) in held:
            # nothing new along this axis (a two-valued knob): the old rule's clamped step
            moved = x0[axis] + delta
            if moved > 1.0 or moved < 0.0:
                moved = x0[axis] - delta
            u[axis] = min(max(moved, 0.0), 1.0)
        return u
