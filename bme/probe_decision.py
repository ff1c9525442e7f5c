"""Cheap shared_buffers probes turned into a decision: the Buffer Miss Equation fitted to the
miss probabilities measured after restarts at a few sizes, with P* from the catalog (cold
windows) or the curve's floor (windows from a settled buffer: :func:`steady_p_star`).

A probe starts with an empty buffer, so over its window the misses are the cold misses (the
distinct pages the workload touches, at most the pages of the relations it reads) plus the
capacity misses of that size: the equation's model of a reference string from its start. P*
is therefore the touched pages over the block accesses of a window, and the fit has three
free parameters (M*, Mb, Pc); with few points above the floor they place M* loosely, and an M*
past the pages the windows touched is taken at those pages when a settled probe that large read
the floor (:func:`working_set_bound`). The decision is one of ``knee`` (a good fit: M* and the miss
probability at every size), ``no-knee`` (the curve is already flat at the smallest probe:
the workload fits) or ``rejected`` (with why: too few probes, not monotone, a poor R²).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from bme.fit import BMEFit, fit_bme
from bme.size import size_for_target
from harmony_base.errors import ConfigError, HarmonyError
from harmony_base.jsontypes import JSONObject

logger = logging.getLogger(__name__)

#: a probe may miss more than a smaller one by this much (absolute) before the curve counts
#: as not monotone: the windows' mixes differ a little from probe to probe
MONOTONE_TOL_ABS = 0.02
#: ... or by this fraction of the smaller probe's miss probability
MONOTONE_TOL_REL = 0.15
#: the curve is flat (no knee) when the largest miss probability is within this factor
#: (plus FLAT_TOL_ABS) of the smallest
FLAT_FACTOR = 1.25
FLAT_TOL_ABS = 0.005
#: an M* further than this factor beyond the largest probe is an extrapolation not trusted
FAR_FACTOR = 10.0
#: bytes of a page (PostgreSQL's default block size): the unit of the probes' touched pages
PAGE_BYTES = 8192


@dataclass(frozen=True)
class Probe:
    """One probe: shared_buffers ``size`` (bytes), block hits and reads of the workload's
    relations over its window, the window's length and the probe's whole wall-clock cost."""

    size: int
    hits: int
    reads: int
    window_s: float
    cost_s: float
    #: relation name -> pages (block size units) of every relation the window accessed
    touched: dict[str, int] = field(default_factory=dict)
    #: how the buffer settled before the window: "" (a cold window right after the
    #: restart), "full" or "fits" (settled), "filling" (given up early: it could not fill
    #: in the budget) or "timeout" (the settle budget ran out first)
    settled: str = ""
    #: the seconds spent settling (inside ``cost_s``)
    settle_s: float = 0.0

    @property
    def accesses(self) -> int:
        return self.hits + self.reads

    @property
    def miss(self) -> float:
        """blks_read / (blks_read + blks_hit) over the window."""
        if self.accesses <= 0:
            raise ConfigError(f"probe at shared_buffers {self.size} bytes counted no block "
                              f"access: nothing to learn a miss probability from")
        return self.reads / self.accesses

    def to_dict(self) -> JSONObject:
        return {"size": self.size, "hits": self.hits, "reads": self.reads,
                "miss": self.miss if self.accesses > 0 else None, "window_s": self.window_s,
                "cost_s": self.cost_s, "touched_relations": len(self.touched),
                "settled": self.settled, "settle_s": self.settle_s}


@dataclass(frozen=True)
class ProbeDecision:
    """What the probes say about shared_buffers (see the module docstring).

    ``size`` is the recommended size in bytes (M*, or the size reaching ``target_miss``, or
    the smallest probe when there is no knee), already capped to the allowed range; None
    when rejected.
    """

    kind: str  # "knee", "no-knee" or "rejected"
    reason: str
    probes: tuple[Probe, ...]
    fit: BMEFit | None = None
    p_star: float | None = None
    p_star_source: str = ""
    touched_pages: int | None = None
    size: int | None = None
    capped: bool = False
    target_miss: float | None = None
    #: bytes of every page the probes' windows touched, when the fitted M* lay beyond them
    #: (the knee is then taken there: :func:`working_set_bound`)
    knee_bound: int | None = None

    @property
    def knee(self) -> float | None:
        """M*: the fitted one, or the working set's bytes when the fit lay beyond them."""
        if self.fit is None:
            return None
        m_star = float(self.fit.params.m_star)
        return m_star if self.knee_bound is None else min(m_star, float(self.knee_bound))

    @property
    def usable(self) -> bool:
        return self.kind in ("knee", "no-knee")

    def miss_at(self, size: float) -> float | None:
        """The fitted miss probability at ``size`` bytes (None without a fit)."""
        if self.fit is None:
            return None
        return float(min(1.0, float(self.fit.predict(size))))

    def to_dict(self) -> JSONObject:
        """For a session's ``metadata["bme"]`` (sizes in bytes)."""
        out: JSONObject = {"decision": self.kind, "reason": self.reason,
                               "probes": [p.to_dict() for p in self.probes],
                               "p_star_source": self.p_star_source,
                               "touched_pages": self.touched_pages, "size": self.size,
                               "capped": self.capped, "target_miss": self.target_miss,
                               "knee_bound": self.knee_bound, "usable": self.usable}
        if self.fit is not None:
            out.update(self.fit.params.to_dict())
            out["r2"] = float(self.fit.r2)
        out["points"] = [[float(p.size), p.miss] for p in self.probes if p.accesses > 0]
        return out


def probe_sizes(low: int, high: int, count: int, step: int = 1) -> list[int]:
    """``count`` sizes spread evenly in log scale over [low, high] bytes, on the ``step`` grid
    (never above ``high``), distinct and increasing."""
    if count < 3:
        raise ConfigError(f"bme.probes must be at least 3 (the fit needs 3 sizes), got {count}")
    if not 0 < low < high:
        raise ConfigError(f"probe sizes need 0 < low < high bytes, got {low} and {high}")
    step = max(1, int(step))
    sizes: list[int] = []
    for i in range(count):
        raw = low * (high / low) ** (i / (count - 1))
        snapped = max(low, min(high, int(round(raw / step)) * step))
        if snapped > high:
            snapped -= step
        if not sizes or snapped > sizes[-1]:
            sizes.append(snapped)
    return sizes


def monotone_violation(probes: Sequence[Probe]) -> str | None:
    """The first pair of probes where the larger size misses clearly more, as text."""
    ordered = sorted((p for p in probes if p.accesses > 0), key=lambda p: p.size)
    for small, large in zip(ordered, ordered[1:], strict=False):
        if large.miss > small.miss + max(MONOTONE_TOL_ABS, MONOTONE_TOL_REL * small.miss):
            return (f"not monotone: P({_mb(large.size)}) = {large.miss:.3f} > "
                    f"P({_mb(small.size)}) = {small.miss:.3f}")
    return None


def touched_p_star(probes: Sequence[Probe], touched_pages: int) -> tuple[float, str]:
    """P* = touched pages / block accesses of the largest probe's window (the floor is where
    the curve ends, and each window's cold-miss share depends on its own accesses), never
    above the smallest measured miss probability; with the source as text."""
    counted = [p for p in probes if p.accesses > 0]
    largest = max(counted, key=lambda p: p.size)
    floor = min(p.miss for p in counted)
    p_star = touched_pages / largest.accesses
    source = (f"{touched_pages:,} touched pages / {largest.accesses:,} accesses of the "
              f"largest probe's window = {p_star:.4f}")
    if p_star > floor:
        source += (f", lowered to the smallest measured miss probability {floor:.4f} (the "
                   f"windows do not reach every page)")
        p_star = floor
    return p_star, source


def steady_p_star(probes: Sequence[Probe]) -> tuple[float, str]:
    """P* for windows that started from a settled buffer: their misses are capacity misses,
    not the compulsory ones the touched pages count, so the floor is where the measured curve
    ends, the smallest miss probability; with the source as text (and the probes that did
    not settle within their budget)."""
    counted = [p for p in probes if p.accesses > 0]
    floor = min(p.miss for p in counted)
    source = (f"the smallest measured miss probability {floor:.4f} (windows from a settled "
              f"buffer count no compulsory misses)")
    unsettled = [p for p in counted if p.settled not in ("full", "fits")]
    if unsettled:
        source += (f"; {len(unsettled)} probe(s) not settled when their window started ("
                   + ", ".join(_mb(p.size) for p in unsettled) + ")")
    return floor, source


def flat(misses: Sequence[float]) -> bool:
    """Whether miss probabilities read a flat curve: the largest within ``FLAT_FACTOR`` (plus
    ``FLAT_TOL_ABS``) of the smallest."""
    return max(misses) <= FLAT_FACTOR * min(misses) + FLAT_TOL_ABS


def decide(probes: Sequence[Probe], *, touched_pages: int | None, low: int, high: int,
           min_r2: float = 0.9, target_miss: float | None = None) -> ProbeDecision:
    """Fit the probes and decide (see the module docstring); sizes in bytes within
    [low, high], the allowed shared_buffers range under the memory budget."""
    probes = tuple(sorted(probes, key=lambda p: p.size))
    counted = [p for p in probes if p.accesses > 0]
    if len({p.size for p in counted}) < 3:
        return ProbeDecision("rejected", f"only {len(counted)} probe(s) counted block accesses;"
                             f" the fit needs 3 sizes", probes)
    misses = [p.miss for p in counted]
    if flat(misses):
        size = max(low, min(high, counted[0].size))
        return ProbeDecision(
            "no-knee", f"no knee: the miss probability is flat ({min(misses):.4f}"
            f"..{max(misses):.4f}) from the smallest probe {_mb(counted[0].size)} on, so the "
            f"workload's pages fit there; memory above it is better left to the other "
            f"consumers", probes, size=size, touched_pages=touched_pages)
    violation = monotone_violation(counted)
    if violation is not None:
        return ProbeDecision("rejected", f"fit not trusted: the miss curve is {violation}",
                             probes, touched_pages=touched_pages)
    p_star: float | None = None
    source = "searched (no catalog page count)"
    if any(p.settled for p in counted):
        p_star, source = steady_p_star(counted)
    elif touched_pages:
        p_star, source = touched_p_star(counted, touched_pages)
    try:
        fit = fit_bme([p.size for p in counted], misses, p_star=p_star)
    except HarmonyError as exc:
        return ProbeDecision("rejected", f"fit failed: {exc}", probes, p_star=p_star,
                             p_star_source=source, touched_pages=touched_pages)
    if not (math.isfinite(fit.r2) and fit.r2 >= min_r2):
        return ProbeDecision("rejected", f"fit not trusted: R² {fit.r2:.3f} < {min_r2:g}",
                             probes, fit=fit, p_star=p_star, p_star_source=source,
                             touched_pages=touched_pages)
    m_star = fit.params.m_star
    text = f"M* = {_mb(m_star)} (R² {fit.r2:.3f}, P* {source})"
    bound = working_set_bound(counted, touched_pages)
    held = bound is not None and m_star > bound
    if held and bound is not None:
        # few points above the floor leave the fitted M* loosely placed (session 20: 117-275MB
        # on near-equal readings, 167MB of pages touched); past the pages touched it
        # contradicts the probes themselves
        text += (f"; taken at {_mb(bound)}, the pages the windows touched: a buffer that size "
                 f"holds every one, and the probe at {_mb(_floor_probe(counted, bound).size)} "
                 f"read the floor")
        m_star = bound
    if m_star > FAR_FACTOR * counted[-1].size:
        if not counted[-1].miss < counted[-2].miss:
            return ProbeDecision(
                "rejected", f"fit not trusted: M* = {_mb(m_star)} lies more than "
                f"{FAR_FACTOR:g}x beyond the largest probe {_mb(counted[-1].size)} (an "
                f"extrapolation, R² {fit.r2:.3f}) and the curve no longer falls there", probes,
                fit=fit, p_star=p_star, p_star_source=source, touched_pages=touched_pages)
        # the curve still falls at the largest probe: the knee lies beyond it, a direction
        # the data show, while the fitted value is an extrapolation not worth printing as one
        text = (f"the knee lies beyond the largest probe {_mb(counted[-1].size)}: the curve "
                f"still falls there (R² {fit.r2:.3f}; the fitted M* is more than "
                f"{FAR_FACTOR:g}x beyond, an extrapolation)")
    wanted = m_star
    if target_miss is not None and target_miss < fit.params.p_star:
        # no size reaches a target under the cold-miss floor: M* is the closest
        text += (f"; the target miss probability {target_miss:g} is below the floor P* = "
                 f"{fit.params.p_star:.4f}, which M* already reaches")
    elif target_miss is not None:
        wanted = size_for_target(fit.params, target_miss)
        text += f"; the target miss probability {target_miss:g} needs {_mb(wanted)}"
    capped = wanted > high * (1 + 1e-9)
    size = int(max(low, min(high, wanted)))
    if capped:
        text += (f"; capped to {_mb(high)} by the memory budget (P there = "
                 f"{min(1.0, float(fit.predict(high))):.4f})")
    return ProbeDecision("knee", text, probes, fit=fit, p_star=p_star, p_star_source=source,
                         touched_pages=touched_pages, size=size, capped=capped,
                         target_miss=target_miss,
                         knee_bound=bound if held else None)


def _floor_probes(counted: Sequence[Probe], bound: int) -> list[Probe]:
    """The settled probes at or past ``bound`` bytes that read the curve's floor."""
    floor = min(p.miss for p in counted)
    return [p for p in counted
            if p.size >= bound and p.settled in ("full", "fits") and p.miss <= floor + FLAT_TOL_ABS]


def _floor_probe(counted: Sequence[Probe], bound: int) -> Probe:
    """The smallest of :func:`_floor_probes` (the one the decision names)."""
    return min(_floor_probes(counted, bound), key=lambda p: p.size)


def working_set_bound(counted: Sequence[Probe], touched_pages: int | None) -> int | None:
    """The bytes of every page of the relations the windows touched, when a settled probe at
    least that large read the curve's floor: a buffer of that size holds the whole working
    set, so no knee lies beyond it. None without touched pages or such a probe."""
    if not touched_pages or not counted:
        return None
    bound = int(touched_pages) * PAGE_BYTES
    return bound if _floor_probes(counted, bound) else None


def _mb(size: float) -> str:
    mib = size / (1 << 20)
    return f"{mib:.1f}MB" if mib < 10 else f"{mib:.0f}MB"


#: the offline search's upper end: this far past M* (the fit places M* within ~13 %)
HEADROOM = 1.25
#: the narrowed range keeps at least this many grid steps
MIN_STEPS = 4
#: the probed search's first step, as a fraction of its start size: the probes place the
#: knee to within about this much (on the six knee sweeps of benchmarks/results, a TPC-H mix
#: and pgbench key lookups, the fitted M* sat at 0.70–0.94 of the pages the plans touch and
#: the best size at 1.0–1.4x the start), while a step sized by the whole window (the plain
#: search's 0.3 of the range) jumps over the peak
RADIUS = 0.3


def search_window(decision: ProbeDecision, low: int, high: int,
                  step: int) -> tuple[int, int, int] | None:
    """Where the offline search runs after a usable decision: (start, low, high) in bytes
    on the ``step`` grid. It starts at the decided size (a knee inside the range: 25 % past
    M*, the flat side of the knee) and stops a little past M* (past the
    smallest probe when there is no knee), and never short of the first probe at or past M*:
    the probes bracket the knee between their sizes, and a fitted M* may sit anywhere in
    that bracket (a straight miss curve, as uniform key lookups give, puts it ~20 % short of
    where the measured curve reaches its floor). Beyond, the curve is flat, and that memory
    is better left to work_mem and the OS cache. None when the decision is not usable."""
    if not decision.usable or decision.size is None:
        return None
    step = max(1, int(step))
    knee = decision.knee if decision.knee is not None else float(decision.size)
    reach = HEADROOM * max(knee, float(decision.size))
    bracket = [p.size for p in decision.probes if p.accesses > 0 and p.size >= knee]
    if bracket:
        reach = max(reach, float(min(bracket)))
    top = int(min(high, reach) // step * step)
    top = max(top, min(high, low + MIN_STEPS * step))
    begin = float(decision.size)
    if decision.fit is not None and decision.target_miss is None and not decision.capped:
        # a knee inside the range: past M* the curve is flat, so a size a little above it
        # costs only memory while one below it still misses (and the fitted M* tends to
        # fall short): start a margin past it
        begin = HEADROOM * begin
    start = max(low, min(top, int(round(begin / step)) * step))
    return start, low, top


def search_radius(start: int, low: int, high: int, step: int, *, log: bool = False) -> float:
    """The probed search's first step as a fraction of its range [low, high] (the simplex
    strategies' ``init_radius``): :data:`RADIUS` of the start size (on a log-scaled range,
    the factor 1 + RADIUS), at least one grid step, at most the whole range."""
    if high <= low:
        return 1.0
    if log and low > 0:
        return min(1.0, math.log1p(RADIUS) / math.log(high / low))
    return min(1.0, max(float(max(1, step)), RADIUS * start) / (high - low))
