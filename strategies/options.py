"""Checking strategy options: uniform errors for a bad option, and the simplex strategies'
shared options resolved into one frozen record (defaults filled in, points snapped).

Every check raises :class:`ConfigError` naming the strategy, the option, what must hold and
what was given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSON
from harmony_base.space import Point, RealParam, Space

INIT_METHODS = ("point", "random-point", "lhs", "random", "simplex")
REJECT_METHODS = ("penalty", "random", "project")


def option_error(strategy: str, option: str, must: str, got: object) -> ConfigError:
    """A uniform message for a bad strategy option."""
    return ConfigError(f"strategy {strategy!r}: option {option} must be {must}, got {got!r}")


def check_real(strategy: str, option: str, value: object, *, low: float | None = None,
               high: float | None = None, low_open: bool = False,
               high_open: bool = False) -> None:
    """``value`` must be a finite number within ``low`` .. ``high`` (open ends if asked)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise option_error(strategy, option, "a finite number", value)
    bad_low = low is not None and (value <= low if low_open else value < low)
    bad_high = high is not None and (value >= high if high_open else value > high)
    if bad_low or bad_high:
        lo = "" if low is None else f"{low} {'<' if low_open else '<='} "
        hi = "" if high is None else f" {'<' if high_open else '<='} {high}"
        raise option_error(strategy, option, f"{lo}{option}{hi}".strip(), value)


def is_fixed(p: Any) -> bool:
    """Whether a parameter cannot move: a real one with min == max, else one grid value."""
    if isinstance(p, RealParam) and not p.discrete:
        return p.max == p.min
    return bool(p.size == 1)


def _positive_int_or_none(value: object) -> bool:
    return value is None or (not isinstance(value, bool) and isinstance(value, int)
                             and value >= 1)


@dataclass(frozen=True)
class SimplexOptions:
    """The simplex strategies' shared options, checked, with defaults resolved: the initial
    simplex's size and method, its point or given vertices (snapped to the space)."""

    simplex_size: int
    init_method: str
    init_point: Point | None
    init_simplex: list[Point] | None


def check_simplex_options(name: str, space: Space, n_eff: int, *, simplex_size: int | None,
                          init_method: str | None, init_point: Mapping[str, JSON] | None,
                          init_radius: float, init_simplex: Sequence[Mapping[str, JSON]] | None,
                          reject_method: str, fval_tol: float, fval_atol: float,
                          size_tol: float, max_evals: int | None, restart_decay: float,
                          restart_patience: int | None, shrink: float) -> SimplexOptions:
    """Check every option of :class:`strategies.simplex.SimplexStrategy` (``n_eff`` movable
    parameters) and resolve the initial simplex's size and method."""
    snapped_simplex = None
    if init_simplex is not None:
        snapped_simplex, simplex_size = _check_init_simplex(name, space, init_simplex,
                                                            simplex_size)
        init_method = init_method or "simplex"
    if simplex_size is None:
        simplex_size = n_eff + 1
    if isinstance(simplex_size, bool) or not isinstance(simplex_size, int) \
            or simplex_size < n_eff + 1:
        raise option_error(name, "simplex_size", f"an integer >= {n_eff + 1} (the number of "
                           f"movable parameters + 1)", simplex_size)
    if init_method is None:
        init_method = "point" if init_point is not None else "lhs"
    if init_method not in INIT_METHODS:
        raise option_error(name, "init_method", f"one of {', '.join(INIT_METHODS)}",
                           init_method)
    if init_method == "simplex" and init_simplex is None:
        raise option_error(name, "init_simplex", "a list of points when init_method is simplex",
                           None)
    if reject_method not in REJECT_METHODS:
        raise option_error(name, "reject_method", f"one of {', '.join(REJECT_METHODS)}",
                           reject_method)
    _check_numbers(name, init_radius=init_radius, fval_tol=fval_tol, fval_atol=fval_atol,
                   size_tol=size_tol, shrink=shrink, max_evals=max_evals,
                   restart_decay=restart_decay, restart_patience=restart_patience)
    return SimplexOptions(simplex_size=simplex_size, init_method=init_method,
                          init_point=_check_init_point(name, space, init_point),
                          init_simplex=snapped_simplex)


def _check_init_simplex(name: str, space: Space, init_simplex: object,
                        simplex_size: int | None) -> tuple[list[Point], int]:
    """A given initial simplex: a list of points of the space, as many as ``simplex_size``."""
    if isinstance(init_simplex, str | bytes | Mapping) or not isinstance(init_simplex, Sequence):
        raise option_error(name, "init_simplex", "a list of points", init_simplex)
    if simplex_size is None:
        simplex_size = len(init_simplex)
    elif simplex_size != len(init_simplex):
        raise option_error(name, "init_simplex", f"{simplex_size} points (simplex_size)",
                           f"{len(init_simplex)} points")
    try:
        snapped = [space.snap(p) for p in init_simplex]
    except (ConfigError, TypeError, ValueError) as exc:
        raise ConfigError(f"strategy {name!r}: option init_simplex holds a point that is "
                          f"not a point of the space: {exc}") from None
    return snapped, simplex_size


def _check_numbers(name: str, *, init_radius: float, fval_tol: float, fval_atol: float,
                   size_tol: float, shrink: float, max_evals: int | None, restart_decay: float,
                   restart_patience: int | None) -> None:
    check_real(name, "init_radius", init_radius, low=0.0, high=1.0, low_open=True)
    check_real(name, "fval_tol", fval_tol, low=0.0)
    check_real(name, "fval_atol", fval_atol, low=0.0)
    check_real(name, "size_tol", size_tol, low=0.0)
    check_real(name, "shrink", shrink, low=0.0, high=1.0, low_open=True, high_open=True)
    if not _positive_int_or_none(max_evals):
        raise option_error(name, "max_evals", "a positive integer (or absent)", max_evals)
    check_real(name, "restart_decay", restart_decay, low=0.0, high=1.0, low_open=True,
               high_open=True)
    if not _positive_int_or_none(restart_patience):
        raise option_error(name, "restart_patience", "a positive integer (or absent)",
                           restart_patience)


def _check_init_point(name: str, space: Space,
                      init_point: Mapping[str, JSON] | None) -> Point | None:
    """A given initial point, snapped to the space."""
    if init_point is None:
        return None
    if not isinstance(init_point, Mapping):
        raise option_error(name, "init_point", "a mapping of parameter name to value",
                           init_point)
    try:
        return space.snap(init_point)
    except (ConfigError, TypeError, ValueError) as exc:
        raise ConfigError(f"strategy {name!r}: option init_point is not a point of the "
                          f"space: {exc}") from None
