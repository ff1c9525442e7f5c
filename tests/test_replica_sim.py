"""The replica simulator on synthetic surfaces with the seeded noise model."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from benchmarks.simulators.replica_sim import simulate
from harmony_base.errors import ConfigError
from tuner_client.stats.noise import NoiseModel

#: replica bias only: no point noise, drift or outliers
BIAS_ONLY = NoiseModel(point_cv=0.0, drift_sd=0.0, outlier_rate=0.0, replica_cv=0.3)


def _same(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> bool:
    return len(a) == len(b) and bool(np.allclose(np.array(a), np.array(b), rtol=1e-9))


def test_the_same_seed_gives_the_same_run() -> None:
    a = simulate(3, seconds=3600, seed=4)
    b = simulate(3, seconds=3600, seed=4)
    assert a.curve == b.curve and a.final_true == b.final_true


def test_one_replica_measures_one_block_at_a_time() -> None:
    # a 20-s reference opens the run, then every evaluation is a 40-s block
    run = simulate(1, strategy="nelder-mead", seconds=4000, seed=0, model=NoiseModel.quiet())
    assert run.evaluations == 100
    assert [t for t, _ in run.curve[:3]] == [60.0, 100.0, 140.0]


def test_normalisation_removes_replica_bias() -> None:
    """With only a bias between replicas (30 % CV), the normalised search is the noiseless
    one step for step; told raw values, the biased replicas steer it elsewhere."""
    quiet = simulate(4, seconds=3600, seed=2, model=NoiseModel.quiet())
    normalised = simulate(4, seconds=3600, seed=2, model=BIAS_ONLY)
    assert _same(normalised.curve, quiet.curve)
    differs = 0
    for seed in range(4):
        q = simulate(4, seconds=3600, seed=seed, model=NoiseModel.quiet())
        raw = simulate(4, seconds=3600, seed=seed, model=BIAS_ONLY, normalise=False)
        differs += not _same(raw.curve, q.curve)
    assert differs >= 3


def test_more_replicas_reach_the_target_sooner() -> None:
    def minutes(n: int) -> float:
        runs = [simulate(n, seconds=3600, seed=s) for s in range(6)]
        return statistics.median(r.time_to_target or 3600.0 for r in runs) / 60.0

    one, eight = minutes(1), minutes(8)
    assert eight < 0.5 * one, (one, eight)


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ConfigError, match="replicas must be a positive integer"):
        simulate(0)
    with pytest.raises(ConfigError, match="seconds must be a positive number"):
        simulate(2, seconds=-1)
