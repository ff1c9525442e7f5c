"""Search-space parameters: integers and reals on a step grid, and enumerations; a point is a
``dict`` from parameter name to value.

Grid rule: an integer or stepped real parameter takes the values ``min + k*step`` for
``k = 0 .. floor((max - min) / step)``. When the width is not a multiple of the step,
``max`` itself is not on the grid and the largest value is the last grid point below it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harmony_base.errors import ConfigError

Value = int | float | str
Point = dict[str, Value]

_EPS = 1e-9


@dataclass(frozen=True)
class IntParam:
    """An integer parameter ``min..max`` on a grid of ``step``; optionally log-scaled."""

    name: str
    min: int
    max: int
    step: int = 1
    log: bool = False
    default: int | None = None
    unit: str | None = None

    def __post_init__(self) -> None:
        _check_numeric(self)

    @property
    def size(self) -> int:
        """Number of grid values."""
        return (self.max - self.min) // self.step + 1

    @property
    def upper(self) -> int:
        """The largest value on the grid (``max`` when the width is a multiple of ``step``)."""
        return self.min + (self.size - 1) * self.step

    def value_at(self, index: int) -> int:
        return self.min + int(index) * self.step

    def index_of(self, value: Value) -> int:
        return int(round((float(value) - self.min) / self.step))

    def snap(self, value: Value) -> int:
        index = min(max(self.index_of(value), 0), self.size - 1)
        return self.value_at(index)


@dataclass(frozen=True)
class RealParam:
    """A real parameter ``min..max``; ``step`` 0 means continuous; optionally log-scaled."""

    name: str
    min: float
    max: float
    step: float = 0.0
    log: bool = False
    default: float | None = None
    unit: str | None = None

    def __post_init__(self) -> None:
        _check_numeric(self)

    @property
    def discrete(self) -> bool:
        return self.step > 0

    @property
    def size(self) -> int:
        """Number of grid values (only meaningful when ``step > 0``)."""
        if not self.discrete:
            raise ConfigError(f"parameter {self.name!r} is continuous (step 0): it has no grid")
        return int(math.floor((self.max - self.min) / self.step + _EPS)) + 1

    @property
    def upper(self) -> float:
        return self.value_at(self.size - 1) if self.discrete else self.max

    def value_at(self, index: int) -> float:
        value = self.min + int(index) * self.step
        if self.step >= 1e-9:
            # round() keeps grid values free of accumulated binary noise (0.1*3 -> 0.3);
            # only when the step is coarse enough that the rounding cannot move a grid point
            value = round(value, 12)
        # clip: a grid value never leaves the bounds, even by a rounding error
        return min(max(value, self.min), self.max)

    def index_of(self, value: Value) -> int:
        return int(round((float(value) - self.min) / self.step))

    def snap(self, value: Value) -> float:
        if not self.discrete:
            return min(max(float(value), self.min), self.max)
        index = min(max(self.index_of(value), 0), self.size - 1)
        return self.value_at(index)


@dataclass(frozen=True)
class EnumParam:
    """A categorical parameter: one of ``values``, with no order implied."""

    name: str
    values: tuple[Value, ...]
    default: Value | None = None

    def __post_init__(self) -> None:
        if not self.values:
            raise ConfigError(f"parameter {self.name!r}: an enumeration needs at least one value")
        if len(set(self.values)) != len(self.values):
            raise ConfigError(f"parameter {self.name!r}: enumeration values must be distinct, "
                              f"got {list(self.values)}")
        if self.default is not None and self.default not in self.values:
            raise ConfigError(f"parameter {self.name!r}: default {self.default!r} is not one of "
                              f"{list(self.values)}")

    @property
    def size(self) -> int:
        return len(self.values)

    def value_at(self, index: int) -> Value:
        return self.values[int(index)]

    def index_of(self, value: Value) -> int:
        try:
            return self.values.index(value)
        except ValueError:
            raise ConfigError(f"parameter {self.name!r}: {value!r} is not one of "
                              f"{list(self.values)}") from None

    def snap(self, value: Value) -> Value:
        if value in self.values:
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return self.values[min(max(int(round(value)), 0), len(self.values) - 1)]
        raise ConfigError(f"parameter {self.name!r}: {value!r} is not one of {list(self.values)}")


Param = IntParam | RealParam | EnumParam


def _check_numeric(p: IntParam | RealParam) -> None:
    if not p.name or not isinstance(p.name, str):
        raise ConfigError(f"a parameter needs a non-empty name, got {p.name!r}")
    for key in ("min", "max", "step"):
        v = getattr(p, key)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ConfigError(f"parameter {p.name!r}: {key} must be a finite number, got {v!r}")
    if isinstance(p, IntParam):
        for key in ("min", "max", "step"):
            if not float(getattr(p, key)).is_integer():
                raise ConfigError(f"parameter {p.name!r}: {key} of an integer parameter must be "
                                  f"an integer, got {getattr(p, key)!r}")
    if p.min > p.max:
        raise ConfigError(f"parameter {p.name!r}: min must be <= max, "
                          f"got min={p.min} > max={p.max}")
    if isinstance(p, IntParam) and p.step <= 0:
        raise ConfigError(f"parameter {p.name!r}: step must be > 0, got {p.step}")
    if isinstance(p, RealParam) and p.step < 0:
        raise ConfigError(f"parameter {p.name!r}: step must be >= 0 (0 = continuous), got {p.step}")
    if p.step > 0 and p.max > p.min and p.step > p.max - p.min:
        raise ConfigError(f"parameter {p.name!r}: step {p.step} is larger than the range "
                          f"{p.min}..{p.max}; use a smaller step or a wider range")
    if p.log and p.min <= 0:
        raise ConfigError(f"parameter {p.name!r}: a log-scaled parameter needs min > 0, "
                          f"got min={p.min}")
    d = p.default
    if d is not None and (isinstance(d, bool) or not isinstance(d, int | float)
                          or not math.isfinite(d)):
        raise ConfigError(f"parameter {p.name!r}: default must be a finite number, got {d!r}")
    if p.default is not None and not (p.min <= p.default <= p.max):
        raise ConfigError(f"parameter {p.name!r}: default {p.default} is outside "
                          f"{p.min}..{p.max}")
