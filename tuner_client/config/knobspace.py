"""Knob ranges resolved against the live catalog: the session's typed search space.

:func:`resolve_knob_space` checks each :class:`~tuner_client.config.model.KnobSpec` against
``pg_settings`` and gives a :class:`KnobSpace`, which maps session points to PostgreSQL
settings and back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from harmony_base.errors import ConfigError
from harmony_base.space import EnumParam, IntParam, Param, RealParam, Space, Value
from tuner_client.config.model import KnobSpec
from tuner_client.config.units import TIME_UNITS_MS, parse_bytes
from tuner_client.knobs.catalog import Knob, KnobCatalog, KnobValue


@dataclass(frozen=True)
class KnobParam:
    """One tuned knob: its pg_settings row, its session parameter and the parameter's unit.

    Memory knobs are integer parameters counted in ``MB`` (``kB`` when a bound or the step is
    not a whole MB), time knobs in ``ms``; booleans and enums are enumerations.
    """

    knob: Knob
    param: Param
    unit: str | None

    @property
    def name(self) -> str:
        return self.knob.name

    def canonical(self, value: Value) -> KnobValue:
        """The knob's canonical value (bytes, ms, number, bool, str) for a session value."""
        if isinstance(self.param, EnumParam):
            return self.knob.parse(value)
        if self.unit is not None:
            return self.knob.from_unit(value, self.unit)
        return self.knob.parse(value)

    def setting(self, value: Value) -> str:
        """The PostgreSQL value string with units (``'64MB'``), for ALTER SYSTEM."""
        return self.knob.format(self.canonical(value))

    def session_value(self, canonical: KnobValue, *, snap: bool = True) -> Value:
        """A canonical knob value as a session value on the grid (snapped into the range);
        with ``snap=False`` a number stays where it is, off the grid or outside the range
        (an enumeration's value is always one of its values)."""
        if isinstance(self.param, EnumParam):
            text = self.knob.format(canonical)
            return text if text in self.param.values else self.param.values[0]
        number = (float(self.knob.to_unit(canonical, self.unit)) if self.unit is not None
                  else float(canonical))
        if snap:
            return self.param.snap(number)
        return int(number) if isinstance(self.param, IntParam) and number.is_integer() \
            else number


#: an online memory knob whose range spans this factor or more is searched on a log scale
#: unless its ``log`` says otherwise: a memory size acts by its ratio to the data it holds (a
#: sort or hash spills below its input, fits above), so a wide range is searched in equal
#: ratios, as a DBA doubles work_mem, not in equal megabytes. On a linear 1MB–128MB the range
#: mix's best (work_mem ≤ 4MB beside random_page_cost ≥ 1.5: 1.28× by pgbench) was 2 % of
#: the axis, and the search's Latin hypercube start reached it in 40 of 100 replays; on the
#: log scale it is 29 % of the axis and was reached in 100 of 100
#: (``benchmarks/results/capture_search.s33.md``). The offline session's shared_buffers keeps
#: its linear scale: the Buffer Miss Equation's probes place its search.
LOG_SPAN = 16


def log_by_default(kind: str, quantity: str | None, lo: float, hi: float) -> bool:
    """Whether a knob of ``kind`` (``online``/``offline``) and ``quantity`` ranging over
    ``lo``..``hi`` is searched on a log scale when its ``log`` is not written
    (:data:`LOG_SPAN`)."""
    return kind == "online" and quantity == "memory" and 0 < lo and hi >= LOG_SPAN * lo


@dataclass(frozen=True)
class KnobSpace:
    """The knobs of one session and the search space over them."""

    params: tuple[KnobParam, ...]

    @property
    def space(self) -> Space:
        return Space(tuple(p.param for p in self.params))

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def __getitem__(self, name: str) -> KnobParam:
        for p in self.params:
            if p.name == name:
                return p
        raise ConfigError(f"knob {name!r} is not tuned in this session; it tunes {self.names}")

    def settings(self, point: Mapping[str, Value]) -> dict[str, str]:
        """A session point as PostgreSQL settings with units."""
        return {p.name: p.setting(point[p.name]) for p in self.params}

    def point_from_settings(self, settings: Mapping[str, str], *,
                            snap: bool = True) -> dict[str, Value]:
        """Settings (e.g. the server's current ones) as the nearest session point (with
        ``snap=False``, exactly where they are: :meth:`KnobParam.session_value`)."""
        return {p.name: p.session_value(p.knob.parse(settings[p.name]), snap=snap)
                for p in self.params}


def resolve_knob_space(specs: tuple[KnobSpec, ...], catalog: KnobCatalog, *,
                       kind: str) -> KnobSpace:
    """Check each knob's range against ``catalog`` and build the session parameters.

    ``kind`` is ``offline`` or ``online``: a knob in the wrong section is an error. Errors
    name the file, line, knob and the allowed range.
    """
    out = []
    for spec in specs:
        try:
            out.append(_resolve_one(spec, catalog, kind))
        except ConfigError as exc:
            raise ConfigError(f"{spec.where}: {exc}") from None
    return KnobSpace(tuple(out))


def _resolve_one(spec: KnobSpec, catalog: KnobCatalog, kind: str) -> KnobParam:
    knob = catalog.tunable(spec.name)
    if knob.kind != kind:
        other = "online" if kind == "offline" else "offline"
        why = ("needs a restart (context postmaster)" if knob.kind == "offline"
               else f"can be changed without a restart (context {knob.context})")
        raise ConfigError(f"knob {knob.name!r} {why}; list it under {other}.knobs, not "
                          f"{kind}.knobs")
    current = knob.current()
    if knob.vartype in ("bool", "enum") or spec.values is not None:
        if spec.values is None:
            values: tuple[Any, ...] = ("off", "on") if knob.vartype == "bool" \
                else tuple(knob.enumvals or ())
        else:
            values = spec.values
        if knob.vartype not in ("bool", "enum", "string"):
            parsed = tuple(knob.parse(v) for v in values)
            names = tuple(knob.format(v) for v in parsed)
        else:
            names = tuple(knob.format(knob.parse(v)) for v in values)
        default = knob.format(current) if current is not None else None
        param: Param = EnumParam(knob.name, names, default=default if default in names else None)
        return KnobParam(knob, param, None)
    if knob.vartype == "string":
        raise ConfigError(f"knob {knob.name!r} is a string setting; give its candidate values "
                          f"as values: [...]")
    lo, hi = knob.parse_number(spec.min), knob.parse_number(spec.max)
    if lo > hi:
        raise ConfigError(f"knob {knob.name!r}: min {spec.min!r} is above max {spec.max!r}")
    step = _parse_step(knob, spec.step)
    unit: str | None = None
    if knob.quantity == "memory":
        unit = "MB" if all(Fraction(v) % 1024**2 == 0 for v in (lo, hi, step)) else "kB"
        if any(Fraction(v) % 1024 for v in (lo, hi, step)):
            raise ConfigError(f"knob {knob.name!r}: min, max and step must be whole kB, got "
                              f"{spec.min!r}, {spec.max!r}, {spec.step!r}")
    elif knob.quantity == "time":
        unit = "ms"
    log = spec.log if spec.log is not None else log_by_default(kind, knob.quantity, lo, hi)
    scale = Fraction(1) if unit is None else Fraction(knob.to_unit(1, unit))
    lo_u, hi_u, step_u = (Fraction(v) * scale for v in (lo, hi, step))
    current_u: Fraction | None = None
    if isinstance(current, int | float) and lo <= current <= hi:
        current_u = Fraction(current) * scale
    if knob.vartype == "integer":
        if any(v.denominator != 1 for v in (lo_u, hi_u, step_u)):
            raise ConfigError(f"knob {knob.name!r}: min, max and step must be whole numbers of "
                              f"{unit or 'units'}")
        param = IntParam(knob.name, int(lo_u), int(hi_u), step=max(1, int(step_u)), log=log,
                         default=int(round(current_u)) if current_u is not None else None,
                         unit=unit)
    else:
        param = RealParam(knob.name, float(lo_u), float(hi_u), step=float(step_u), log=log,
                          default=float(current_u) if current_u is not None else None, unit=unit)
    return KnobParam(knob, param, unit)


def _parse_step(knob: Knob, step: Any) -> KnobValue:
    if step is None:
        if knob.vartype == "integer":
            return int(knob.unit_size) if knob.unit_size.denominator == 1 else 1
        return 0.0
    if knob.quantity is None:
        value = float(step)
    else:
        # a step is a quantity, not a setting: parse it without the knob's range check
        value = parse_bytes(step, what=f"{knob.name} step") if knob.quantity == "memory" \
            else _parse_time_ms(knob, step)
    if value <= 0:
        raise ConfigError(f"knob {knob.name!r}: step must be > 0, got {step!r}")
    return int(value) if float(value).is_integer() and knob.vartype == "integer" else value


def _parse_time_ms(knob: Knob, step: object) -> float:
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d)\s*$", str(step))
    if not m:
        raise ConfigError(f"knob {knob.name!r}: step must be a duration like '10ms', got {step!r}")
    return float(m.group(1)) * float(TIME_UNITS_MS[m.group(2)])
