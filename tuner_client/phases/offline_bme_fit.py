"""The Buffer Miss Equation fit of the offline pass: measured sizes in, BME advice out.

Each measured shared_buffers size gives a point (size, buffer hits, buffer reads over the
samples); with three distinct sizes :class:`bme.advice.SharedBuffersAdvisor` is fitted
once, and its advice (a start size and a narrowed range) is converted to session units.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from bme.advice import SharedBuffersAdvisor, touched_pages_p_star
from bme.fit import BMEFit
from harmony_base.errors import HarmonyError
from harmony_base.jsontypes import JSONObject
from harmony_base.space import EnumParam
from tuner_client.config import KnobSpace
from tuner_client.measurer import PointRecord

logger = logging.getLogger(__name__)


@dataclass
class OfflineAdvice:
    """The BME advice in session units: a start point and a narrowed range."""

    usable: bool
    reason: str
    start: dict[str, Any] = field(default_factory=dict)
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def range_text(self) -> str:
        return ", ".join(f"{n} {lo:g}..{hi:g}" for n, (lo, hi) in self.bounds.items())


class OfflineBMEFit:
    """Feeds offline measurements to the Buffer Miss Equation fit and converts its advice.

    Each measured shared_buffers size gives a point (size, buffer hits, buffer reads over the
    samples); with three distinct sizes the equation is fitted once. P* is estimated from the
    pages the database holds over the block accesses of the first window, when known.
    """

    def __init__(self, space: KnobSpace, max_bytes: int, min_r2: float,
                 relpages_bytes: int | None) -> None:
        self.space = space
        self.param = space["shared_buffers"]
        self.max_bytes = max_bytes
        self.min_r2 = min_r2
        self.relpages_bytes = relpages_bytes
        self.advisor: SharedBuffersAdvisor | None = None
        self.last: OfflineAdvice | None = None
        self.fit: BMEFit | None = None  # the fit behind the last advice (good or poor), if any
        self.size_range: tuple[int, int] | None = None  # the bytes the advice searched in

    def add(self, record: PointRecord) -> None:
        stats = record.stats_total()
        if stats is None or record.value is None or "shared_buffers" not in record.in_force:
            return
        if self.advisor is None:
            p_star = None
            if self.relpages_bytes and stats.blks_hit + stats.blks_read > 0:
                try:
                    p_star = touched_pages_p_star(self.relpages_bytes // 8192,
                                                  stats.blks_hit + stats.blks_read)
                except HarmonyError as exc:
                    logger.info("no P* estimate for the BME fit: %s", exc)
            self.advisor = SharedBuffersAdvisor(p_star=p_star, min_r2=self.min_r2)
        size = int(self.param.knob.parse(record.in_force["shared_buffers"]))
        try:
            self.advisor.add_point(size, stats.blks_hit, stats.blks_read)
        except HarmonyError as exc:
            # e.g. no block access counted yet: backends flush their stats about once a
            # second, so very short windows can miss them
            logger.info("BME fit: point at shared_buffers %s skipped: %s",
                        record.in_force["shared_buffers"], exc)

    def advice(self) -> OfflineAdvice | None:
        """None until three sizes are measured; then the advice (usable or not, with why)."""
        if self.advisor is None or not self.advisor.ready:
            return None
        p = self.param.param
        if isinstance(p, EnumParam):
            return None
        lo_bytes = int(self.param.canonical(p.min))
        hi_bytes = min(int(self.param.canonical(p.upper)), self.max_bytes)
        self.size_range = (lo_bytes, hi_bytes)
        try:
            raw = self.advisor.recommend(max_bytes=hi_bytes, min_bytes=lo_bytes)
        except HarmonyError as exc:
            self.last = OfflineAdvice(False, f"fit failed: {exc}")
            return self.last
        self.fit = raw.fit
        if not raw.usable or raw.m_star_bytes is None:
            self.last = OfflineAdvice(False, str(raw.reason))
            return self.last
        m_star = self.param.session_value(int(raw.m_star_bytes))
        lo, hi = float(p.min), float(p.upper)
        if raw.search_range is not None:
            lo = float(self.param.session_value(int(raw.search_range[0])))
            hi = float(self.param.session_value(int(raw.search_range[1])))
            if lo >= hi:
                lo, hi = float(p.min), float(p.upper)
        self.last = OfflineAdvice(True, f"{raw.reason}; M* = {m_star}{self.param.unit or ''}"
                                f"{' (capped by the budget)' if raw.capped else ''}",
                                start={"shared_buffers": m_star},
                                bounds={"shared_buffers": (lo, hi)})
        return self.last

    def metadata(self) -> JSONObject | None:
        """The fit for a session's ``metadata["bme"]``: parameters (bytes), r2, points."""
        if self.fit is None or self.advisor is None:
            return None
        points = sorted(zip(self.advisor.sizes, self.advisor.misses, strict=True))
        return {**self.fit.params.to_dict(), "r2": float(self.fit.r2),
                "points": [[float(m), float(p)] for m, p in points],
                "usable": bool(self.last.usable) if self.last is not None else False,
                "reason": self.last.reason if self.last is not None else ""}
