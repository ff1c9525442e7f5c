"""Feasible regions: the part of a search space a strategy may sample and move in.

A strategy asks its region whether a point is allowed, for a random allowed point, and for the
nearest allowed point to one it computed; the constraint plugin (:mod:`plugins.feasible`)
provides a region, and without constraints it is :class:`WholeSpace`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from harmony_base.space import Point, Space


class FeasibleRegion(Protocol):
    """What a strategy may ask of the constraints (the constraint plugin provides one)."""

    def contains(self, point: Point) -> bool: ...

    def sample(self, rng: np.random.Generator) -> Point: ...

    def project(self, point: Point) -> Point | None: ...


@dataclass
class WholeSpace:
    """The trivial feasible region: every point of the space."""

    space: Space

    def contains(self, point: Point) -> bool:
        return self.space.contains(point)

    def sample(self, rng: np.random.Generator) -> Point:
        return self.space.random_point(rng)

    def project(self, point: Point) -> Point | None:
        return self.space.snap(point)
