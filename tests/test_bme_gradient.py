"""Gradient control (measured, fitted) against the direct closed form on one sequence."""

from __future__ import annotations

import numpy as np
import pytest

from bme import BMEParams, compare_control, miss_probability, size_for_target
from harmony_base.errors import ConfigError

TRUE = BMEParams(0.02, 0.01, 100.0, 5000.0)
MU = 0.05


def test_noiseless_all_reach_target_direct_in_one_step() -> None:
    def measure(m: float) -> float:
        return float(miss_probability(TRUE, m))

    traces = compare_control(measure, MU, 500.0, steps=15, bounds=(10.0, 10000.0), params=TRUE)
    tol = 1e-3 * MU
    assert traces["direct"].steps_to_target(MU, tol) == 1
    assert traces["direct"].sizes[1] == pytest.approx(size_for_target(TRUE, MU))
    fitted = traces["fitted"].steps_to_target(MU, tol)
    measured = traces["measured"].steps_to_target(MU, tol)
    assert fitted is not None and measured is not None
    assert 1 < fitted <= 8 and 1 < measured <= 12     # Newton-like steps (7 and 9 here)
    assert abs(traces["fitted"].misses[-1] - MU) < 1e-9


def test_noise_makes_measured_gradient_erratic() -> None:
    rng = np.random.default_rng(0)

    def measure(m: float) -> float:
        return float(miss_probability(TRUE, m)) * (1 + 0.02 * rng.standard_normal())

    traces = compare_control(measure, MU, 500.0, steps=30, bounds=(10.0, 10000.0), params=TRUE)
    goal = size_for_target(TRUE, MU)
    spread = {k: float(np.std(np.array(t.sizes[15:]) - goal)) for k, t in traces.items()}
    assert spread["direct"] == 0.0
    assert spread["fitted"] < 200 and spread["measured"] < 400
    assert traces["measured"].method == "measured"


def test_bad_input() -> None:
    def measure(m: float) -> float:
        return 0.1

    with pytest.raises(ConfigError, match="inside"):
        compare_control(measure, MU, 50000.0, steps=3, bounds=(10.0, 100.0), params=TRUE)
    with pytest.raises(ConfigError, match="steps"):
        compare_control(measure, MU, 50.0, steps=0, bounds=(10.0, 100.0), params=TRUE)
