"""Warm start: begin a new session from the best points of compatible prior sessions.

Matching rule (stated once, used everywhere): a prior session is *compatible* with a new
definition when

1. it tunes exactly the same parameter names (as a set; ranges may differ) in the same or
   convertible units (memory ``B``/``kB``/``MB``/``GB``/``TB``, time ``us``/``ms``/``s``/
   ``min``/``h``/``d``: prior values are converted to the new session's unit),
2. its objective has the same name and goal (maximize/minimize),
3. when both definitions' metadata name a ``workload``, the workloads are equal, and
4. its host is *similar*: at least one of its clients ran on a host with the same CPU count
   and RAM within 25 % of the new host's (``|a - b| <= 0.25 * max(a, b)``).

A prior session whose hosts recorded no CPU/RAM facts (or a new host without them) has an
*unknown* host match: such sessions are used only when no compatible session matches the
host. A known but different host excludes the session.

From the compatible sessions, every measured point inside the new ranges is snapped to the
new grid and ranked by its best value (best-of-n, like the measurement protocol). The
initial simplex takes the best point first, then the next best points that keep the simplex
full-dimensional, then axis steps around the best point where prior points run out.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from harmony_base.errors import ConfigError
from harmony_base.hostinfo import host_metadata
from harmony_base.jsontypes import JSON, JSONObject
from harmony_base.space import EnumParam, Param, Point, RealParam, Space
from harmony_base.units import MEMORY_UNITS, TIME_UNITS_MS, unit_size
from harmony_core.definition import SessionDefinition
from harmony_core.priordata import HostInfo, PriorSession
from strategies.base import Strategy

__all__ = ["Compatibility", "apply_warm_start", "check_compatible",
           "ranked_prior_points", "select_compatible", "warm_start_options",
           "warm_start_simplex"]

logger = logging.getLogger(__name__)

#: relative RAM difference two hosts may have and still count as similar
RAM_TOLERANCE = 0.25
#: axis step (unit cube) used to complete a simplex when prior points run out
FILL_RADIUS = 0.1
#: parameter units the warm start converts between: unit -> (quantity, size in base units)
UNIT_SIZES: dict[str, tuple[str, float]] = {
    unit: size for unit in (*MEMORY_UNITS, *TIME_UNITS_MS) if (size := unit_size(unit))}


@dataclass(frozen=True)
class Compatibility:
    """Whether a prior session may seed a new one, whether its host matched, and why."""

    session: str
    compatible: bool
    host_match: bool | None  # None: unknown (no host facts on one side)
    reason: str


def hosts_similar(a: Mapping[str, JSON] | HostInfo, b: Mapping[str, JSON] | HostInfo, *,
                  ram_tolerance: float = RAM_TOLERANCE) -> bool | None:
    """Same CPU count and RAM within ``ram_tolerance``; ``None`` when a fact is missing."""
    (cpu_a, ram_a), (cpu_b, ram_b) = _facts(a), _facts(b)
    if cpu_a is None or ram_a is None or cpu_b is None or ram_b is None:
        return None
    return cpu_a == cpu_b and abs(ram_a - ram_b) <= ram_tolerance * max(ram_a, ram_b)


def _facts(h: Mapping[str, Any] | HostInfo) -> tuple[int | None, int | None]:
    if isinstance(h, HostInfo):
        return h.cpu_count, h.ram_bytes
    return h.get("cpu_count"), h.get("ram_bytes")


def unit_factors(prior: PriorSession, space: Space) -> dict[str, float] | str:
    """Per parameter, the factor turning the prior's values into ``space``'s unit; or why
    the units cannot be converted."""
    old_units = {p.get("name"): p.get("unit") for p in prior.definition.get("parameters", [])}
    factors: dict[str, float] = {}
    for p in space.params:
        if isinstance(p, EnumParam):
            factors[p.name] = 1.0
            continue
        old, new = old_units.get(p.name), p.unit
        if old == new:
            factors[p.name] = 1.0
            continue
        a, b = UNIT_SIZES.get(str(old)), UNIT_SIZES.get(str(new))
        if a is None or b is None or a[0] != b[0]:
            return (f"parameter {p.name} is in {old or 'no unit'} in the prior session and in "
                    f"{new or 'no unit'} in the new one; they do not convert")
        factors[p.name] = a[1] / b[1]
    return factors


def check_compatible(prior: PriorSession, definition: SessionDefinition,
                     host: Mapping[str, JSON] | None = None, *,
                     ram_tolerance: float = RAM_TOLERANCE) -> Compatibility:
    """Apply the matching rule (module docstring) to one prior session."""
    name = prior.name
    want = set(definition.space.names)
    have = set(prior.parameter_names)
    if want != have:
        return Compatibility(name, False, None, f"different parameters: prior has "
                             f"{sorted(have)}, the new session {sorted(want)}")
    factors = unit_factors(prior, definition.space)
    if isinstance(factors, str):
        return Compatibility(name, False, None, factors)
    objective = prior.definition.get("objective", {})
    goal = "maximize" if definition.maximize else "minimize"
    if objective.get("name", "value") != definition.objective or \
            objective.get("goal", "minimize") != goal:
        return Compatibility(name, False, None, f"different objective: prior "
                             f"{objective.get('name')}/{objective.get('goal')}, new "
                             f"{definition.objective}/{goal}")
    old_workload = prior.definition.get("metadata", {}).get("workload")
    new_workload = definition.metadata.get("workload")
    if old_workload is not None and new_workload is not None and old_workload != new_workload:
        return Compatibility(name, False, None, f"different workload: prior {old_workload!r}, "
                             f"new {new_workload!r}")
    if host is None:
        return Compatibility(name, True, None, "same parameters and objective; host unknown")
    matches = [hosts_similar(h, host, ram_tolerance=ram_tolerance) for h in prior.hosts]
    if any(m is True for m in matches):
        return Compatibility(name, True, True, "same parameters, objective and a similar host")
    if any(m is False for m in matches):
        return Compatibility(name, False, False, "its hosts differ from this one (CPU count or "
                             f"RAM beyond {ram_tolerance:.0%})")
    return Compatibility(name, True, None, "same parameters and objective; host unknown")


def select_compatible(priors: Iterable[PriorSession], definition: SessionDefinition,
                      host: Mapping[str, JSON] | None = None, *,
                      ram_tolerance: float = RAM_TOLERANCE) -> list[PriorSession]:
    """The prior sessions the rule allows: host matches if any, else unknown-host ones."""
    matched: list[PriorSession] = []
    unknown: list[PriorSession] = []
    for prior in priors:
        if prior.name == definition.name:
            continue  # never seed a session from itself
        verdict = check_compatible(prior, definition, host, ram_tolerance=ram_tolerance)
        logger.debug("warm start: prior session %s: %s", prior.name, verdict.reason)
        if not verdict.compatible:
            continue
        (matched if verdict.host_match else unknown).append(prior)
    return matched or unknown


def ranked_prior_points(priors: Iterable[PriorSession], space: Space, *, maximize: bool
                        ) -> list[tuple[Point, float]]:
    """Distinct measured points inside ``space`` (snapped to its grid), best value first."""
    best: dict[tuple[object, ...], tuple[Point, float]] = {}
    for prior in priors:
        factors = unit_factors(prior, space)
        if isinstance(factors, str):
            logger.debug("warm start: prior session %s skipped: %s", prior.name, factors)
            continue
        for trial in prior.completed():
            point = _inside(_converted(trial.point, factors), space)
            if point is None:
                continue
            key = space.key(point)
            if trial.value is None:
                continue  # completed() keeps only measured trials
            value = float(trial.value)
            old = best.get(key)
            if old is None or (value > old[1] if maximize else value < old[1]):
                best[key] = (point, value)
    return sorted(best.values(), key=lambda pv: -pv[1] if maximize else pv[1])


def warm_start_simplex(prior_sessions: Iterable[PriorSession], definition: SessionDefinition,
                       k: int | None = None, *, host: Mapping[str, JSON] | None = None
                       ) -> list[Point]:
    """``k`` points for the initial simplex, the best prior point first (module docstring).

    ``k`` defaults to the strategy's ``simplex_size`` option, else movable parameters + 1.
    Returns ``[]`` when no compatible prior session has a measured point in range.
    """
    space = definition.space
    active = [i for i, p in enumerate(space.params) if _movable(p)]
    if k is None:
        k = int(definition.strategy_options.get("simplex_size") or len(active) + 1)
    if k < 1:
        raise ConfigError(f"warm start: the simplex needs at least 1 point, got k={k}")
    priors = select_compatible(prior_sessions, definition, host)
    ranked = ranked_prior_points(priors, space, maximize=definition.maximize)
    if not ranked:
        logger.info("warm start for %s: no compatible prior points (%d prior sessions usable)",
                    definition.name, len(priors))
        return []
    chosen: list[Point] = [ranked[0][0]]
    units = [space.to_unit(ranked[0][0])[active]]
    spare: list[Point] = []
    # best points first, as long as each one adds a dimension to the simplex
    for point, _ in ranked[1:]:
        if len(chosen) >= k:
            break
        u = space.to_unit(point)[active]
        if len(chosen) <= len(active) and _rank(units + [u]) > _rank(units):
            chosen.append(point)
            units.append(u)
        else:
            spare.append(point)
    # complete the missing dimensions with axis steps around the best point
    if len(chosen) < k and _rank(units) < min(len(active), k - 1):
        for point in _axis_steps(ranked[0][0], space, active):
            if len(chosen) >= k:
                break
            u = space.to_unit(point)[active]
            if _rank(units + [u]) > _rank(units):
                chosen.append(point)
                units.append(u)
    # extra vertices beyond N+1 (e.g. PRO's k*N): the next best prior points, then steps
    keys = {space.key(p) for p in chosen}
    for point in spare + list(_axis_steps(ranked[0][0], space, active, rings=3)):
        if len(chosen) >= k:
            break
        if space.key(point) not in keys:
            chosen.append(point)
            keys.add(space.key(point))
    logger.info("warm start for %s: simplex of %d points from %d prior sessions (%d prior "
                "points); best prior %s = %s", definition.name, len(chosen), len(priors),
                len(ranked), ranked[0][0], ranked[0][1])
    return chosen


def strategy_accepts(strategy: str, option: str) -> bool:
    """Whether the registered strategy ``strategy`` declares the keyword ``option``."""
    cls = Strategy.registry.get(strategy)
    if cls is None:
        return False
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None and option in inspect.signature(init).parameters:
            return True
    return False


def warm_start_options(prior_sessions: Iterable[PriorSession], definition: SessionDefinition,
                       *, host: Mapping[str, JSON] | None = None, k: int | None = None
                       ) -> dict[str, Any]:
    """Strategy options that start ``definition``'s search from the prior sessions.

    ``{"init_simplex": [...]}`` when the strategy takes a whole initial simplex, else
    ``{"init_point": best}`` (the simplex is then built around the prior best); ``{}`` when
    there is nothing to start from.
    """
    points = warm_start_simplex(prior_sessions, definition, k, host=host)
    if not points:
        return {}
    if strategy_accepts(definition.strategy, "init_simplex"):
        return {"init_simplex": points}
    if strategy_accepts(definition.strategy, "init_point"):
        return {"init_point": points[0]}
    logger.info("warm start: strategy %s takes neither init_simplex nor init_point; ignored",
                definition.strategy)
    return {}


def apply_warm_start(definition: SessionDefinition, prior_sessions: Sequence[PriorSession], *,
                     host: Mapping[str, JSON] | None = None) -> SessionDefinition:
    """``definition`` with warm-start strategy options merged in (explicit options win) and
    ``metadata["warm_start"]`` naming the prior sessions and the prior best."""
    if host is None:
        host = definition.metadata.get("host") or host_metadata()
    options = warm_start_options(prior_sessions, definition, host=host)
    if not options:
        return definition
    merged = {**options, **dict(definition.strategy_options)}
    used = [p.name for p in select_compatible(prior_sessions, definition, host)]
    first = options.get("init_simplex", [options.get("init_point")])[0]
    metadata = {**dict(definition.metadata),
                "warm_start": {"sessions": used, "start": first,
                               "option": next(iter(options))}}
    return replace(definition, strategy_options=merged, metadata=metadata)


# -- helpers ---------------------------------------------------------------------------------
def _movable(p: Param) -> bool:
    if isinstance(p, RealParam) and not p.discrete:
        return p.max > p.min
    return bool(p.size > 1)


def _converted(point: Mapping[str, JSON], factors: Mapping[str, float]) -> JSONObject:
    """``point``'s numbers scaled into the new units (others unchanged)."""
    out = dict(point)
    for name, factor in factors.items():
        v = out.get(name)
        if factor != 1.0 and isinstance(v, int | float) and not isinstance(v, bool):
            out[name] = v * factor
    return out


def _inside(point: Mapping[str, JSON], space: Space) -> Point | None:
    """``point`` snapped to ``space``'s grid, or None if it lies outside the ranges."""
    if set(point) != set(space.names):
        return None
    for p in space.params:
        v = point[p.name]
        if isinstance(p, EnumParam):
            if v not in p.values:
                return None
        elif isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) \
                or not p.min <= v <= p.max:
            return None
    return space.snap(point)


def _rank(units: list[np.ndarray]) -> int:
    if len(units) < 2:
        return 0
    diffs = np.array([u - units[0] for u in units[1:]])
    return int(np.linalg.matrix_rank(diffs, tol=1e-9))


def _axis_steps(best: Point, space: Space, active: list[int], rings: int = 1
                ) -> Iterator[Point]:
    """Points one step from ``best`` along each movable axis (away from the nearer edge)."""
    x0 = space.to_unit(best)
    res = space.unit_resolution()
    for ring in range(1, rings + 1):
        for axis in active:
            step = max(FILL_RADIUS, float(res[axis])) * ring
            for sign in (1.0, -1.0) if x0[axis] <= 0.5 else (-1.0, 1.0):
                moved = x0[axis] + sign * step
                if 0.0 <= moved <= 1.0:
                    u = x0.copy()
                    u[axis] = moved
                    point = space.from_unit(u)
                    if space.key(point) != space.key(best):
                        yield point
                        break
