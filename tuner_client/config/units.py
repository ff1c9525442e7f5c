"""Sizes in PostgreSQL's spelling: ``'64MB'`` to bytes and back (1024-based units)."""

from __future__ import annotations

import re

from harmony_base.errors import ConfigError
from harmony_base.units import MEMORY_UNITS, TIME_UNITS_MS

__all__ = ["MEMORY_UNITS", "TIME_UNITS_MS", "format_bytes", "parse_bytes"]

#: case-insensitive lookup: a config may say ``512mb`` or ``4gb``
_UNITS = {unit.lower(): size for unit, size in MEMORY_UNITS.items()}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?[bB])?\s*$")


def parse_bytes(value: str | int, *, what: str) -> int:
    """``'64MB'`` -> 67108864 (PostgreSQL spelling, 1024-based); a bare integer is bytes."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a size like '512MB', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{what}: a size must be >= 0, got {value}")
        return value
    m = _SIZE_RE.match(str(value))
    if not m:
        raise ConfigError(f"{what}: expected a size like '512MB' or '4GB' (units B, kB, MB, GB, "
                          f"TB), got {value!r}")
    number = float(m.group(1))
    unit = (m.group(2) or "B").lower()
    out = number * _UNITS[unit]
    if not float(out).is_integer():
        raise ConfigError(f"{what}: {value!r} is not a whole number of bytes")
    return int(out)


def format_bytes(n: int) -> str:
    """The largest exact PostgreSQL unit: 67108864 -> '64MB', 1536 -> '1536B'."""
    for unit, size in sorted(MEMORY_UNITS.items(), key=lambda item: -item[1]):
        if n and size > 1 and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"
