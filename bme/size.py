"""Sizing a buffer from a fitted curve: the size that reaches a target miss probability μ in
closed form (inverting the equation), and M* as the natural recommendation."""

from __future__ import annotations

import math

from bme.equation import BMEParams
from harmony_base.errors import ConfigError


def size_for_target(params: BMEParams, mu: float) -> float:
    """The smallest size M with P(M) <= μ: M = r/(r² − r + 1)·(M* + Mb) − Mb, r = (μ+Pc)/(P*+Pc).

    μ below P* cannot be reached (:class:`ConfigError`); μ = P* gives M*; a μ the curve
    already meets at size 0 gives 0.
    """
    if not math.isfinite(mu):
        raise ConfigError(f"target miss probability must be a finite number, got {mu!r}")
    if mu < params.p_star:
        raise ConfigError(
            f"target miss probability {mu:g} is below the cold-miss floor P* = "
            f"{params.p_star:g}: no buffer size reaches it; choose a target >= P*")
    size = _size_on_curve(params, mu)
    if size <= 0.0:
        return 0.0
    return min(size, params.m_star)


def _size_on_curve(params: BMEParams, mu: float) -> float:
    """The equation's inverse at μ >= P* (may be negative when Mb > 0 and μ is large)."""
    r = (mu + params.p_c) / (params.p_star + params.p_c)
    return r / (r * r - r + 1.0) * (params.m_star + params.m_b) - params.m_b


def recommended_size(params: BMEParams) -> float:
    """The natural buffer size M*: buffer beyond it is wasted."""
    return params.m_star

