"""PostgreSQL's units, stated once: memory units in bytes and time units in milliseconds.

The spelling is PostgreSQL's (``kB``, ``MB``; ``ms``, ``min``), 1024-based for memory.
Every parser and formatter of sizes and durations (the tuner's config and knobs, its
metrics, the budget, warm starts) reads these tables.
"""

from __future__ import annotations

from fractions import Fraction

__all__ = ["MEMORY_UNITS", "TIME_UNITS_MS", "unit_size"]

#: bytes per memory unit
MEMORY_UNITS: dict[str, int] = {"B": 1, "kB": 1024, "MB": 1024**2, "GB": 1024**3,
                                "TB": 1024**4}
#: milliseconds per time unit (exact)
TIME_UNITS_MS: dict[str, Fraction] = {
    "us": Fraction(1, 1000),
    "ms": Fraction(1),
    "s": Fraction(1000),
    "min": Fraction(60_000),
    "h": Fraction(3_600_000),
    "d": Fraction(86_400_000),
}


def unit_size(unit: str) -> tuple[str, float] | None:
    """``(quantity, size in base units)`` of a unit: bytes for memory, seconds for time;
    ``None`` for a unit that is neither (the match is exact: ``kB``, not ``KB``)."""
    if unit in MEMORY_UNITS:
        return "memory", float(MEMORY_UNITS[unit])
    if unit in TIME_UNITS_MS:
        return "time", float(TIME_UNITS_MS[unit] / 1000)
    return None
