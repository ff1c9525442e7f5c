"""Steering a buffer to a target miss probability μ: classic gradient control, with the
gradient measured or taken from the fitted curve, against the BME's direct closed form.

Gradient control: M(n+1) = M(n) + ε/g(n)·(P(n) − μ), where g(n) = −dP/dM > 0 is the slope's
magnitude (so M grows while P is above target). The direct method jumps to
:func:`size_for_target` of the fitted curve. All three run on the same ``measure`` function,
so their traces can be compared step by step.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from bme.equation import BMEParams, miss_slope
from bme.size import size_for_target
from harmony_base.errors import ConfigError

logger = logging.getLogger(__name__)

Measure = Callable[[float], float]


@dataclass
class ControlTrace:
    """The sizes tried and the miss probabilities measured there, step by step."""

    method: str
    sizes: list[float] = field(default_factory=list)
    misses: list[float] = field(default_factory=list)

    def steps_to_target(self, mu: float, tol: float) -> int | None:
        """The first step whose measurement is within ``tol`` of μ (None: never)."""
        for n, p in enumerate(self.misses):
            if abs(p - mu) <= tol:
                return n
        return None

    def to_dict(self) -> dict[str, object]:
        return {"method": self.method, "sizes": self.sizes, "misses": self.misses}


def _check(mu: float, m0: float, steps: int, bounds: tuple[float, float]) -> None:
    if not (math.isfinite(mu) and mu >= 0):
        raise ConfigError(f"target miss probability must be >= 0, got {mu!r}")
    lo, hi = bounds
    if not (0 <= lo < hi and lo <= m0 <= hi):
        raise ConfigError(f"need 0 <= min size < max size and the start {m0:g} inside "
                          f"[{lo:g}, {hi:g}]")
    if steps < 1:
        raise ConfigError(f"steps must be >= 1, got {steps}")


def gradient_control(measure: Measure, mu: float, m0: float, *, steps: int,
                     bounds: tuple[float, float], eps: float = 1.0,
                     params: BMEParams | None = None, probe: float | None = None) -> ControlTrace:
    """Gradient control for ``steps`` steps from ``m0``, sizes kept inside ``bounds``.

    With ``params`` the gradient is the fitted curve's slope at M(n) ("fitted"); without, it
    is the secant of the last two measurements ("measured"; the first step probes
    ``m0 + probe``). A non-positive measured gradient (noise) reuses the last good one.
    """
    _check(mu, m0, steps, bounds)
    lo, hi = bounds
    method = "fitted" if params is not None else "measured"
    trace = ControlTrace(method)
    size, p = m0, measure(m0)
    trace.sizes.append(size)
    trace.misses.append(p)
    last_g: float | None = None
    for _ in range(steps - 1):
        if params is not None:
            g = -float(miss_slope(params, size))
            if not (math.isfinite(g) and g > 0):
                g = math.inf                       # flat (past M*) or at the knee: hold still
        elif len(trace.sizes) < 2:
            g = math.nan
        else:
            dm = trace.sizes[-1] - trace.sizes[-2]
            dp = trace.misses[-1] - trace.misses[-2]
            g = -dp / dm if dm != 0 else math.nan
        if math.isnan(g) or (params is None and g <= 0):
            g = last_g if last_g is not None else math.nan
        if math.isnan(g):                          # nothing to go on yet: probe
            step = probe if probe is not None else 0.05 * (hi - lo)
        else:
            last_g = g
            step = eps / g * (p - mu) if math.isfinite(g) else 0.0
        size = min(hi, max(lo, size + step))
        p = measure(size)
        trace.sizes.append(size)
        trace.misses.append(p)
    return trace


def direct_control(measure: Measure, mu: float, m0: float, *, steps: int,
                   bounds: tuple[float, float], params: BMEParams) -> ControlTrace:
    """Jump straight to the fitted curve's size for μ (clamped to ``bounds``) and stay."""
    _check(mu, m0, steps, bounds)
    lo, hi = bounds
    trace = ControlTrace("direct")
    trace.sizes.append(m0)
    trace.misses.append(measure(m0))
    goal = min(hi, max(lo, size_for_target(params, max(mu, params.p_star))))
    for _ in range(steps - 1):
        trace.sizes.append(goal)
        trace.misses.append(measure(goal))
    return trace


def compare_control(measure: Measure, mu: float, m0: float, *, steps: int,
                    bounds: tuple[float, float], params: BMEParams,
                    eps: float = 1.0) -> dict[str, ControlTrace]:
    """The three methods on the same measurement function: measured, fitted, direct."""
    return {
        "measured": gradient_control(measure, mu, m0, steps=steps, bounds=bounds, eps=eps),
        "fitted": gradient_control(measure, mu, m0, steps=steps, bounds=bounds, eps=eps,
                                   params=params),
        "direct": direct_control(measure, mu, m0, steps=steps, bounds=bounds, params=params),
    }
