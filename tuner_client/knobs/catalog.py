"""The knob catalog: every setting of a live server's ``pg_settings``, with exact unit handling.

Canonical values (what :meth:`Knob.parse` returns and :meth:`Knob.format` takes):

* memory knobs (``unit`` B, kB, MB, 8kB, ...): an ``int`` number of **bytes**;
* time knobs (``unit`` ms, s, min): **milliseconds** (``int`` for integer knobs, ``float``
  for real ones);
* unitless integer / real knobs: ``int`` / ``float``; booleans: ``bool``; enums and strings:
  ``str`` (enums in the server's spelling).

Values with a unit are converted exactly: a value that is not a whole number of the knob's
native unit (``shared_buffers = '100kB'`` with 8kB blocks) is an error, never rounded, and
:meth:`Knob.format` always writes a unit for a knob that has one (``'64MB'``, never ``65536``).
"""

from __future__ import annotations

import difflib
import logging
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import psycopg
from psycopg.rows import TupleRow

from harmony_base.errors import ConfigError
from harmony_base.units import MEMORY_UNITS, TIME_UNITS_MS
from tuner_client.knobs.text import format_quantity, parse_bool, parse_enum, parse_number
from tuner_client.knobs.versions import missing_knob_hint, version_text

logger = logging.getLogger(__name__)

KnobValue = int | float | bool | str

ONLINE_CONTEXTS = frozenset({"sighup", "superuser", "user"})
OFFLINE_CONTEXTS = frozenset({"postmaster"})

_UNIT_RE = re.compile(r"^(\d*)\s*([A-Za-z]+)$")
@dataclass(frozen=True)
class Knob:
    """One row of ``pg_settings``: type, native unit, range, context and current values."""

    name: str
    vartype: str  # bool | integer | real | enum | string
    unit: str | None
    min_val: str | None
    max_val: str | None
    enumvals: tuple[str, ...] | None
    context: str
    boot_val: str | None
    reset_val: str | None
    setting: str | None
    block_size: int = 8192

    # -- classification --------------------------------------------------------------
    @property
    def tunable(self) -> bool:
        """True when the knob can be changed by the tuner (online or with a restart)."""
        return self.context in ONLINE_CONTEXTS or self.context in OFFLINE_CONTEXTS

    @property
    def kind(self) -> Literal["online", "offline"]:
        """``online`` (reload is enough) or ``offline`` (restart); ConfigError if not tunable."""
        if self.context in OFFLINE_CONTEXTS:
            return "offline"
        if self.context in ONLINE_CONTEXTS:
            return "online"
        raise ConfigError(
            f"knob {self.name!r} cannot be tuned: its pg_settings context is "
            f"{self.context!r} (only postmaster, sighup, superuser and user knobs can be set; "
            "internal/backend knobs are fixed at build, initdb or connection time)"
        )

    @property
    def quantity(self) -> Literal["memory", "time"] | None:
        """What the unit measures: ``memory``, ``time`` or None for unitless knobs."""
        if self.unit is None:
            return None
        base = self._split_unit()[1]
        return "memory" if base in MEMORY_UNITS else "time"

    @property
    def is_numeric(self) -> bool:
        return self.vartype in ("integer", "real")

    def _split_unit(self) -> tuple[int, str]:
        match = _UNIT_RE.match(self.unit or "")
        known = match is not None and (
            match.group(2) in MEMORY_UNITS or match.group(2) in TIME_UNITS_MS
        )
        if match is None or not known:
            raise ConfigError(f"knob {self.name!r} has a unit {self.unit!r} this tuner does not "
                              "know how to convert")
        return int(match.group(1) or 1), match.group(2)

    @property
    def unit_size(self) -> Fraction:
        """Size of one native unit in canonical units (bytes or ms); 1 for unitless knobs."""
        if self.unit is None:
            return Fraction(1)
        if self.unit == f"{self.block_size // 1024}kB":
            # block-counted knobs (shared_buffers, effective_cache_size, temp_buffers, ...)
            return Fraction(self.block_size)
        mult, base = self._split_unit()
        if base in MEMORY_UNITS:
            return Fraction(mult * MEMORY_UNITS[base])
        return mult * TIME_UNITS_MS[base]

    # -- native <-> canonical -------------------------------------------------------
    def from_native(self, native: int | float | str) -> int | float:
        """Canonical value of a number in the knob's native unit (as in ``pg_settings``)."""
        if self.vartype == "integer":
            n = int(Fraction(str(native)))
            value = Fraction(n) * self.unit_size
            return int(value) if value.denominator == 1 else float(value)
        if self.vartype == "real":
            return float(native) * float(self.unit_size)
        raise ConfigError(f"knob {self.name!r} is {self.vartype}, not numeric")

    def to_native(self, value: KnobValue) -> int | float:
        """The canonical ``value`` in the knob's native unit; exact for integer knobs."""
        if self.vartype == "integer":
            native = Fraction(value) / self.unit_size if not isinstance(value, str) else None
            if native is None or native.denominator != 1:
                raise ConfigError(
                    f"{self.name} is counted in whole units of {self.unit or 1}; "
                    f"{self._describe(value)} is not a whole number of them"
                )
            return int(native)
        if self.vartype == "real":
            return float(value) / float(self.unit_size)
        raise ConfigError(f"knob {self.name!r} is {self.vartype}, not numeric")

    def bytes_to_native(self, n_bytes: int) -> int:
        """Bytes → native units of a memory knob (exact, or ConfigError)."""
        self._require_memory()
        return int(self.to_native(n_bytes))

    def native_to_bytes(self, native: int) -> int:
        """Native units of a memory knob → bytes."""
        self._require_memory()
        return int(Fraction(native) * self.unit_size)

    def to_unit(self, value: KnobValue, unit: str) -> Fraction:
        """A canonical memory/time value expressed in ``unit`` (e.g. bytes → MB), exactly."""
        return Fraction(value) / self.unit_factor(unit)

    def from_unit(self, number: int | float | str | Fraction, unit: str) -> KnobValue:
        """A number in ``unit`` (64 in ``MB``) → canonical value, range-checked as in parse()."""
        canonical = Fraction(number) * self.unit_factor(unit)
        if self.vartype == "integer":
            value: KnobValue = int(canonical) if canonical.denominator == 1 else float(canonical)
        else:
            value = float(canonical)
        self._check_range(value, f"{number}{unit}")
        return value

    def unit_factor(self, unit: str) -> Fraction:
        """Canonical units (bytes or ms) in one ``unit`` of the knob's quantity (``MB``, ``s``)."""
        q = self.quantity
        if q == "memory" and unit in MEMORY_UNITS:
            return Fraction(MEMORY_UNITS[unit])
        if q == "time" and unit in TIME_UNITS_MS:
            return TIME_UNITS_MS[unit]
        raise ConfigError(self._unit_error(unit))

    def _require_memory(self) -> None:
        if self.quantity != "memory":
            raise ConfigError(f"knob {self.name!r} is not a memory knob (unit {self.unit!r})")

    # -- current values ---------------------------------------------------------------
    def current(self) -> KnobValue | None:
        """Canonical value of ``setting`` (what the server had when the catalog was read)."""
        return None if self.setting is None else self.from_setting(self.setting)

    def default(self) -> KnobValue | None:
        """Canonical value of ``boot_val`` (the compiled-in default)."""
        return None if self.boot_val is None else self.from_setting(self.boot_val)

    def from_setting(self, text: str) -> KnobValue:
        """Canonical value of a ``pg_settings.setting``-style string (native units)."""
        if self.vartype in ("integer", "real"):
            return self.from_native(text)
        if self.vartype == "bool":
            return text == "on"
        return text

    # -- parse / format --------------------------------------------------------------------
    def parse(self, value: Any, *, round_down: bool = False) -> KnobValue:
        """Convert a user value (``'64MB'``, ``4``, ``'on'``, ``1.5``) to canonical, checked.

        Raises ConfigError naming the knob, the allowed range (with units) and the value
        given when the value has a wrong unit, is out of range or not exact. With
        ``round_down`` an integer knob's value between two whole units is rounded down to
        one (for values computed by rules of thumb, e.g. ``'6171023kB'`` of 8kB pages).
        """
        if self.vartype == "bool":
            return parse_bool(self.name, value)
        if self.vartype == "enum":
            return parse_enum(self.name, self.enumvals or (), value)
        if self.vartype == "string":
            if not isinstance(value, str):
                raise ConfigError(f"{self.name} takes a string, but got {value!r}")
            return value
        result = parse_number(self, value, round_down=round_down)
        self._check_range(result, value)
        return result

    def check(self, value: KnobValue) -> KnobValue:
        """Validate a canonical value (bytes, ms, number, bool, enum string); return it."""
        if self.vartype == "bool":
            if not isinstance(value, bool):
                raise ConfigError(f"{self.name} is a boolean, but got {value!r}")
            return value
        if self.vartype in ("enum", "string"):
            return self.parse(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{self.name} takes a number, but got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{self.name} must be a finite number, but got {value!r}")
        if self.vartype == "integer":
            self.to_native(value)  # exactness
            if isinstance(value, float) and value.is_integer():
                value = int(value)
        self._check_range(value, self._describe(value))
        return value

    def coerce(self, value: Any) -> KnobValue:
        """A string is user input (see parse), anything else a canonical value (see check)."""
        return self.parse(value) if isinstance(value, str) else self.check(value)

    def parse_number(self, value: object) -> int | float:
        """:meth:`parse` for a numeric (integer or real) knob: its canonical number."""
        parsed = self.parse(value)
        if isinstance(parsed, bool) or not isinstance(parsed, int | float):
            raise ConfigError(f"knob {self.name!r} is {self.vartype}, not numeric; got {value!r}")
        return parsed

    def format(self, value: KnobValue) -> str:
        """A string for ``ALTER SYSTEM`` / postgresql.conf, with a unit if the knob has one."""
        if self.vartype == "bool":
            return "on" if value else "off"
        if self.vartype in ("enum", "string"):
            return str(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{self.name}: cannot format {value!r} as a {self.vartype}")
        if self.unit is None:
            if self.vartype == "integer":
                return str(int(value))
            return repr(float(value))
        native = self.to_native(value)
        if native == -1 and self.min_val is not None and float(self.min_val) == -1:
            return "-1"  # the "use the other setting / disabled" sentinel has no unit
        return format_quantity(self.quantity, value)

    def _describe(self, value: object) -> str:
        if isinstance(value, int | float) and not isinstance(value, bool) and self.unit:
            try:
                return f"{value} ({format_quantity(self.quantity, value)})"
            except (ValueError, ZeroDivisionError):
                return repr(value)
        return repr(value)

    def range_bounds(self) -> tuple[str, str] | None:
        """The allowed minimum and maximum with units (``('64kB', '2147483647kB')``), or None."""
        if self.min_val is None or self.max_val is None:
            return None
        if self.unit is None:
            return self.min_val, self.max_val
        lo, hi = self.from_native(self.min_val), self.from_native(self.max_val)
        return format_quantity(self.quantity, lo), format_quantity(self.quantity, hi)

    def range_text(self) -> str:
        """The allowed range with units, e.g. ``64kB .. 2147483647kB``."""
        bounds = self.range_bounds()
        return "any value" if bounds is None else f"{bounds[0]} .. {bounds[1]}"

    def _check_range(self, value: KnobValue, given: object) -> None:
        if self.min_val is None or self.max_val is None or not isinstance(value, int | float):
            return
        native = self.to_native(value) if self.vartype == "integer" else value / self.unit_size
        if not (float(self.min_val) <= float(native) <= float(self.max_val)):
            lo, hi = self.range_bounds() or ("", "")
            raise ConfigError(f"{self.name} must be between {lo} and {hi}, but got {given!r}")

    def _unit_error(self, unit: str) -> str:
        allowed = MEMORY_UNITS if self.quantity == "memory" else TIME_UNITS_MS
        hint = ""
        for u in allowed:
            if u.lower() == unit.lower():
                hint = f" (units are case-sensitive: did you mean {u!r}?)"
        kind = "a memory" if self.quantity == "memory" else "a time"
        return (f"{self.name} is {kind} knob; valid units are {', '.join(allowed)}, "
                f"but got unit {unit!r}{hint}")



class KnobCatalog:
    """All settings of one server, looked up case-insensitively; unknown names get suggestions."""

    def __init__(self, knobs: dict[str, Knob], block_size: int = 8192,
                 server_version_num: int | None = None) -> None:
        self._knobs = {k.lower(): v for k, v in knobs.items()}
        self.block_size = block_size
        self.server_version_num = server_version_num

    @classmethod
    def from_connection(cls, conn: psycopg.Connection[TupleRow]) -> KnobCatalog:
        """Read ``pg_settings`` (and ``block_size``) from a live server."""
        rows = conn.execute(
            "SELECT name, vartype, unit, min_val, max_val, enumvals, context, boot_val, "
            "reset_val, setting FROM pg_settings"
        ).fetchall()
        extra = conn.execute(
            "SELECT current_setting('block_size')::int, current_setting('server_version_num')::int"
        ).fetchone()
        assert extra is not None  # a SELECT without FROM always returns one row
        block_size, version = int(extra[0]), int(extra[1])
        knobs = {
            r[0]: Knob(
                name=r[0], vartype=r[1], unit=r[2], min_val=r[3], max_val=r[4],
                enumvals=tuple(r[5]) if r[5] is not None else None, context=r[6],
                boot_val=r[7], reset_val=r[8], setting=r[9], block_size=block_size,
            )
            for r in rows
        }
        logger.debug("knob catalog: %d settings, block_size %d, server %d",
                     len(knobs), block_size, version)
        return cls(knobs, block_size=block_size, server_version_num=version)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._knobs

    def __iter__(self) -> Iterator[str]:
        return iter(self._knobs)

    def __len__(self) -> int:
        return len(self._knobs)

    def __getitem__(self, name: str) -> Knob:
        try:
            return self._knobs[name.lower()]
        except KeyError:
            raise ConfigError(self._unknown(name)) from None

    @property
    def version(self) -> str | None:
        """The server's version (``18.6``), None when the catalog was not read from a server."""
        return None if self.server_version_num is None else version_text(self.server_version_num)

    def _unknown(self, name: str) -> str:
        close = difflib.get_close_matches(name.lower(), list(self._knobs), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        where = f"pg_settings of this PostgreSQL {self.version} server" if self.version \
            else "pg_settings"
        return (f"unknown PostgreSQL setting {name!r} (not in {where})"
                f"{missing_knob_hint(name, self.server_version_num)}{hint}")

    def tunable(self, name: str) -> Knob:
        """The knob called ``name``; ConfigError when unknown or not tunable."""
        knob = self[name]
        _ = knob.kind  # raises for internal/backend knobs
        return knob

    def parse(self, name: str, value: object) -> KnobValue:
        """Shorthand for ``catalog[name].parse(value)``."""
        return self[name].parse(value)

    def format(self, name: str, value: KnobValue) -> str:
        """Shorthand for ``catalog[name].format(value)``."""
        return self[name].format(value)
