"""Unstable configurations: a candidate whose measurements spread far beyond the reference's,
or that degrades when measured again, is flagged and never recommended.

TUNA (Freischuetz et al., EuroSys 2025) found that configurations picked as best on noisy
machines often lose ≥ 30 % when deployed, and that most of them were the unstable ones. Here
the spread is compared on log values (≈ CV) after removing a linear trend in time, because
the machine's slow drift inflates every label's raw spread alike and would hide the
candidate's own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import f as f_dist

from harmony_base.errors import ConfigError
from tuner_client.stats.paired import t_quantile

#: flag when the candidate's detrended spread exceeds this multiple of the reference's, or
#: the multiple that equal spreads exceed with probability ``SPREAD_ALPHA`` at the number of
#: values (the F distribution's; larger for short races: 5 values, 3 degrees of freedom each
#: after the trend, make it 5.4×). A fixed 2.5× flagged equal spreads in 2.1 % of 8-value
#: races but in 6.7 % of 5-value ones (tests/test_stats_decision.py), and a race that stops
#: on its claim may be that short: on the demo it kept the original over a 1.28×
#: (1.10–1.49) winner, 10.9 % against 4.3 %.
SPREAD_LIMIT = 2.5
SPREAD_ALPHA = 0.01
#: the reference's spread is taken as at least this (log units ≈ CV), so an unusually quiet
#: reference does not make every candidate look unstable (the quietest point CV measured
#: here is 4.4 %, ``benchmarks/results/evidence_estimators.quick.md``)
SPREAD_FLOOR = 0.02
#: degrading: the later paired ratios are below the first ones by at least this fraction,
#: significantly (one-sided, ``DEGRADE_LEVEL``)
DEGRADE_MARGIN = 0.10
DEGRADE_LEVEL = 0.95


def _logs(values: Sequence[float | None]) -> list[float]:
    return [math.log(v) for v in values if v is not None and math.isfinite(v) and v > 0]


def log_spread(values: Sequence[float | None], *, detrend: bool = True) -> float | None:
    """The standard deviation of log values (≈ CV), after a least-squares line in sample order
    is removed when ``detrend``; None with too few values (3 detrended, 2 otherwise)."""
    x = _logs(values)
    n = len(x)
    if n < (3 if detrend else 2):
        return None
    mean = math.fsum(x) / n
    centred = [v - mean for v in x]
    if not detrend:
        return math.sqrt(math.fsum(c * c for c in centred) / (n - 1))
    t = [i - (n - 1) / 2 for i in range(n)]
    slope = math.fsum(a * b for a, b in zip(t, centred, strict=True)) / math.fsum(a * a for a in t)
    return math.sqrt(math.fsum((c - slope * a) ** 2 for a, c in zip(t, centred, strict=True))
                     / (n - 2))


def spread_reason(candidate: Sequence[float | None], reference: Sequence[float | None], *,
                  limit: float = SPREAD_LIMIT, floor: float = SPREAD_FLOOR,
                  detrend: bool = True) -> str | None:
    """Why the candidate's samples are too spread compared with the reference's, or None.

    Both sequences are in time order (e.g. one value per final round).
    """
    if limit <= 1.0 or floor < 0.0:
        raise ConfigError(f"the spread limit must be > 1 and the floor ≥ 0, but got "
                          f"limit {limit}, floor {floor}")
    cand = log_spread(candidate, detrend=detrend)
    ref = log_spread(reference, detrend=detrend)
    if cand is None or ref is None:
        return None
    lost = 2 if detrend else 1  # degrees of freedom the mean (and the trend) take
    by_chance = math.sqrt(float(f_dist.ppf(1.0 - SPREAD_ALPHA, len(_logs(candidate)) - lost,
                                           len(_logs(reference)) - lost)))
    limit = max(limit, by_chance)
    base = max(ref, floor)
    if cand <= limit * base:
        return None
    floor_note = f" (floored at {100 * floor:.0f} %)" if ref < floor else ""
    return (f"its samples spread {100 * cand:.1f} % against the reference's "
            f"{100 * ref:.1f} %{floor_note}: {cand / base:.1f}× the reference's spread, above "
            f"the limit of {limit:.1f}× (equal spreads exceed it by chance at most "
            f"{100 * SPREAD_ALPHA:g} % of the time at these counts)")


def degrade_reason(ratios: Sequence[float | None], *, first: int = 1,
                   margin: float = DEGRADE_MARGIN,
                   level: float = DEGRADE_LEVEL) -> str | None:
    """Why the candidate degrades on re-measurement, or None.

    ``ratios`` are its paired ratios to the same reference in time order; the first ``first``
    (e.g. the measurement that made it the search's best) are compared with the rest. Flagged
    when the rest's mean log-ratio lies below the first's by more than ``margin`` with
    one-sided confidence ``level``. The margin absorbs the winner's curse: the search's best
    was picked on a lucky first value, so some regression to the mean is expected of every
    candidate and is not instability.
    """
    x = _logs(ratios)
    if first < 1 or len(x) < first + 2:
        return None
    head, rest = np.array(x[:first]), np.array(x[first:])
    drop = float(head.mean() - rest.mean())
    # the first values' own noise is estimated from the later ones (one value has none)
    sd = float(rest.std(ddof=1))
    se = sd * math.sqrt(1.0 / rest.size + 1.0 / head.size)
    lower = drop - t_quantile(level, rest.size - 1) * se
    if lower <= -math.log(1.0 - margin):
        return None
    return (f"it degraded on re-measurement: {math.exp(head.mean()):.2f}× the reference at "
            f"first, {math.exp(rest.mean()):.2f}× over the {rest.size} later rounds "
            f"(a drop of at least {100 * (1 - math.exp(-lower)):.0f} % at "
            f"{100 * level:.0f} % confidence)")


def unstable_reason(candidate: Sequence[float | None], reference: Sequence[float | None], *,
                    first: int = 0, limit: float = SPREAD_LIMIT,
                    floor: float = SPREAD_FLOOR) -> str | None:
    """Why a candidate is unstable, or None: its spread against the reference's, then (when
    ``first`` > 0) whether its paired ratios after the first ``first`` rounds degraded.
    ``candidate`` and ``reference`` are paired by round, in time order."""
    reason = spread_reason(candidate, reference, limit=limit, floor=floor)
    if reason is not None or first < 1:
        return reason
    ratios = [c / r if c is not None and r is not None and r > 0 else None
              for c, r in zip(candidate, reference, strict=True)]
    return degrade_reason(ratios, first=first)
