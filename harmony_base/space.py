"""Typed search spaces: integer and real parameters on a step grid, and enumerations.

A point is a ``dict`` from parameter name to value. Every point a strategy hands out
goes through :meth:`Space.snap`, which puts it on the step grid and inside the bounds. The
parameters themselves live in :mod:`harmony_base.params` (importable from here too).

Grid rule: an integer or stepped real parameter takes the values ``min + k*step`` for
``k = 0 .. floor((max - min) / step)``. When the width is not a multiple of the step,
``max`` itself is not on the grid and the largest value is the last grid point below it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSON
from harmony_base.params import EnumParam, IntParam, Param, Point, RealParam, Value

__all__ = ["EnumParam", "IntParam", "Param", "Point", "RealParam", "Space", "Value",
           "space_from_dicts"]

_N = TypeVar("_N", int, float)


@dataclass(frozen=True)
class Space:
    """An ordered tuple of parameters. Immutable; narrowing returns a new space."""

    params: tuple[Param, ...]
    _by_name: dict[str, Param] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.params:
            raise ConfigError("a search space needs at least one parameter")
        by_name: dict[str, Param] = {}
        for p in self.params:
            if p.name in by_name:
                raise ConfigError(f"parameter {p.name!r} is defined twice")
            by_name[p.name] = p
        object.__setattr__(self, "_by_name", by_name)

    # -- lookup ---------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    @property
    def dim(self) -> int:
        return len(self.params)

    def __getitem__(self, name: str) -> Param:
        try:
            return self._by_name[name]
        except KeyError:
            raise ConfigError(f"unknown parameter {name!r}; the space has {self.names}") from None

    def numeric(self, name: str) -> IntParam | RealParam:
        """The int or real parameter ``name`` (a :class:`ConfigError` for an enum)."""
        param = self[name]
        if isinstance(param, EnumParam):
            raise ConfigError(f"parameter {name!r} is an enum; a numeric one is needed here")
        return param

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @property
    def is_discrete(self) -> bool:
        """True when every parameter has a finite grid (so the space can be enumerated)."""
        return all(not isinstance(p, RealParam) or p.discrete for p in self.params)

    def grid_size(self) -> int:
        n = 1
        for p in self.params:
            n *= p.size
        return n

    # -- points ---------------------------------------------------------------
    def check_point(self, point: Mapping[str, JSON]) -> None:
        """Raise :class:`ConfigError` unless ``point`` names exactly this space's parameters."""
        missing = [n for n in self.names if n not in point]
        extra = [n for n in point if n not in self._by_name]
        if missing or extra:
            raise ConfigError(f"point {dict(point)} does not match the space: missing {missing}, "
                              f"unknown {extra}")

    def key(self, point: Mapping[str, Any]) -> tuple[Value, ...]:
        """A hashable identity for a (snapped) point: its values in parameter order."""
        return tuple(point[n] for n in self.names)

    def iter_grid(self) -> Iterator[Point]:
        """Every grid point in odometer order (the last parameter changes fastest)."""
        if not self.is_discrete:
            continuous = [p.name for p in self.params
                          if isinstance(p, RealParam) and not p.discrete]
            raise ConfigError(f"the space cannot be enumerated: parameters {continuous} are "
                              "continuous (step 0); give them a step > 0")
        names = self.names
        for indices in itertools.product(*(range(p.size) for p in self.params)):
            yield {n: p.value_at(i) for n, p, i in zip(names, self.params, indices, strict=True)}

    def snap(self, point: Mapping[str, Any]) -> Point:
        """Put every value on its grid and inside its bounds."""
        self.check_point(point)
        return {p.name: p.snap(point[p.name]) for p in self.params}

    def contains(self, point: Mapping[str, JSON]) -> bool:
        """True when ``point`` is exactly on the grid and inside the bounds."""
        try:
            return self.snap(point) == {n: point[n] for n in self.names}
        except ConfigError:
            return False

    def default_point(self) -> Point:
        """Each parameter's default, or the middle of its grid when it has none."""
        out: Point = {}
        for p in self.params:
            if p.default is not None:
                out[p.name] = p.snap(p.default)
            elif isinstance(p, EnumParam):
                out[p.name] = p.values[0]
            else:
                out[p.name] = self.from_unit_value(p, 0.5)
        return out

    # -- unit-cube normalisation ---------------------------------------------
    def to_unit(self, point: Mapping[str, Any]) -> np.ndarray:
        """Map a point into ``[0, 1]^dim`` (log-scaled parameters logarithmically)."""
        return np.array([self.to_unit_value(p, point[p.name]) for p in self.params], dtype=float)

    def from_unit(self, x: Sequence[float] | np.ndarray) -> Point:
        """Map a vector of ``[0, 1]^dim`` (clipped) back to a snapped point."""
        return {p.name: self.from_unit_value(p, float(v))
                for p, v in zip(self.params, x, strict=True)}

    @staticmethod
    def to_unit_value(p: Param, value: Value) -> float:
        if isinstance(p, EnumParam):
            return 0.5 if p.size == 1 else p.index_of(value) / (p.size - 1)
        hi = p.upper
        if hi == p.min:
            return 0.5
        if p.log:
            span = math.log(hi) - math.log(p.min)
            if span == 0.0:  # a range too narrow for its logarithm to tell its ends apart
                return 0.5
            return (math.log(float(value)) - math.log(p.min)) / span
        return (float(value) - p.min) / (hi - p.min)

    @staticmethod
    def from_unit_value(p: Param, u: float) -> Value:
        u = min(max(u, 0.0), 1.0)
        if isinstance(p, EnumParam):
            return p.values[int(round(u * (p.size - 1)))]
        hi = p.upper
        if u <= 0.0 or u >= 1.0:  # the ends exactly, without exp/log round-off
            raw = p.min if u <= 0.0 else hi
        elif p.log:
            raw = math.exp(math.log(p.min) + u * (math.log(hi) - math.log(p.min)))
        else:
            raw = p.min + u * (hi - p.min)
        return p.snap(raw)

    def unit_resolution(self) -> np.ndarray:
        """Per-parameter grid spacing in unit coordinates (0 for continuous parameters)."""
        res = []
        for p in self.params:
            if isinstance(p, RealParam) and not p.discrete:
                res.append(0.0)
            else:
                res.append(1.0 / (p.size - 1) if p.size > 1 else 1.0)
        return np.array(res)

    # -- sampling and narrowing ----------------------------------------------
    def random_point(self, rng: np.random.Generator) -> Point:
        """A point drawn uniformly from each parameter's grid (or range)."""
        out: Point = {}
        for p in self.params:
            if isinstance(p, RealParam) and not p.discrete:
                out[p.name] = p.snap(rng.uniform(p.min, p.max))
            else:
                out[p.name] = p.value_at(int(rng.integers(p.size)))
        return out

    def narrowed(self, bounds: Mapping[str, tuple[float, float]]) -> Space:
        """A new space with the given parameters' ``(min, max)`` replaced by grid values.

        Bounds are snapped onto the parameter's existing grid, so the grid stays aligned.
        """
        params: list[Param] = []
        for p in self.params:
            if p.name in bounds and isinstance(p, IntParam):
                ilo, ihi = (p.snap(v) for v in bounds[p.name])
                params.append(replace(p, min=ilo, max=max(ilo, ihi),
                                      default=_default_within(p.default, ilo, ihi)))
            elif p.name in bounds and isinstance(p, RealParam):
                flo, fhi = (p.snap(v) for v in bounds[p.name])
                params.append(replace(p, min=flo, max=max(flo, fhi),
                                      default=_default_within(p.default, flo, fhi)))
            else:
                params.append(p)
        return Space(tuple(params))

    def to_dict(self) -> list[dict[str, Any]]:
        """A JSON-ready description (the inverse of :func:`space_from_dicts`)."""
        out = []
        for p in self.params:
            if isinstance(p, EnumParam):
                out.append({"name": p.name, "type": "enum", "values": list(p.values),
                            "default": p.default})
            else:
                out.append({"name": p.name, "type": "int" if isinstance(p, IntParam) else "real",
                            "min": p.min, "max": p.max, "step": p.step, "log": p.log,
                            "default": p.default, "unit": p.unit})
        return out


def _default_within(default: _N | None, lo: _N, hi: _N) -> _N | None:
    """A narrowed parameter keeps its default only when it lies in the new bounds."""
    return default if default is not None and lo <= default <= hi else None


def space_from_dicts(items: Iterable[Mapping[str, Any]]) -> Space:
    """Build a space from plain dictionaries (as in a session definition)."""
    params: list[Param] = []
    for item in items:
        kind = item.get("type", "int")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"a parameter needs a non-empty name, got {name!r}")
        if kind == "enum":
            params.append(EnumParam(name=name, values=tuple(item["values"]),
                                    default=item.get("default")))
        elif kind == "int":
            params.append(IntParam(name=name, min=item["min"], max=item["max"],
                                   step=item.get("step", 1), log=item.get("log", False),
                                   default=item.get("default"), unit=item.get("unit")))
        elif kind == "real":
            params.append(RealParam(name=name, min=item["min"], max=item["max"],
                                    step=item.get("step", 0.0), log=item.get("log", False),
                                    default=item.get("default"), unit=item.get("unit")))
        else:
            raise ConfigError(f"parameter {name!r}: type must be one of int, real, enum; "
                              f"got {kind!r}")
    return Space(tuple(params))
