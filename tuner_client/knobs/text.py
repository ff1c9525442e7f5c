"""Knob values as text: reading a user's value (a number with a unit, a boolean, an enum)
into the canonical form of :mod:`tuner_client.knobs.catalog` and writing a quantity back with the
largest exact unit (``'64MB'``, ``'5min'``).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Literal, Protocol

from harmony_base.errors import ConfigError
from harmony_base.units import MEMORY_UNITS, TIME_UNITS_MS


class KnobLike(Protocol):
    """What reading and writing a value needs of a knob
    (:class:`tuner_client.knobs.catalog.Knob`)."""

    @property
    def name(self) -> str: ...

    @property
    def vartype(self) -> str: ...

    @property
    def unit(self) -> str | None: ...

    @property
    def quantity(self) -> Literal["memory", "time"] | None: ...

    @property
    def unit_size(self) -> Fraction: ...

    def range_text(self) -> str: ...

    def unit_factor(self, unit: str) -> Fraction: ...

_QUANTITY_RE = re.compile(
    r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$"
)
_TRUE = ("on", "true", "yes", "1")
_FALSE = ("off", "false", "no", "0")


def _fraction(text: str) -> Fraction:
    return Fraction(text)


def parse_number(knob: KnobLike, value: object, *, round_down: bool = False) -> int | float:
    """A user's number for a numeric knob (``'64MB'``, ``4``, ``1.5``) in canonical units,
    exactly: a unit of the knob's quantity is required unless the knob has none (0 and -1 may
    go without), and an integer knob's value must be a whole number of its native units."""
    if isinstance(value, bool):
        raise ConfigError(f"{knob.name} takes a number, but got {value!r}")
    if isinstance(value, int | float):
        number, unit = Fraction(str(value)) if isinstance(value, float) else Fraction(value), ""
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{knob.name} must be a finite number, but got {value!r}")
    elif isinstance(value, str):
        match = _QUANTITY_RE.match(value)
        if not match:
            raise ConfigError(
                f"{knob.name} takes a number"
                + (f" with a unit like '64{_example_unit(knob)}'" if knob.unit else "")
                + f" (allowed {knob.range_text()}), but got {value!r}"
            )
        number, unit = _fraction(match.group(1)), match.group(2)
    else:
        raise ConfigError(f"{knob.name} takes a number, but got {value!r}")
    if knob.unit is None:
        if unit:
            raise ConfigError(f"{knob.name} has no unit, but got {value!r} with unit {unit!r}")
        canonical = number
    elif not unit:
        # only the unit-free sentinels 0 and -1 may be given without a unit
        if number not in (0, -1):
            raise ConfigError(
                f"{knob.name} needs a unit (e.g. '{value}{_example_unit(knob)}'); a bare "
                f"number is ambiguous (native unit {knob.unit}). Allowed "
                f"{knob.range_text()}, got {value!r}"
            )
        canonical = number * knob.unit_size
    else:
        canonical = number * knob.unit_factor(unit)
    if knob.vartype == "integer":
        if round_down:
            canonical = (canonical // knob.unit_size) * knob.unit_size
        if (canonical / knob.unit_size).denominator != 1:
            raise ConfigError(
                f"{knob.name} is counted in whole units of {knob.unit or 1}; {value!r} is not "
                f"a whole number of them (allowed {knob.range_text()})"
            )
        return int(canonical) if canonical.denominator == 1 else float(canonical)
    return float(canonical)


def _example_unit(knob: KnobLike) -> str:
    return "MB" if knob.quantity == "memory" else "ms"


def parse_bool(name: str, value: object) -> bool:
    """A boolean knob's value from ``on``/``off`` and their synonyms, a bool, 0 or 1."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        low = value.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise ConfigError(f"{name} is a boolean (on/off), but got {value!r}")


def parse_enum(name: str, allowed: tuple[str, ...], value: object) -> str:
    """An enum knob's value in the server's spelling, matched case-insensitively."""
    if isinstance(value, bool):
        value = "on" if value else "off"
    text = str(value).strip().lower()
    for option in allowed:
        if option.lower() == text:
            return option
    raise ConfigError(f"{name} must be one of {', '.join(allowed)}, but got {value!r}")


def format_quantity(quantity: str | None, value: int | float) -> str:
    """A canonical memory (bytes) or time (ms) value in the largest unit that is exact."""
    table: dict[str, Fraction]
    if quantity == "memory":
        table = {u: Fraction(f) for u, f in MEMORY_UNITS.items()}
        order = ["TB", "GB", "MB", "kB", "B"]
    else:
        table = dict(TIME_UNITS_MS)
        order = ["d", "h", "min", "s", "ms"]
    exact = Fraction(value)
    if exact == 0:
        return f"0{order[-1]}"
    for unit in order:
        q = exact / table[unit]
        if q.denominator == 1:
            return f"{q.numerator}{unit}"
    return f"{float(value)!r}ms"
