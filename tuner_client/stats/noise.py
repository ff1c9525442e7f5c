"""A seeded noise model of these 2-core shared machines, with a simulated clock, so tests and
benchmarks can check decisions against a known truth.

A measured value = truth(point) × drift(t) × replica bias × point noise × (rarely) an
outlier. The constants below come from the project's own measurements:

- point noise: a 20-s point of the memory-bound mix (``4Q6,4Q9,4Q13``, SF 0.4, 256 MB cgroup)
  has a CV of 9.4 % (count estimator, median of 3 samples,
  ``benchmarks/results/evidence_estimators.quick.md``); an ~80-s point 4.4 %
  (concurrency estimator, same file). That is ≈ 1/√time, so the CV scales as
  ``POINT_CV_20S·√(20 s / seconds)``.
- drift: the same configuration measured at 175 and then ~100 qpm twenty minutes later in one
  end-to-end run (``benchmarks/README.md``, "The search ranks noise"), default at 316 and
  539 qpm 16 minutes apart (issue 14), one configuration's rounds spanning max/min 1.8
  (``benchmarks/results/evidence_sensitivity_4Q6-4Q9-4Q13.md``, base 84.5–153.6). Modelled
  as an Ornstein–Uhlenbeck walk of the log level with a stationary sd of 0.15 (±15 %;
  a max/min of ~1.8 over ±2 sd) and a correlation time of 15 minutes, clipped at ±0.35.
- outliers: per-sample max/min 1.55 with a per-sample CV of 14.7 % (estimators file) means
  single samples far outside the bulk; modelled as 1 % of points multiplied by
  e^{±U(0.3, 0.6)} (0.55–0.74× or 1.35–1.8×). The rate is an assumption (no run counted them).
- replica bias: not measured here (one machine); 5 % CV per replica is an assumption in the
  range TUNA reports for memory-bound cloud VMs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from harmony_base.errors import ConfigError

Point = Mapping[str, Any]

#: per-point CV of a 20-s point (count estimator), evidence_estimators.quick.md
POINT_CV_20S = 0.094
#: the sample length those CVs were measured at
POINT_SECONDS_REF = 20.0
#: per-point CV of an ~80-s point (concurrency estimator), evidence_estimators.quick.md
POINT_CV_80S = 0.044
#: stationary sd of the log drift: max/min 1.8 over a run's rounds (sensitivity base,
#: 84.5–153.6 qpm) ≈ ±2 sd of 0.15
DRIFT_SD = 0.15
#: correlation time of the drift: 175 → ~100 qpm in 20 minutes (README), 316 → 539 in 16 (issue 14)
DRIFT_TIMESCALE_S = 900.0
#: the walk never leaves ±0.35 in log (0.70–1.42×): 539/316 = 1.71 ≈ e^{0.53} end to end
DRIFT_BOUND = 0.35
OUTLIER_RATE = 0.01
OUTLIER_LOG_RANGE = (0.3, 0.6)
REPLICA_CV = 0.05


@dataclass(frozen=True)
class NoiseModel:
    """The noise of one measurement setup; :meth:`measured` is the memory-bound setup."""

    point_cv: float = POINT_CV_20S
    point_seconds: float = POINT_SECONDS_REF
    drift_sd: float = DRIFT_SD
    drift_timescale_s: float = DRIFT_TIMESCALE_S
    drift_bound: float = DRIFT_BOUND
    outlier_rate: float = OUTLIER_RATE
    outlier_log_range: tuple[float, float] = OUTLIER_LOG_RANGE
    replica_cv: float = REPLICA_CV
    #: ``lognormal``: a value × e^{cv·z}; ``normal``: a value × (1 + cv·z), the form the
    #: BME-prior replay (``benchmarks/bme_prior.py``) was measured with, kept so its numbers hold
    point_shape: Literal["lognormal", "normal"] = "lognormal"

    def __post_init__(self) -> None:
        if min(self.point_cv, self.drift_sd, self.drift_bound, self.outlier_rate,
               self.replica_cv) < 0 or self.point_seconds <= 0 or self.drift_timescale_s <= 0:
            raise ConfigError(f"noise model parameters must be non-negative (times positive), "
                              f"but got {self}")
        if self.point_shape not in ("lognormal", "normal"):
            raise ConfigError(f"point_shape must be 'lognormal' or 'normal', but got "
                              f"{self.point_shape!r}")

    @classmethod
    def measured(cls) -> NoiseModel:
        return cls()

    @classmethod
    def quiet(cls) -> NoiseModel:
        """No noise at all: the truth, for checking a simulation's plumbing."""
        return cls(point_cv=0.0, drift_sd=0.0, outlier_rate=0.0, replica_cv=0.0)

    def with_(self, **changes: Any) -> NoiseModel:
        return replace(self, **changes)

    def cv_at(self, seconds: float) -> float:
        """Point CV of a sample of ``seconds`` (≈ 1/√time: 9.4 % at 20 s, 4.7 % at 80 s
        predicted against 4.4 % measured)."""
        return self.point_cv * math.sqrt(self.point_seconds / seconds)


class NoisyObjective:
    """A synthetic objective on a simulated clock: ``measure(point, seconds)`` returns the
    truth with the model's noise and advances the clock by ``seconds``.

    The same seed gives the same values for the same sequence of calls.
    """

    def __init__(self, truth: Callable[[Point], float], model: NoiseModel | None = None,
                 seed: int = 0, *, replica: int = 0) -> None:
        self.truth = truth
        self.model = model or NoiseModel.measured()
        self.rng = np.random.default_rng(seed)
        self.now = 0.0
        self._drift = float(self.rng.normal(0.0, self.model.drift_sd)) \
            if self.model.drift_sd else 0.0
        self._drift = float(np.clip(self._drift, -self.model.drift_bound, self.model.drift_bound))
        bias_rng = np.random.default_rng([seed, replica, 7])
        self.replica_bias = math.exp(float(bias_rng.normal(0.0, self.model.replica_cv)))

    def _advance(self, seconds: float) -> None:
        if seconds <= 0:
            return
        self.now += seconds
        m = self.model
        if m.drift_sd == 0.0:
            return
        decay = math.exp(-seconds / m.drift_timescale_s)
        step = m.drift_sd * math.sqrt(1.0 - decay * decay) * float(self.rng.standard_normal())
        self._drift = float(np.clip(self._drift * decay + step, -m.drift_bound, m.drift_bound))

    @property
    def drift(self) -> float:
        """The machine's current level (multiplier, 1 = no drift)."""
        return math.exp(self._drift)

    def idle(self, seconds: float) -> None:
        """Let time pass without measuring (a restart, a warm-up)."""
        self._advance(seconds)

    def measure(self, point: Point, seconds: float = POINT_SECONDS_REF) -> float:
        """One noisy measurement over ``seconds``: the level at the window's middle."""
        if seconds <= 0:
            raise ConfigError(f"a measurement takes a positive time, but got {seconds} s")
        self._advance(seconds / 2)
        m = self.model
        log_noise = float(self.rng.normal(0.0, m.cv_at(seconds))) if m.point_cv else 0.0
        if m.outlier_rate and self.rng.random() < m.outlier_rate:
            lo, hi = m.outlier_log_range
            log_noise += float(self.rng.choice([-1.0, 1.0]) * self.rng.uniform(lo, hi))
        factor = 1.0 + log_noise if m.point_shape == "normal" else math.exp(log_noise)
        value = self.truth(point) * self.drift * self.replica_bias * factor
        self._advance(seconds / 2)
        return value


def round_order(labels: Sequence[str], index: int, rotation: int = 0) -> list[str]:
    """The measuring order of round ``index``: rotated by ``rotation``, reversed on odd
    rounds (A B C, C B A, …), so a linear drift cancels over each pair of rounds."""
    k = rotation % len(labels) if labels else 0
    order = list(labels[k:]) + list(labels[:k])
    return order[::-1] if index % 2 else order


def measure_round(objective: NoisyObjective, points: Mapping[str, Point], index: int, *,
                  seconds: float = POINT_SECONDS_REF,
                  rotation: int = 0) -> dict[str, float | None]:
    """One final round: every labelled point measured once, in :func:`round_order`."""
    got = {label: objective.measure(points[label], seconds)
           for label in round_order(list(points), index, rotation)}
    return {label: got[label] for label in points}


def interleaved_rounds(objective: NoisyObjective, points: Mapping[str, Point], rounds: int, *,
                       seconds: float = POINT_SECONDS_REF,
                       rng: np.random.Generator | None = None) -> list[dict[str, float | None]]:
    """``rounds`` rounds of :func:`measure_round`; given ``rng``, each pair of rounds gets a
    random rotation, so no label is always measured first."""
    out: list[dict[str, float | None]] = []
    rotation = 0
    for r in range(rounds):
        if r % 2 == 0 and rng is not None:
            rotation = int(rng.integers(len(points)))
        out.append(measure_round(objective, points, r, seconds=seconds, rotation=rotation))
    return out
