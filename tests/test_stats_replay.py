"""The replay of measured tables: log-size interpolation, and the noise shapes it uses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.simulators.replay import MeasuredTable, point_noise_only, replay_objective
from harmony_base.errors import ConfigError

MB = 1 << 20


def test_table_interpolates_in_log_setting_and_holds_the_ends() -> None:
    table = MeasuredTable([64 * MB, 16 * MB], {"qpm": [200.0, 100.0], "miss": [0.1, 0.3]})
    assert table.settings == [16 * MB, 64 * MB]
    assert table.value("qpm", 32 * MB) == pytest.approx(150.0)  # halfway in log size
    assert table.at(8 * MB) == {"qpm": 100.0, "miss": 0.3}
    assert table.value("miss", 1024 * MB) == 0.1
    truth = table.truth("shared_buffers", "qpm", unit=MB)
    assert truth({"shared_buffers": 32}) == pytest.approx(150.0)
    with pytest.raises(ConfigError, match="no column"):
        table.value("tps", 1.0)
    with pytest.raises(ConfigError, match="one row per setting"):
        MeasuredTable([1.0, 1.0], {"qpm": [1.0, 2.0]})
    with pytest.raises(ConfigError, match="positive"):
        MeasuredTable([0.0], {"qpm": [1.0]})


def test_replay_noise_shapes() -> None:
    """``normal`` reproduces the BME replay's value × (1 + cv·z) draw for draw; ``lognormal``
    is value × e^{cv·z}; both have the stated CV (2000 draws, within 5 %)."""
    table = MeasuredTable([1.0, 2.0], {"qpm": [100.0, 100.0]})
    normal = replay_objective(table, "x", "qpm", seed=4,
                              model=point_noise_only(0.03, shape="normal"))
    rng = np.random.default_rng(4)
    for _ in range(5):
        expected = 100.0 * (1.0 + 0.03 * float(rng.standard_normal()))
        assert normal.measure({"x": 1.5}, normal.model.point_seconds) == expected
    lognormal = replay_objective(table, "x", "qpm", seed=4, model=point_noise_only(0.03))
    values = [lognormal.measure({"x": 1.5}) for _ in range(2000)]
    assert float(np.std(np.log(values))) == pytest.approx(0.03, rel=0.05)
    assert lognormal.now == 2000 * lognormal.model.point_seconds
    assert math.isclose(point_noise_only(0.0).point_cv, 0.0)
    with pytest.raises(ConfigError, match="shape"):
        point_noise_only(0.03, shape="uniform")
