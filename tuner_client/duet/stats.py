"""Duet segments analysed: paired log-ratios per second, batch means, the clone's fixed
asymmetry cancelled by the role swaps, and anytime-valid intervals.

**Design.** Each segment runs the reference on one cluster and a candidate on the other at
the same seconds; the next segment of that candidate swaps the roles. Per second
``y = log(candidate / reference)``; per segment its seconds are cut into batches of
``batch_s`` seconds and each batch's mean is one observation (a second's count shares its
neighbours' state: per-second lag-1 autocorrelation 0.3–0.6 in ``benchmarks/duet.py``).

**Asymmetry.** The clone is not the server: another directory, another port, a cache of its
own. Its fixed effect ``a = log(clone / server)`` adds to ``y`` when the candidate runs on the
clone and subtracts when it runs on the server, so with both orientations measured
``θ = (ȳ₊ + ȳ₋) / 2`` and ``a = (ȳ₊ − ȳ₋) / 2`` (the orientations' batch means). Each batch is
taken with its orientation's share of ``a`` removed, and the interval is computed on those.
``a`` is reported (``asymmetry``, as clone/server).

**Interval.** Over the adjusted batches, :func:`tuner_client.stats.horizon.race_interval`:
before the race's time limit the t-mixture confidence sequence
(:mod:`tuner_client.stats.sequential`) with a fifth of the error rate, valid at every look, so
the race may stop after any block where every interval clears; at the limit a Student t
interval with the rest, read once. Bonferroni splits alpha over the candidates. Batches of
one segment share the segment's start (a restart, a reload), which both treat as
independent: ``segment_half_width``, the t interval over the segments' adjusted means (two
segments of each orientation or more), is reported beside it, and where it is the wider the
interval takes its width (``by_segment``): restart-to-restart spread the batches cannot see.

Pure: plain Python and scipy's F distribution; the caller passes the per-second log-ratios.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from scipy.stats import f as f_dist

from harmony_base.errors import ConfigError
from tuner_client.stats.decision import FinalDecision
from tuner_client.stats.drift import Drift, reference_drift
from tuner_client.stats.horizon import method_words, race_interval
from tuner_client.stats.levels import end_level, simultaneous_level
from tuner_client.stats.paired import Method, RatioInterval, t_quantile
from tuner_client.stats.race_outcome import DesignRace

#: the design's name in the decisions and in summary.json
DESIGN = "duet"
#: seconds per batch mean
BATCH_S = 5
#: what the duet's second cluster is: a scratch clone the run makes, or the user's twin
#: (``database.twin``); the decisions and the report name it so
SECOND_CLUSTERS = ("clone", "twin")


def method_text(second: str = "clone", ended: bool = False) -> str:
    """The intervals' method in words (``ended``: the race ran to its time limit), naming
    the ``second`` cluster (clone or twin)."""
    return (f"{method_words(ended)}, over {BATCH_S}-s batch means of paired per-second "
            f"log-ratios, two clusters at the same seconds, the {second}'s asymmetry "
            f"cancelled by role swaps")


METHOD_TEXT = method_text()


@dataclass(frozen=True)
class Segment:
    """One duet segment: ``candidate`` (its index among the configurations; 0 is the
    reference) against the reference, ``on_clone`` whether the candidate ran on the clone,
    and its per-second log(candidate / reference)."""

    candidate: int
    on_clone: bool
    logs: tuple[float, ...]
    #: the reference's own count at each paired second, and those seconds (epoch): its drift
    reference: tuple[float, ...] = ()
    seconds: tuple[float, ...] = ()

    def batches(self, batch_s: int = BATCH_S) -> list[float]:
        """The segment's whole batches' means (a tail shorter than a batch left out)."""
        n = len(self.logs) // batch_s
        return [statistics.fmean(self.logs[k * batch_s:(k + 1) * batch_s]) for k in range(n)]

    def reference_batches(self, batch_s: int = BATCH_S) -> list[tuple[float, float]]:
        """(mid second, the reference's mean count) of each whole batch of the segment."""
        n = min(len(self.reference), len(self.seconds)) // batch_s
        return [(statistics.fmean(self.seconds[k * batch_s:(k + 1) * batch_s]),
                 statistics.fmean(self.reference[k * batch_s:(k + 1) * batch_s]))
                for k in range(n)]


def reference_drift_of(segments: Sequence[Segment], batch_s: int = BATCH_S) -> Drift | None:
    """The reference's drift over the duet's batches (:mod:`tuner_client.stats.drift`), one
    intercept for each cluster it ran on (the clone's asymmetry is not a drift), its noise
    from the successive batches of each segment."""
    rows = [(t, v, s.on_clone, k) for k, s in enumerate(segments)
            for t, v in s.reference_batches(batch_s)]
    # the reference runs on the server while the candidate is on the clone
    return reference_drift([r[0] for r in rows], [r[1] for r in rows],
                           groups=["server" if r[2] else "clone" for r in rows],
                           runs=[r[3] for r in rows], unit="batches")


@dataclass(frozen=True)
class DuetComparison:
    """A candidate against the reference from the duet's segments."""

    interval: RatioInterval
    batches: int
    segments: int
    #: the second cluster's fixed asymmetry, second/server
    asymmetry: float
    #: half-width (log scale) of the t interval over segment means, the cross-check
    segment_half_width: float | None
    #: what the second cluster is (:data:`SECOND_CLUSTERS`)
    second: str = "clone"
    #: whether the interval is the segments' width (wider than its batches said)
    by_segment: bool = False

    def text(self) -> str:
        seg = ("" if self.segment_half_width is None
               else f", ±{100 * self.segment_half_width:.1f} % by segment"
               + (" (the interval's: its batches said less)" if self.by_segment else ""))
        return (f"{self.interval.text()}, duet: {self.segments} segments, {self.batches} "
                f"batches; {self.second}/server asymmetry {self.asymmetry:.3f} "
                f"cancelled{seg}")


def compare(segments: Sequence[Segment], candidate: int, *, level: float = 0.95,
            batch_s: int = BATCH_S, ended: bool = False, second: str = "clone"
            ) -> DuetComparison | None:
    """``candidate`` against the reference (None until both orientations gave batches);
    ``ended``: the race reached its time limit (the end's t interval, not the sequence);
    ``second`` names the second cluster in its words (clone or twin)."""
    if not 0.0 < level < 1.0:
        raise ConfigError(f"the confidence level must be between 0 and 1, but got {level}")
    mine = [s for s in segments if s.candidate == candidate]
    by_side: dict[bool, list[float]] = {True: [], False: []}
    seg_means: list[tuple[bool, float]] = []
    seg_batches: list[list[float]] = []
    for seg in mine:
        batches = seg.batches(batch_s)
        if batches:
            by_side[seg.on_clone] += batches
            seg_means.append((seg.on_clone, statistics.fmean(batches)))
            seg_batches.append(batches)
    if not by_side[True] or not by_side[False]:
        return None
    asym = 0.5 * (statistics.fmean(by_side[True]) - statistics.fmean(by_side[False]))
    adjusted = [v - asym for v in by_side[True]] + [v + asym for v in by_side[False]]
    # the point: the two orientations weigh alike, however many batches each gave, and the
    # interval moves with it
    theta = 0.5 * (statistics.fmean(by_side[True]) + statistics.fmean(by_side[False]))
    if ended:
        interval = _end_interval(by_side[True], by_side[False], theta, level)
    else:
        found = race_interval(adjusted, level=level, ended=False)
        if found is None:
            return None
        shift = math.exp(theta - statistics.fmean(adjusted))
        interval = RatioInterval(math.exp(theta), found.low * shift, found.high * shift,
                                 len(adjusted), level, found.method)
    half = segment_half_width(seg_means, asym, end_level(level) if ended else level)
    widened = half is not None and interval.low > 0 and math.isfinite(interval.high) \
        and half > 0.5 * math.log(interval.high / interval.low) \
        and segments_differ(seg_means, seg_batches)
    if widened and half is not None:
        # the batches of a segment share its start (a restart, a reload, the caches it
        # left): where the segments' means spread beyond what their batches explain, the
        # segments' width is the one that holds (s28: shared_buffers in a memory cgroup
        # read ±0.5 % by batches and ±2.5 % by segment, while pgbench's own
        # restart-to-restart rounds read 0.70-1.06x)
        interval = replace(interval, low=interval.ratio * math.exp(-half),
                           high=interval.ratio * math.exp(half))
    return DuetComparison(interval, len(adjusted), len(seg_means), math.exp(asym), half,
                          second, widened)


def segment_half_width(seg_means: Sequence[tuple[bool, float]], asym: float,
                       level: float) -> float | None:
    """Half-width (log scale) of the t interval at ``level`` over the segments' means
    (``(on_clone, mean)``), each with its orientation's share of ``asym`` removed; None
    without two segments of each orientation (one of each gives two equal means).

    The adjusted means share one mean only because ``asym`` was estimated from them: two
    parameters (the effect and the asymmetry) come out of ``k`` segments, so the residual
    variance has ``k - 2`` degrees of freedom, not ``k - 1``. Four segments read with
    ``k - 1`` gave half the width they hold at 98.75 % (t 5.39 on a variance a third too
    small, where t with 2 degrees of freedom is 8.86)."""
    sides = [side for side, _ in seg_means]
    if min(sides.count(True), sides.count(False)) < 2:
        return None
    adjusted = [m - asym if side else m + asym for side, m in seg_means]
    k = len(adjusted)
    mean = math.fsum(adjusted) / k
    variance = math.fsum((v - mean) ** 2 for v in adjusted) / (k - 2)
    return t_quantile(0.5 + level / 2, k - 2) * math.sqrt(variance / k)


#: the F test's level at which the segments' means are said to spread beyond their batches
SEGMENT_EFFECT_P = 0.05


def segments_differ(seg_means: Sequence[tuple[bool, float]],
                    seg_batches: Sequence[Sequence[float]]) -> bool:
    """Whether the segments' means (each orientation's mean removed: the asymmetry) spread
    beyond what the batches within them explain: a one-sided F test of their variance
    against the pooled within-segment variance over the batches per segment, at
    :data:`SEGMENT_EFFECT_P`. Without it a segment interval of a few segments (3 degrees of
    freedom from 4) would replace a valid batch interval about twice as wide as needed."""
    k, n = len(seg_means), sum(len(b) for b in seg_batches)
    if k < 4 or n - k < 2:
        return False
    side_mean = {side: statistics.fmean([m for s, m in seg_means if s == side])
                 for side in (True, False)}
    between = sum((m - side_mean[s]) ** 2 for s, m in seg_means) / (k - 2)
    within = sum((v - statistics.fmean(b)) ** 2 for b in seg_batches for v in b) / (n - k)
    per_segment = n / k
    if within <= 0:
        return between > 0
    f = between / (within / per_segment)
    return float(f_dist.sf(f, k - 2, n - k)) < SEGMENT_EFFECT_P


def _end_interval(on_clone: list[float], on_server: list[float], theta: float,
                  level: float) -> RatioInterval:
    """The end's t interval of ``theta``, the mean of the two orientations' batch means: the
    asymmetry estimated from the same batches costs a degree of freedom, so the variance is
    pooled within each orientation (n − 2 degrees of freedom; unbounded below 3 batches)."""
    n = len(on_clone) + len(on_server)
    if n < 3:
        return RatioInterval(math.exp(theta), 0.0, math.inf, n, level, "t")
    ss = sum((v - statistics.fmean(side)) ** 2 for side in (on_clone, on_server) for v in side)
    se = 0.5 * math.sqrt(ss / (n - 2) * (1 / len(on_clone) + 1 / len(on_server)))
    half = t_quantile(0.5 + end_level(level) / 2, n - 2) * se
    return RatioInterval(math.exp(theta), math.exp(theta - half), math.exp(theta + half), n,
                         level, "t")


@dataclass(frozen=True)
class DuetRace(DesignRace[DuetComparison]):
    """Every candidate against the reference from one duet, and the decision (its
    observations are batches)."""

    design: ClassVar[str] = DESIGN
    design_words: ClassVar[str] = DESIGN
    method: ClassVar[Method] = "anytime"
    method_text: ClassVar[str] = METHOD_TEXT

    segment_s: float
    segments: int
    #: how the second cluster was made (or named) and what it cost (for the decisions)
    clone: str = ""
    #: the reference's own level over the race (None: too few batches)
    drift: Drift | None = None
    #: the race ran to its time limit: its intervals are the end's t intervals
    ended: bool = False
    #: what the second cluster is (:data:`SECOND_CLUSTERS`): a clone, or the user's twin
    second: str = "clone"

    def interval_method(self) -> Method:
        return "t" if self.ended else "anytime"

    def interval_method_text(self) -> str:
        return method_text(self.second, self.ended)

    def design_line(self) -> str:
        return (f"final race measured by {DESIGN}: {self.segments} segments of "
                f"{self.segment_s:g} s, the server and {self.clone or self._second_words()} "
                f"running the reference and one candidate at the same seconds, roles swapped "
                f"between segments; the ratio counts the workload client's transactions per "
                f"second; intervals at {100 * self.level:.4g} % (Bonferroni over "
                f"{len(self.comparisons)} candidates) over {BATCH_S}-s batches: "
                f"{method_words(self.ended)}")

    def _second_words(self) -> str:
        return "its clone" if self.second == "clone" else "the twin"

    def observations(self, comparison: DuetComparison) -> int:
        return comparison.batches

    def to_final_decision(self) -> FinalDecision:
        """The race's decision, its method and ``second`` naming the second cluster (the
        report says "a clone of it" or "the twin")."""
        return replace(super().to_final_decision(), second=self.second)


def race(segments: Sequence[Segment], labels: Sequence[str], *, segment_s: float,
         level: float = 0.95, clone: str = "", ended: bool = False,
         second: str = "clone") -> DuetRace | None:
    """``labels[0]`` the reference, every other one a candidate; the winner is the best
    candidate whose simultaneous interval lies above 1. None until every candidate has
    segments of both orientations. ``ended``: the race reached its time limit, fixed in
    advance (:mod:`tuner_client.stats.horizon`); ``second``: what the second cluster is, in
    the decisions' words (:data:`SECOND_CLUSTERS`)."""
    if len(labels) < 2:
        raise ConfigError(f"a race needs a reference and at least one candidate, but got "
                          f"{len(labels)} labels")
    if second not in SECOND_CLUSTERS:
        raise ConfigError(f"a duet's second cluster is one of {', '.join(SECOND_CLUSTERS)}, "
                          f"but got {second!r}")
    simultaneous = simultaneous_level(level, len(labels) - 1)
    comparisons, plain = {}, {}
    for k in range(1, len(labels)):
        strict = compare(segments, k, level=simultaneous, ended=ended, second=second)
        loose = compare(segments, k, level=level, ended=ended, second=second)
        if strict is None or loose is None:
            return None
        comparisons[labels[k]], plain[labels[k]] = strict, loose
    clear = [label for label, c in comparisons.items() if c.interval.above_one]
    winner = max(clear, key=lambda label: comparisons[label].interval.ratio, default=None)
    return DuetRace(labels[0], comparisons, plain, winner, simultaneous, level, segment_s,
                    len(segments), clone, reference_drift_of(segments), ended=ended,
                    second=second)
