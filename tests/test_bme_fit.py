"""The BME fit recovers known parameters (noiseless and noisy; P* known and unknown)."""

from __future__ import annotations

import numpy as np
import pytest

from bme import BMEParams, fit_bme, fit_bme_counts, miss_probability, miss_slope
from harmony_base.errors import ConfigError

TRUE = BMEParams(p_star=0.02, p_c=0.01, m_b=100.0, m_star=5000.0)
PAST_KNEE = np.geomspace(100, 8000, 20)   # 3 points beyond M*: the data plateau
BEFORE_KNEE = np.geomspace(100, 4000, 20)  # no plateau: M* must be extrapolated


def _rel(a: float, b: float) -> float:
    return abs(a / b - 1.0)


def test_equation_shape() -> None:
    assert miss_probability(TRUE, TRUE.m_star) == pytest.approx(TRUE.p_star, abs=1e-15)
    assert miss_probability(TRUE, 2 * TRUE.m_star) == TRUE.p_star
    sizes = np.geomspace(1, 4999, 200)
    p = miss_probability(TRUE, sizes)
    assert np.all(np.diff(p) < 0)
    slope = miss_slope(TRUE, sizes)
    numeric = np.gradient(p, sizes)
    assert np.all(slope < 0)
    assert np.allclose(slope[5:-5], numeric[5:-5], rtol=0.05)
    assert miss_slope(TRUE, 6000.0) == 0.0
    assert miss_probability(BMEParams(0.1, 0.1, -10.0, 100.0), 5.0) == np.inf


@pytest.mark.parametrize(("sizes", "p_star"), [(PAST_KNEE, None), (PAST_KNEE, 0.02),
                                               (BEFORE_KNEE, 0.02), (BEFORE_KNEE, None)])
def test_noiseless_fit_recovers_all_parameters(sizes: np.ndarray, p_star: float | None) -> None:
    fit = fit_bme(sizes, miss_probability(TRUE, sizes), p_star=p_star)
    got = fit.params
    assert fit.r2 > 1 - 1e-9
    assert _rel(got.m_star, TRUE.m_star) < 1e-3
    assert _rel(got.p_star, TRUE.p_star) < 1e-3
    assert _rel(got.m_b, TRUE.m_b) < 1e-2
    assert _rel(got.p_c, TRUE.p_c) < 1e-2
    assert fit.p_star_given is (p_star is not None)
    assert fit.plateau is (sizes is PAST_KNEE)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noisy_fit_with_plateau_p_star_unknown(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = miss_probability(TRUE, PAST_KNEE) * (1 + 0.02 * rng.standard_normal(PAST_KNEE.size))
    fit = fit_bme(PAST_KNEE, p)
    # 2 % multiplicative noise: M* within 3 %, P* within 4 % (20 seeds: worst 2.1 %, 3.0 %)
    assert _rel(fit.params.m_star, TRUE.m_star) < 0.03
    assert _rel(fit.params.p_star, TRUE.p_star) < 0.04
    assert fit.r2 > 0.99


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noisy_forward_extrapolation_with_p_star_given(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = miss_probability(TRUE, BEFORE_KNEE) * (1 + 0.02 * rng.standard_normal(BEFORE_KNEE.size))
    fit = fit_bme(BEFORE_KNEE, p, p_star=TRUE.p_star)
    # M* lies 25 % beyond the data; 20 seeds: worst error 3.5 %
    assert _rel(fit.params.m_star, TRUE.m_star) < 0.05
    assert fit.params.p_star == TRUE.p_star
    assert fit.r2 > 0.99


def test_noisy_one_percent_is_tighter() -> None:
    rng = np.random.default_rng(7)
    p = miss_probability(TRUE, PAST_KNEE) * (1 + 0.01 * rng.standard_normal(PAST_KNEE.size))
    fit = fit_bme(PAST_KNEE, p, p_star=TRUE.p_star)
    assert _rel(fit.params.m_star, TRUE.m_star) < 0.015


def test_backward_prediction_from_middle_range() -> None:
    middle = np.geomspace(1000, 4000, 8)
    fit = fit_bme(middle, miss_probability(TRUE, middle), p_star=TRUE.p_star)
    small = np.array([150.0, 300.0, 600.0])
    assert np.allclose(fit.predict(small), miss_probability(TRUE, small), rtol=0.01)


def test_three_points_are_enough() -> None:
    sizes = np.array([500.0, 1500.0, 3500.0])
    fit = fit_bme(sizes, miss_probability(TRUE, sizes), p_star=TRUE.p_star)
    assert fit.n_points == 3
    assert fit.r2 > 0.999
    assert np.allclose(fit.predict(sizes), miss_probability(TRUE, sizes), rtol=1e-3)


def test_count_form_recovers_the_shape() -> None:
    refs = 2_000_000
    counts = refs * miss_probability(TRUE, PAST_KNEE)
    fit = fit_bme_counts(PAST_KNEE, counts)
    assert fit.counts
    assert _rel(fit.params.m_star, TRUE.m_star) < 1e-3
    assert _rel(fit.params.m_b, TRUE.m_b) < 1e-2
    assert _rel(fit.params.p_star, refs * TRUE.p_star) < 1e-3   # n* = cold misses
    assert _rel(fit.params.p_c, refs * TRUE.p_c) < 1e-2
    fixed = fit_bme_counts(BEFORE_KNEE, refs * miss_probability(TRUE, BEFORE_KNEE),
                           n_star=refs * TRUE.p_star)
    assert _rel(fixed.params.m_star, TRUE.m_star) < 1e-3


def test_flat_data_fits_on_the_floor() -> None:
    fit = fit_bme([10, 20, 30, 40], [0.1, 0.1, 0.1, 0.1])
    assert fit.params.p_star == pytest.approx(0.1, abs=1e-9)
    assert fit.params.m_star <= 10 * (1 + 1e-6)
    assert fit.r2 == 1.0


def test_params_round_trip_and_validation() -> None:
    assert BMEParams.from_dict(TRUE.to_dict()) == TRUE
    assert set(TRUE.to_dict()) == {"p_star", "p_c", "m_b", "m_star"}
    with pytest.raises(ConfigError, match="missing"):
        BMEParams.from_dict({"p_star": 0.1, "p_c": 0.1, "m_b": 1})
    with pytest.raises(ConfigError, match="unknown"):
        BMEParams.from_dict({**TRUE.to_dict(), "extra": 1})
    with pytest.raises(ConfigError, match="p_c > -p_star"):
        BMEParams(0.1, -0.2, 1.0, 10.0)
    with pytest.raises(ConfigError, match="m_star > -m_b"):
        BMEParams(0.1, 0.1, -20.0, 10.0)
    with pytest.raises(ConfigError, match="finite"):
        BMEParams(float("nan"), 0.1, 1.0, 10.0)


@pytest.mark.parametrize(("sizes", "misses", "message"), [
    ([1, 2], [0.5, 0.4], "at least 3"),
    ([1, 1, 2, 2], [0.5, 0.5, 0.4, 0.4], "at least 3"),
    ([1, -2, 3], [0.5, 0.4, 0.3], "point 1: size must be >= 0"),
    ([1, 2, 3], [0.5, 1.2, 0.3], "point 1: miss probability must be in \\[0, 1\\]"),
    ([1, 2, 3], [0.5, -0.1, 0.3], "point 1"),
    ([1, 2, 3], [0.5, 0.4], "pair up"),
    ([1, 2, 3, float("nan")], [0.5, 0.4, float("nan"), 0.2], "at least 3"),
])
def test_bad_input_is_refused(sizes: list[float], misses: list[float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        fit_bme(sizes, misses)


def test_bad_p_star_and_weighting() -> None:
    with pytest.raises(ConfigError, match="p_star"):
        fit_bme([1, 2, 3], [0.5, 0.4, 0.3], p_star=1.5)
    with pytest.raises(ConfigError, match="weighting"):
        fit_bme([1, 2, 3], [0.5, 0.4, 0.3], weighting="log")
