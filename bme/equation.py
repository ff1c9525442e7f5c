"""The Buffer Miss Equation itself: its four parameters, the miss curve and its slope.

P(M) = ½(H + √(H² − 4))(P* + Pc) − Pc with H = 1 + (M* + Mb)/(M + Mb) for M ≤ M*, and
P(M) = P* beyond M* (Tay & Zou's page-fault equation, see docs/background.md §3).
The same law holds for miss *counts* (all four parameters then in count units).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from harmony_base.errors import ConfigError

#: the keys of a parameter object, in the order they are printed
PARAM_KEYS = ("p_star", "p_c", "m_b", "m_star")


@dataclass(frozen=True)
class BMEParams:
    """The four BME parameters: cold-miss floor ``p_star``, convexity ``p_c``, memory
    outside the buffer ``m_b`` and the knee ``m_star`` (sizes in the caller's unit)."""

    p_star: float
    p_c: float
    m_b: float
    m_star: float

    def __post_init__(self) -> None:
        for key in PARAM_KEYS:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value):
                raise ConfigError(f"BME parameter {key} must be a finite number, got {value!r}")
            object.__setattr__(self, key, float(value))
        if self.p_star < 0:
            raise ConfigError(f"BME parameter p_star must be >= 0, got {self.p_star}")
        if self.p_star + self.p_c <= 0:
            raise ConfigError(
                f"BME parameters need p_c > -p_star (the curve must fall with size), got "
                f"p_star={self.p_star}, p_c={self.p_c}")
        if self.m_star + self.m_b <= 0:
            raise ConfigError(
                f"BME parameters need m_star > -m_b, got m_star={self.m_star}, m_b={self.m_b}")

    def to_dict(self) -> dict[str, float]:
        """The parameters as a plain dict with exactly the keys of :data:`PARAM_KEYS`."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "parameters") -> BMEParams:
        """Build from a mapping with exactly the keys p_star, p_c, m_b, m_star."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: expected an object with keys {list(PARAM_KEYS)}, "
                              f"got {type(data).__name__}")
        missing = [k for k in PARAM_KEYS if k not in data]
        unknown = sorted(set(data) - set(PARAM_KEYS))
        if missing or unknown:
            raise ConfigError(f"{source}: BME parameters need exactly the keys {list(PARAM_KEYS)};"
                              f" missing {missing}, unknown {unknown}")
        try:
            return cls(**{k: data[k] for k in PARAM_KEYS})
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None


def _h_factor(params: BMEParams, m: NDArray[np.float64]
              ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.bool_]]:
    """H, the shifted size M + Mb, and the mask of the falling part (M + Mb > 0, M < M*)."""
    shifted = m + params.m_b
    on_curve = (m < params.m_star) & (shifted > 0)
    safe = np.where(on_curve, shifted, 1.0)
    h = np.where(on_curve, 1.0 + (params.m_star + params.m_b) / safe, 2.0)
    return h, shifted, on_curve


def miss_probability(params: BMEParams, m: ArrayLike) -> NDArray[np.float64] | float:
    """P at size(s) ``m`` (vectorised); ``inf`` where M + Mb <= 0 (outside the law's domain).

    The value is the equation's: it may exceed 1 at sizes the fit never saw.
    """
    arr = np.asarray(m, dtype=float)
    h, shifted, on_curve = _h_factor(params, arr)
    root = 0.5 * (h + np.sqrt(np.maximum(h * h - 4.0, 0.0)))
    p = np.where(on_curve, root * (params.p_star + params.p_c) - params.p_c, params.p_star)
    p = np.where(shifted > 0, p, np.inf)
    return float(p) if p.ndim == 0 else p


def miss_slope(params: BMEParams, m: ArrayLike) -> NDArray[np.float64] | float:
    """dP/dM at size(s) ``m``: <= 0, tending to -inf just below M*, 0 from M* on."""
    arr = np.asarray(m, dtype=float)
    h, shifted, on_curve = _h_factor(params, arr)
    disc = np.sqrt(np.maximum(h * h - 4.0, 0.0))
    root = 0.5 * (h + disc)
    with np.errstate(divide="ignore", invalid="ignore"):
        droot_dh = np.where(disc > 0, root / np.where(disc > 0, disc, 1.0), np.inf)
        dh_dm = -(params.m_star + params.m_b) / np.where(on_curve, shifted, 1.0) ** 2
        slope = np.where(on_curve, (params.p_star + params.p_c) * droot_dh * dh_dm, 0.0)
    slope = np.where(shifted > 0, slope, -np.inf)
    return float(slope) if slope.ndim == 0 else slope
