"""The t-mixture confidence sequence: its closed form against the mixture it comes from, its
coverage at every n at once under repeated looks (where a fixed-n t interval checked after
every round fails), and its price in width."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from harmony_base.errors import ConfigError
from tuner_client.stats.paired import paired_ratio_interval
from tuner_client.stats.sequential import (
    EFFECT_SCALE,
    best_effect_scale,
    confidence_sequence,
    cs_multiplier,
    t_mixture_e_value,
)


def _mixture_by_quadrature(x: list[float], mu: float, g: float) -> float:
    """The Bayes factor from its definition: the likelihood mixed over the effect
    δ ~ N(0, g) and the scale σ with the right-Haar prior 1/σ, over the same without δ.

    Integrated on a fine grid in (δ, log σ) (dσ/σ = d log σ: the right-Haar prior): the
    integrands are smooth and vanish at the edges, so Simpson's rule is exact to far below the
    test's tolerance, and one vectorised pass takes a tenth of a second
    (scipy's adaptive dblquad took 40 s, and over 300 s at a load average of 20)."""
    y = np.asarray(x) - mu
    log_sigma = np.linspace(-6.0, 4.0, 1001)[:, None]
    delta = np.linspace(-12.0, 12.0, 1201)[None, :]
    sigma = np.exp(log_sigma)

    def lik(d: np.ndarray) -> np.ndarray:
        # the likelihood of the observations at each (log σ, δ); (2π)^(-n/2) cancels
        squares = sum(((v - d * sigma) / sigma) ** 2 for v in y)
        return np.exp(-0.5 * squares) / sigma ** len(y)

    prior = stats.norm.pdf(delta, scale=math.sqrt(g))
    num = integrate.simpson(integrate.simpson(lik(delta) * prior, x=delta[0], axis=1),
                            x=log_sigma[:, 0])
    den = integrate.simpson(lik(np.zeros((1, 1)))[:, 0], x=log_sigma[:, 0])
    return float(num / den)


@pytest.mark.parametrize("g", [1.0, 2.0])
def test_the_closed_form_is_the_mixture_and_inverts_to_the_multiplier(g: float) -> None:
    x = [0.03, -0.05, 0.11, 0.02, 0.07]
    for mu in (0.0, 0.1):
        assert t_mixture_e_value(x, mu, g=g) == pytest.approx(_mixture_by_quadrature(x, mu, g),
                                                              rel=1e-4)
    # at the sequence's edge the e-value is exactly 1/alpha
    lo, hi = confidence_sequence(x, alpha=0.05, g=g)[1:]  # type: ignore[index]
    assert t_mixture_e_value(x, lo, g=g) == pytest.approx(20.0, rel=1e-9)
    assert t_mixture_e_value(x, hi, g=g) == pytest.approx(20.0, rel=1e-9)
    assert t_mixture_e_value(x, 0.5 * (lo + hi), g=g) < 20.0
    assert t_mixture_e_value([0.1], 0.0) == 1.0


def test_multipliers_and_their_price_against_student() -> None:
    """At 95 % (g = 2): unbounded at n = 3, 12.05 at 4, 4.82 at 6, 3.73 at 12, 3.52 at 20,
    against Student's 4.30, 3.18, 2.57, 2.20, 2.09; the ratio falls towards ~1.7."""
    expected = {3: math.inf, 4: 12.05, 6: 4.82, 12: 3.73, 20: 3.52}
    for n, value in expected.items():
        assert cs_multiplier(n, 0.05) == pytest.approx(value, abs=0.01)
    assert cs_multiplier(12, 0.05) / stats.t.ppf(0.975, 11) == pytest.approx(1.70, abs=0.01)
    # Bonferroni for three candidates: 6.82 at n = 6
    assert cs_multiplier(6, 0.05 / 3) == pytest.approx(6.82, abs=0.01)
    # the chosen scale is within 4 % of the best one at every horizon from 6 to 20 rounds
    # (measured: 2.1 % at 6, 0 at 8, 1.2 % at 12, 3.7 % at 20; 5.7 % at 30)
    for n in (6, 8, 12, 16, 20):
        best = cs_multiplier(n, 0.05, best_effect_scale(n, 0.05))
        assert cs_multiplier(n, 0.05, EFFECT_SCALE) <= 1.04 * best
    assert best_effect_scale(12, 0.05) == pytest.approx(1.3, abs=0.3)
    with pytest.raises(ConfigError, match="alpha"):
        cs_multiplier(5, 1.5)
    with pytest.raises(ConfigError, match="effect scale"):
        cs_multiplier(5, 0.05, -1.0)
    with pytest.raises(ConfigError, match="at least 2"):
        best_effect_scale(1, 0.05)


def test_coverage_holds_at_every_look_where_the_t_interval_fails() -> None:
    """4,000 streams of 40 normal log-ratios (sd 0.06), the interval looked at after every one
    from the 2nd: the confidence sequence missed the true mean at some look in 2.9 % of them
    (≤ 5 % promised); the 95 % t interval, looked at the same way, in 31.8 % (15.8 % over the
    first five looks alone). Asserted ≤ 4 % and ≥ 25 %."""
    rng = np.random.default_rng(27)
    streams, length, mu = 4000, 40, 0.02
    x = rng.normal(mu, 0.06, size=(streams, length))
    n = np.arange(1, length + 1)
    mean = np.cumsum(x, axis=1) / n
    sq = np.cumsum(x * x, axis=1)
    var = np.where(n > 1, (sq - n * mean * mean) / np.maximum(n - 1, 1), np.nan)
    se = np.sqrt(var / n)[:, 1:]
    err = np.abs(mean - mu)[:, 1:]
    cs = np.array([cs_multiplier(int(k), 0.05) for k in n[1:]])
    tq = stats.t.ppf(0.975, n[1:] - 1)
    cs_miss = np.mean(np.any(err > cs * se, axis=1))
    t_miss = np.mean(np.any(err > tq * se, axis=1))
    assert cs_miss <= 0.04, cs_miss
    assert t_miss >= 0.25, t_miss
    # each single look of the t interval is right 95 % of the time: it is the looking
    assert np.mean(err[:, 10] > tq[10] * se[:, 10]) == pytest.approx(0.05, abs=0.012)


def test_the_paired_ratio_interval_carries_the_sequence() -> None:
    ref = [100.0, 102.0, 98.0, 101.0, 99.0, 100.0]
    cand = [110.0, 111.0, 109.0, 112.0, 108.0, 110.5]
    fixed = paired_ratio_interval(cand, ref)
    anytime = paired_ratio_interval(cand, ref, method="anytime")
    assert fixed is not None and anytime is not None
    assert anytime.ratio == pytest.approx(fixed.ratio)
    assert anytime.low < fixed.low and anytime.high > fixed.high and anytime.above_one
    assert anytime.method == "anytime" and fixed.method == "t"
    assert "95 % anytime-valid CI 1.0" in anytime.text()
    early = paired_ratio_interval(cand[:3], ref[:3], method="anytime")
    assert early is not None and early.low == 0.0 and not early.excludes_one
    assert early.text().endswith("(95 % anytime-valid CI unbounded yet)")
    assert confidence_sequence([0.1]) is None
