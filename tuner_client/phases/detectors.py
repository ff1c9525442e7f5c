"""The detectors that drive the multi-pass flow: workload shift, local minimum and, on live
traffic, a shift of the statement mix.

Both are pure: they are fed measured throughputs (aggregated per point, in the objective's
own sign) and answer whether the flow should go back to the offline session. Every
decision is logged at INFO with the numbers it rests on.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from harmony_base.errors import ConfigError
from tuner_client.stats.mix import share_distance

logger = logging.getLogger(__name__)


def _finite(values: Sequence[float], what: str) -> list[float]:
    out = [float(v) for v in values]
    if not out:
        raise ConfigError(f"{what}: needs at least one value, got none")
    bad = [v for v in out if not math.isfinite(v)]
    if bad:
        raise ConfigError(f"{what}: values must be finite, got {bad}")
    return out


@dataclass
class WorkloadShiftDetector:
    """Flags a workload shift after ``outside`` consecutive measurements outside a band.

    The band is ``[worst, best]`` of the converged online simplex, recorded with :meth:`arm`,
    widened by ``margin`` (a fraction of the band's centre) or by the measured noise when that
    is larger: the relative spread of the samples within one point, so that only a drop
    bigger than what repeated samples of one configuration already show counts. A measurement back
    inside the band resets the run of outliers; after a detection the detector disarms.
    """

    outside: int = 3
    margin: float = 0.0
    band: tuple[float, float] | None = None
    run: int = 0
    evidence: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.outside, bool) or not isinstance(self.outside, int) or self.outside < 1:
            raise ConfigError(f"flow.shift.outside must be an integer >= 1, got {self.outside!r}")
        if not (isinstance(self.margin, int | float) and 0 <= self.margin < 1):
            raise ConfigError(f"flow.shift.margin must be a fraction in [0, 1), "
                              f"got {self.margin!r}")

    @property
    def armed(self) -> bool:
        return self.band is not None

    def arm(self, simplex_values: Sequence[float], noise: float = 0.0) -> tuple[float, float]:
        """Record the band from the converged simplex's values; returns ``(low, high)``.

        ``noise``: the relative spread of repeated samples of one point (e.g. the median over
        the vertices of (max − min) / median of each vertex's samples).
        """
        values = _finite(simplex_values, "workload-shift band")
        if not (math.isfinite(noise) and noise >= 0):
            raise ConfigError(f"workload-shift noise must be a finite fraction >= 0, got {noise!r}")
        low, high = min(values), max(values)
        pad = max(self.margin, noise) * abs(low + high) / 2
        self.band = (low - pad, high + pad)
        self.run = 0
        self.evidence = []
        logger.info("workload-shift detector armed: band [%.4g, %.4g] from %d simplex values %s "
                    "(shift after %d consecutive measurements outside)",
                    self.band[0], self.band[1], len(values), [round(v, 4) for v in values],
                    self.outside)
        return self.band

    def observe(self, value: float) -> bool:
        """Feed one later measurement; True once ``outside`` consecutive ones left the band."""
        if self.band is None:
            return False
        low, high = self.band
        v = float(value)
        if math.isfinite(v) and low <= v <= high:
            if self.run:
                logger.info("workload-shift detector: %.4g back inside [%.4g, %.4g]; run of %d "
                            "outliers reset", v, low, high, self.run)
            self.run = 0
            self.evidence = []
            return False
        self.run += 1
        self.evidence.append(v)
        if self.run >= self.outside:
            logger.info("workload shift detected: %d consecutive measurements %s outside the "
                        "converged band [%.4g, %.4g] -> restart from the offline session",
                        self.run, [round(x, 4) for x in self.evidence], low, high)
            self.band = None
            self.run = 0
            return True
        logger.info("workload-shift detector: %.4g outside [%.4g, %.4g] (%d of %d)",
                    v, low, high, self.run, self.outside)
        return False


@dataclass
class LocalMinimumDetector:
    """Flags an online simplex stuck below the offline session's best.

    ``check`` is true when *every* vertex is worse than the offline best by more than
    ``threshold``, a fraction of the offline best (0.1 = 10 % worse). With
    ``maximize=True`` (throughput) worse means lower, else higher.
    """

    threshold: float = 0.1
    maximize: bool = True

    def __post_init__(self) -> None:
        if not (isinstance(self.threshold, int | float) and not isinstance(self.threshold, bool)
                and self.threshold >= 0):
            raise ConfigError(f"flow.local_minimum.threshold must be a number >= 0, "
                              f"got {self.threshold!r}")

    def limit(self, offline_best: float) -> float:
        """The value every vertex must be worse than to trigger a restart."""
        return (offline_best - self.threshold * abs(offline_best) if self.maximize
                else offline_best + self.threshold * abs(offline_best))

    def check(self, vertex_values: Sequence[float], offline_best: float) -> bool:
        """True when all vertices are worse than ``offline_best`` by more than the threshold."""
        values = [float(v) for v in vertex_values]
        if not values:
            return False
        limit = self.limit(float(offline_best))
        # a failed vertex (non-finite) counts as worse than any measurement
        worse = [(not math.isfinite(v)) or (v < limit if self.maximize else v > limit)
                 for v in values]
        shown = [round(v, 4) for v in values]
        if all(worse):
            logger.info("local minimum detected: all %d online vertices %s are worse than the "
                        "offline best %.4g by more than %.0f%% (limit %.4g) -> restart from the "
                        "offline session", len(values), shown, offline_best,
                        100 * self.threshold, limit)
            return True
        logger.info("local-minimum check: %d of %d online vertices %s within %.0f%% of the "
                    "offline best %.4g (limit %.4g): carry on", worse.count(False), len(values),
                    shown, 100 * self.threshold, offline_best, limit)
        return False


@dataclass
class MixShiftDetector:
    """Live mode: flags a shift of the statement mix (which statements carry the time).

    Armed with the time-share vector of the traffic the converged point was tuned on
    (:func:`tuner_client.stats.mix.time_shares`); a later window whose vector lies farther
    than ``distance`` (total variation, 0..1) from it counts as outside, and ``outside``
    consecutive such windows are a shift. A window back near the armed mix resets the run.
    """

    outside: int = 3
    distance: float = 0.25
    mix: dict[str, float] | None = None
    run: int = 0
    evidence: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.outside, bool) or not isinstance(self.outside, int) or self.outside < 1:
            raise ConfigError(f"flow.shift.outside must be an integer >= 1, got {self.outside!r}")
        if not (isinstance(self.distance, int | float) and 0 < self.distance <= 1):
            raise ConfigError(f"workload.observe.shift_distance must be in (0, 1], "
                              f"got {self.distance!r}")

    def arm(self, shares: Mapping[str, float]) -> None:
        """Record the mix to compare later windows with."""
        if not shares:
            raise ConfigError("mix-shift detector: cannot arm on a window without statements")
        self.mix, self.run, self.evidence = dict(shares), 0, []
        top = sorted(shares.items(), key=lambda kv: -kv[1])[:5]
        logger.info("mix-shift detector armed on %d statements (top time shares %s); shift "
                    "after %d consecutive windows farther than %.2f", len(shares),
                    [(q, round(w, 3)) for q, w in top], self.outside, self.distance)

    def observe(self, shares: Mapping[str, float]) -> bool:
        """Feed one later window's time shares; True once ``outside`` consecutive ones moved
        farther than ``distance`` from the armed mix (the detector then disarms)."""
        if self.mix is None:
            return False
        if not shares:
            logger.info("mix-shift detector: a window without enough calls says nothing")
            return False
        d = share_distance(self.mix, shares)
        if d <= self.distance:
            self.run, self.evidence = 0, []
            logger.info("mix-shift detector: distance %.3f <= %.2f", d, self.distance)
            return False
        self.run += 1
        self.evidence.append(d)
        if self.run >= self.outside:
            logger.info("statement mix shift detected: %d consecutive windows at distances %s "
                        "(> %.2f) from the tuned mix -> re-tune", self.run,
                        [round(x, 3) for x in self.evidence], self.distance)
            self.mix, self.run = None, 0
            return True
        logger.info("mix-shift detector: distance %.3f > %.2f (%d of %d)", d, self.distance,
                    self.run, self.outside)
        return False
