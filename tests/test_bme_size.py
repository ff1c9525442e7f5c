"""The closed-form size puts the curve on the target miss probability."""

from __future__ import annotations

import numpy as np
import pytest

from bme import BMEParams, miss_probability, recommended_size, size_for_target
from harmony_base.errors import ConfigError

CURVES = [BMEParams(0.02, 0.01, 100.0, 5000.0), BMEParams(0.05, -0.03, 10.0, 800.0),
          BMEParams(0.001, 0.2, -50.0, 1e6), BMEParams(0.3, 0.0, 0.0, 64.0)]


@pytest.mark.parametrize("params", CURVES)
def test_size_hits_the_target(params: BMEParams) -> None:
    top = float(miss_probability(params, max(1.0, 1.0 - params.m_b)))
    for mu in np.linspace(params.p_star, min(top, 1.0), 25)[1:-1]:
        size = size_for_target(params, float(mu))
        assert 0 < size <= params.m_star
        assert abs(float(miss_probability(params, size)) - mu) < 1e-9


def test_target_at_floor_gives_m_star() -> None:
    p = CURVES[0]
    assert size_for_target(p, p.p_star) == pytest.approx(p.m_star, rel=1e-12)
    assert recommended_size(p) == p.m_star


def test_target_met_at_zero_gives_zero() -> None:
    p = BMEParams(0.02, 0.01, 1000.0, 5000.0)       # Mb > 0: P(0) is finite (about 0.196)
    assert float(miss_probability(p, 0.0)) == pytest.approx(0.196, abs=1e-3)
    assert size_for_target(p, 0.5) == 0.0
    assert size_for_target(p, float(miss_probability(p, 0.0)) + 1e-9) == 0.0
    assert size_for_target(p, float(miss_probability(p, 1.0))) == pytest.approx(1.0)


def test_target_below_floor_is_refused() -> None:
    with pytest.raises(ConfigError, match="below the cold-miss floor"):
        size_for_target(CURVES[0], 0.01)
    with pytest.raises(ConfigError, match="finite"):
        size_for_target(CURVES[0], float("nan"))
