"""Paired, drift-cancelling comparisons: the ratio of a candidate to a reference measured in
the same block or round, with a confidence interval over rounds.

The machine's level drifts by tens of percent over minutes (the same configuration measured
at 175 and ~100 qpm twenty minutes apart, ``benchmarks/README.md``), but a candidate and a
reference measured side by side share that level, so their ratio keeps its precision. All
intervals are computed on log-ratios (a ratio's noise is multiplicative) and exponentiated.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeGuard

import numpy as np
from scipy import stats as sps

from harmony_base.errors import ConfigError
from tuner_client.stats.sequential import cs_multiplier

#: ``t`` and ``bootstrap`` are fixed-n intervals, valid at a number of rounds fixed in advance;
#: ``anytime`` is a confidence sequence (:mod:`tuner_client.stats.sequential`), valid at every
#: round at once, so also where a race chose to stop
Method = Literal["t", "bootstrap", "anytime"]

#: resamples of the percentile bootstrap; 4000 keeps the 2.5 % quantile's own noise < 1 %
BOOTSTRAP_RESAMPLES = 4000


@dataclass(frozen=True)
class RatioInterval:
    """A candidate/reference ratio with its ``level`` confidence interval over ``n`` pairs;
    ``method`` says how it was computed (``anytime``: the value at n of a confidence
    sequence, whose ``low``/``high`` are 0/inf while it is still unbounded)."""

    ratio: float
    low: float
    high: float
    n: int
    level: float
    method: Method = "t"

    @property
    def excludes_one(self) -> bool:
        """The interval lies wholly above or wholly below 1: the difference is significant."""
        return self.low > 1.0 or self.high < 1.0

    @property
    def above_one(self) -> bool:
        return self.low > 1.0

    @property
    def below_one(self) -> bool:
        return self.high < 1.0

    def text(self) -> str:
        """``1.18× (95 % CI 1.07–1.30)``; ``1.18× (95 % anytime-valid CI 1.02–1.37)`` for a
        confidence sequence."""
        pct = f"{100 * self.level:.0f}" if (100 * self.level).is_integer() \
            else f"{100 * self.level:.1f}"
        kind = "anytime-valid CI" if self.method == "anytime" else "CI"
        if not math.isfinite(self.high) or self.low <= 0.0:
            return f"{self.ratio:.2f}× ({pct} % {kind} unbounded yet)"
        return f"{self.ratio:.2f}× ({pct} % {kind} {self.low:.2f}–{self.high:.2f})"

    def fractions(self) -> tuple[float, tuple[float, float]]:
        """(ratio − 1, (low − 1, high − 1)): the form of summary.json's ``improvement``."""
        return self.ratio - 1.0, (self.low - 1.0, self.high - 1.0)


@functools.lru_cache(maxsize=1024)
def t_quantile(q: float, df: float) -> float:
    """Student t quantile, cached: the decision loop asks for the same few many times."""
    return float(sps.t.ppf(q, df))


def _usable(value: float | None) -> TypeGuard[float]:
    """A measured value: present, finite and positive."""
    return value is not None and math.isfinite(value) and value > 0


def log_ratios(candidate: Sequence[float | None],
               reference: Sequence[float | None]) -> list[float]:
    """Per-round ``log(candidate / reference)``; a round with a missing, non-finite or
    non-positive value on either side is dropped (a failed measurement, not a zero)."""
    if len(candidate) != len(reference):
        raise ConfigError(f"paired samples must have equal lengths, but got {len(candidate)} "
                          f"candidate and {len(reference)} reference values")
    return [math.log(c / r) for c, r in zip(candidate, reference, strict=True)
            if _usable(c) and _usable(r)]


def interval_from_logs(logs: Sequence[float] | np.ndarray, *, level: float = 0.95,
                       method: Method = "t", seed: int = 0) -> RatioInterval | None:
    """The ratio interval from per-round log-ratios; None with fewer than 2 of them.

    ``t``: Student t interval on the mean log-ratio (rounds independent, log-ratios roughly
    normal). ``bootstrap``: a seeded percentile bootstrap of the mean over rounds (no normality
    assumed, but too narrow below ~8 rounds, where the t interval is the safer choice).
    ``anytime``: the t-mixture confidence sequence at n
    (:func:`~tuner_client.stats.sequential.confidence_sequence`), valid however n was chosen.
    """
    if not 0.0 < level < 1.0:
        raise ConfigError(f"the confidence level must be between 0 and 1, but got {level}")
    # plain Python: the decision loop calls this thousands of times on ~10 values, where
    # numpy's per-call overhead dominates
    x = [float(v) for v in logs]
    n = len(x)
    if n < 2:
        return None
    mean = math.fsum(x) / n
    if method in ("t", "anytime"):
        sd = math.sqrt(math.fsum((v - mean) ** 2 for v in x) / (n - 1))
        mult = t_quantile(0.5 + level / 2, n - 1) if method == "t" \
            else cs_multiplier(n, 1.0 - level)
        half = mult * sd / math.sqrt(n) if math.isfinite(mult) else math.inf
        low, high = mean - half, mean + half
    elif method == "bootstrap":
        rng = np.random.default_rng(seed)
        means = np.asarray(x)[rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))].mean(axis=1)
        low, high = (float(v) for v in np.quantile(means, [0.5 - level / 2, 0.5 + level / 2]))
    else:
        raise ConfigError(f"method must be 't', 'bootstrap' or 'anytime', but got {method!r}")
    return RatioInterval(math.exp(mean), math.exp(low), math.exp(high), n, level, method)


def paired_ratio_interval(candidate: Sequence[float | None], reference: Sequence[float | None],
                          *, level: float = 0.95, method: Method = "t",
                          seed: int = 0) -> RatioInterval | None:
    """The candidate/reference ratio (geometric mean of the per-round ratios) with its
    interval; None with fewer than 2 usable pairs."""
    return interval_from_logs(log_ratios(candidate, reference), level=level, method=method,
                              seed=seed)


def block_ratio(candidate: Sequence[float | None], reference: Sequence[float | None], *,
                mean: Literal["arithmetic", "geometric"] = "geometric") -> float | None:
    """One block's candidate/reference ratio from its samples (e.g. the B's and A's of
    A B B A): the ratio of their means. None if either side has no usable sample.

    With A B B A a linear drift over the block cancels exactly with the arithmetic mean and
    to first order with the geometric one; the geometric mean is less moved by one outlier.
    """
    c = [v for v in candidate if _usable(v)]
    r = [v for v in reference if _usable(v)]
    if not c or not r:
        return None
    if mean == "arithmetic":
        return statistics.fmean(c) / statistics.fmean(r)
    if mean == "geometric":
        return statistics.geometric_mean(c) / statistics.geometric_mean(r)
    raise ConfigError(f"mean must be 'arithmetic' or 'geometric', but got {mean!r}")


def abba_ratio(values: Sequence[float | None], *, pattern: str = "ABBA",
               mean: Literal["arithmetic", "geometric"] = "geometric") -> float | None:
    """B/A from one interleaved block whose samples follow ``pattern`` (A: the reference,
    B: the candidate), e.g. ``abba_ratio([100, 112, 110, 98])`` ≈ 1.12."""
    if len(values) != len(pattern) or set(pattern) - {"A", "B"}:
        raise ConfigError(f"a block needs one sample per letter of its A/B pattern, but got "
                          f"{len(values)} samples for pattern {pattern!r}")
    a = [v for v, p in zip(values, pattern, strict=True) if p == "A"]
    b = [v for v, p in zip(values, pattern, strict=True) if p == "B"]
    return block_ratio(b, a, mean=mean)


class ReferenceLevel:
    """The running level of the reference configuration: the median of its last ``window``
    block values, robust to one outlier block.

    A candidate's value for the strategy is its ratio to the reference in the same block
    times this level, so the strategy sees throughput in the usual units while the drift of
    the machine cancels out of comparisons. When the reference changes (a new incumbent),
    :meth:`rebase` carries the level over by the measured ratio between the two.
    """

    def __init__(self, window: int = 5) -> None:
        if window < 1:
            raise ConfigError(f"the reference window must be at least 1 block, but got {window}")
        self.window = window
        self._values: deque[float] = deque(maxlen=window)

    def add(self, reference_value: float | None) -> None:
        """Record one block's reference value (a failed measurement is skipped)."""
        if _usable(reference_value):
            self._values.append(float(reference_value))

    @property
    def level(self) -> float | None:
        return statistics.median(self._values) if self._values else None

    def value(self, ratio: float) -> float:
        """The strategy's value for a candidate whose block ratio is ``ratio``."""
        level = self.level
        if level is None:
            raise ConfigError("no reference value has been recorded yet; add() one block first")
        return ratio * level

    def observe_block(self, candidate: float | None, reference: float | None) -> float | None:
        """Record the block's reference and return the candidate's scaled value (None if
        either measurement failed)."""
        self.add(reference)
        if not (_usable(candidate) and _usable(reference)):
            return None
        return self.value(candidate / reference)

    def rebase(self, ratio: float) -> None:
        """The reference becomes a configuration measured at ``ratio`` × the old one."""
        if not _usable(ratio):
            raise ConfigError(f"a rebase ratio must be positive, but got {ratio}")
        self._values = deque((v * ratio for v in self._values), maxlen=self.window)

    def reset(self) -> None:
        self._values.clear()
