"""The BME advice for the PostgreSQL tuner's offline session: where to search shared_buffers.

Each offline measurement yields a point (shared_buffers, P) with P = blks_read/(blks_read +
blks_hit) over the measuring window (``pg_stat_database`` deltas). From 3 distinct sizes on,
the BME is fitted; a good fit recommends M* (capped by the memory budget) and from it a
narrower search range and a 2-vertex starting simplex. A poor fit says so and the tuner keeps
its plain search. The fitted parameters plus R² are a 4-number summary worth storing.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from bme.fit import BMEFit, fit_bme
from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSONObject

logger = logging.getLogger(__name__)

#: the offline search range around M*: [LOW·M*, HIGH·M*], clipped to the budget
RANGE_LOW = 0.5
RANGE_HIGH = 1.5
#: the second vertex of the starting simplex, relative to M*
SECOND_VERTEX = 0.75


def touched_pages_p_star(relpages_total: int, block_accesses: int) -> float:
    """P* estimated as the distinct pages a workload touches over its block accesses.

    ``relpages_total``: the pages of the relations it reads (e.g. Σ ``pg_class.relpages``);
    ``block_accesses``: blks_hit + blks_read over the same run.
    """
    if relpages_total <= 0 or block_accesses <= 0:
        raise ConfigError(f"touched-pages P* needs relpages_total > 0 and block_accesses > 0, "
                          f"got {relpages_total} and {block_accesses}")
    if relpages_total > block_accesses:
        raise ConfigError(
            f"relpages_total {relpages_total} exceeds block_accesses {block_accesses}: the "
            f"workload did not touch every page; pass the pages it touches, or no P*")
    return relpages_total / block_accesses


@dataclass(frozen=True)
class BMEAdvice:
    """What the BME advice tells the offline session; ``usable`` False means: search as usual."""

    usable: bool
    reason: str
    fit: BMEFit | None = None
    m_star_bytes: int | None = None
    capped: bool = False
    search_range: tuple[int, int] | None = None
    simplex: tuple[int, int] | None = None

    def to_dict(self) -> JSONObject:
        return {"usable": self.usable, "reason": self.reason,
                "m_star_bytes": self.m_star_bytes, "capped": self.capped,
                "search_range": list(self.search_range) if self.search_range else None,
                "simplex": list(self.simplex) if self.simplex else None,
                "fit": self.fit.to_dict() if self.fit else None}


class SharedBuffersAdvisor:
    """Collects (shared_buffers, P) points and turns them into advice once the fit is good.

    ``p_star`` (e.g. from :func:`touched_pages_p_star`) fixes the floor: forward
    extrapolation of M* with P* unknown is ill-posed. ``min_r2`` is the least R² trusted.
    """

    def __init__(self, p_star: float | None = None, min_r2: float = 0.9) -> None:
        if p_star is not None and not (math.isfinite(p_star) and 0 <= p_star <= 1):
            raise ConfigError(f"p_star must be a probability in [0, 1], got {p_star!r}")
        if not 0 <= min_r2 <= 1:
            raise ConfigError(f"min_r2 must be in [0, 1], got {min_r2!r}")
        self.p_star = p_star
        self.min_r2 = min_r2
        self.sizes: list[float] = []
        self.misses: list[float] = []
        self._fit: BMEFit | None = None
        self._stale = True

    def add_point(self, shared_buffers_bytes: int, blks_hit_delta: int,
                  blks_read_delta: int) -> float:
        """Record one measurement window; returns its miss probability."""
        if shared_buffers_bytes <= 0:
            raise ConfigError(f"shared_buffers must be > 0 bytes, got {shared_buffers_bytes}")
        if blks_hit_delta < 0 or blks_read_delta < 0:
            raise ConfigError(f"blks_hit/blks_read deltas must be >= 0, got "
                              f"{blks_hit_delta}/{blks_read_delta} (a stats reset in the window?)")
        accesses = blks_hit_delta + blks_read_delta
        if accesses == 0:
            raise ConfigError(f"no block accesses in the window at shared_buffers "
                              f"{shared_buffers_bytes} bytes: nothing to learn a miss rate from")
        p = blks_read_delta / accesses
        self.sizes.append(float(shared_buffers_bytes))
        self.misses.append(p)
        self._stale = True
        logger.debug("BME advice point: shared_buffers=%d P=%.5f", shared_buffers_bytes, p)
        return p

    @property
    def n_sizes(self) -> int:
        return len(set(self.sizes))

    @property
    def ready(self) -> bool:
        """True once points exist at 3 distinct sizes."""
        return self.n_sizes >= 3

    def fit(self) -> BMEFit | None:
        """The fit of all points so far (``None`` before 3 distinct sizes)."""
        if not self.ready:
            return None
        if self._stale:
            self._fit = fit_bme(self.sizes, self.misses, p_star=self.p_star)
            self._stale = False
            logger.info("BME advice: M* = %.0f bytes, R² = %.3f over %d points",
                        self._fit.params.m_star, self._fit.r2, self._fit.n_points)
        return self._fit

    def recommend(self, max_bytes: int, min_bytes: int) -> BMEAdvice:
        """Advice for the offline search inside [min_bytes, max_bytes] (the budget)."""
        if not 0 < min_bytes < max_bytes:
            raise ConfigError(f"need 0 < min_bytes < max_bytes, got {min_bytes} and {max_bytes}")
        fit = self.fit()
        if fit is None:
            return BMEAdvice(False, f"only {self.n_sizes} distinct shared_buffers size(s) "
                                      f"measured; the fit needs 3")
        if not fit.r2 >= self.min_r2:
            return BMEAdvice(False, f"poor fit: R² {fit.r2:.3f} < {self.min_r2:g}; "
                                      f"falling back to the plain search", fit=fit)
        m_star = fit.params.m_star
        capped = m_star > max_bytes
        best = int(min(max(m_star, min_bytes), max_bytes))
        low = int(max(min_bytes, min(best, RANGE_LOW * m_star)))
        high = int(min(max_bytes, max(best, RANGE_HIGH * m_star)))
        if high <= low:
            high = min(max_bytes, low + max(1, (max_bytes - min_bytes) // 10))
            low = max(min_bytes, high - max(1, (max_bytes - min_bytes) // 10))
        second = int(SECOND_VERTEX * best)
        if second < low:
            second = int(min(high, best / SECOND_VERTEX))
        if second == best:
            second = low if best != low else high
        reason = (f"M* = {m_star:.0f} bytes (R² {fit.r2:.3f})"
                  + (f", capped to the budget {max_bytes}" if capped else ""))
        return BMEAdvice(True, reason, fit=fit, m_star_bytes=best, capped=capped,
                           search_range=(low, high), simplex=(best, second))

    def to_dict(self) -> JSONObject:
        """The 4-number summary plus R² and the point count, to store with the session."""
        fit = self.fit()
        summary: JSONObject = {"p_star": None, "p_c": None, "m_b": None, "m_star": None,
                                   "r2": None, "n_points": len(self.sizes), "units": "bytes"}
        if fit is not None:
            summary.update(fit.params.to_dict())
            summary["r2"] = fit.r2
        return summary
