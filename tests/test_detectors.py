"""The multi-pass flow's detectors on scripted measurement sequences (pure, no database)."""

from __future__ import annotations

import logging

import pytest

from harmony_base.errors import ConfigError
from tuner_client.measurer import PointRecord, SampleRecord
from tuner_client.phases.detectors import LocalMinimumDetector, WorkloadShiftDetector
from tuner_client.phases.online import sample_spread


def decisions(detector: WorkloadShiftDetector, values: list[float]) -> list[int]:
    """Indices of the measurements at which the detector called a shift."""
    return [i for i, v in enumerate(values) if detector.observe(v)]


def test_shift_band_is_worst_to_best_of_converged_simplex() -> None:
    d = WorkloadShiftDetector(outside=3)
    assert d.arm([100.0, 104.0, 98.0, 101.0]) == (98.0, 104.0)


def test_shift_detected_after_three_consecutive_outliers() -> None:
    d = WorkloadShiftDetector(outside=3)
    d.arm([100.0, 104.0, 98.0])
    # in, in, out, out, in (reset), out, out, out -> shift at index 7 only
    seq = [99.0, 103.0, 80.0, 75.0, 100.0, 70.0, 72.0, 71.0]
    assert decisions(d, seq) == [7]
    assert not d.armed  # disarmed after a detection: later values decide nothing
    assert decisions(d, [10.0, 10.0, 10.0, 10.0]) == []


def test_shift_counts_outliers_on_both_sides() -> None:
    d = WorkloadShiftDetector(outside=3)
    d.arm([100.0, 110.0])
    assert decisions(d, [150.0, 50.0, 200.0]) == [2]


def test_shift_never_fires_inside_band_or_unarmed() -> None:
    d = WorkloadShiftDetector(outside=3)
    assert decisions(d, [1.0, 2.0, 3.0, 4.0]) == []  # not armed yet
    d.arm([100.0, 104.0])
    assert decisions(d, [100.0, 104.0, 102.0] * 10) == []


def test_shift_margin_widens_band_and_other_counts() -> None:
    d = WorkloadShiftDetector(outside=2, margin=0.05)
    low, high = d.arm([100.0, 100.0])
    assert (low, high) == pytest.approx((95.0, 105.0))
    assert decisions(d, [96.0, 104.0, 94.0, 106.0]) == [3]


def test_shift_logs_its_evidence(caplog: pytest.LogCaptureFixture) -> None:
    d = WorkloadShiftDetector(outside=3)
    d.arm([100.0, 104.0])
    with caplog.at_level(logging.INFO, logger="tuner_client.phases.detectors"):
        decisions(d, [50.0, 51.0, 52.0])
    assert "workload shift detected" in caplog.text
    assert "[50.0, 51.0, 52.0]" in caplog.text and "[100, 104]" in caplog.text


def test_local_minimum_all_vertices_worse_by_threshold() -> None:
    d = LocalMinimumDetector(threshold=0.1)  # maximise throughput; limit = 0.9 * offline best
    assert d.limit(1000.0) == pytest.approx(900.0)
    assert d.check([850.0, 880.0, 899.0, 700.0, 600.0, 890.0], offline_best=1000.0)
    # one vertex within 10 % of the offline best: no restart
    assert not d.check([850.0, 880.0, 901.0, 700.0, 600.0, 890.0], offline_best=1000.0)
    # failed vertices count as worse
    assert d.check([float("nan"), 800.0], offline_best=1000.0)
    assert not d.check([], offline_best=1000.0)


def test_local_minimum_scripted_online_run() -> None:
    # an online session's sliding window of 6 vertices, checked after each evaluation
    d = LocalMinimumDetector(threshold=0.2)
    offline_best = 500.0  # limit 400
    online = [450, 380, 390, 370, 395, 360, 350, 300, 310]
    fired = [i for i in range(5, len(online)) if d.check(online[i - 5:i + 1], offline_best)]
    assert fired == [6, 7, 8]  # first window of six all below 400 ends at index 6


def test_local_minimum_minimising_objective() -> None:
    d = LocalMinimumDetector(threshold=0.5, maximize=False)  # e.g. latency: worse = higher
    assert d.limit(10.0) == pytest.approx(15.0)
    assert d.check([16.0, 20.0], offline_best=10.0)
    assert not d.check([16.0, 14.0], offline_best=10.0)


@pytest.mark.parametrize("kwargs", [{"outside": 0}, {"outside": 1.5}, {"margin": -0.1},
                                    {"margin": 1.0}])
def test_shift_bad_options(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="flow.shift"):
        WorkloadShiftDetector(**kwargs)  # type: ignore[arg-type]


def test_local_minimum_bad_threshold_and_band() -> None:
    with pytest.raises(ConfigError, match="threshold"):
        LocalMinimumDetector(threshold=-1)
    with pytest.raises(ConfigError, match="finite"):
        WorkloadShiftDetector().arm([1.0, float("inf")])


def test_measured_noise_widens_the_band_past_the_margin() -> None:
    """The quick shift run's false alarms: 1191 and 1063 qpm under the *old* workload fell
    below a band of [1208, 1377] widened by 5 %; with the samples' own spread (15 %) they are
    noise, and only the real drop (253 qpm) counts."""
    d = WorkloadShiftDetector(outside=3, margin=0.05)
    low, high = d.arm([1208.0, 1377.0], noise=0.15)
    assert (low, high) == pytest.approx((1208.0 - 0.15 * 1292.5, 1377.0 + 0.15 * 1292.5))
    assert decisions(d, [1191.0, 1063.0, 1250.0, 1191.0]) == []
    assert decisions(d, [253.0, 240.0, 260.0]) == [2]
    quiet = WorkloadShiftDetector(outside=1, margin=0.05)
    assert quiet.arm([100.0, 100.0], noise=0.01) == pytest.approx((95.0, 105.0))  # margin wins
    with pytest.raises(ConfigError, match="noise must be a finite fraction >= 0, got -0.1"):
        quiet.arm([100.0], noise=-0.1)


def test_sample_spread_is_the_median_relative_spread_of_the_points() -> None:
    def point(*qpm: float) -> PointRecord:
        return PointRecord(session="s", point={}, settings={},
                           samples=[SampleRecord(qpm=q, completed=1, errors=0, seconds=1.0,
                                                 stats=None) for q in qpm])

    # spreads 0.2, 0.5, 0.1 (and a single-sample point ignored): median 0.2
    records = [point(90, 100, 110), point(80, 100, 130), point(95, 100, 105), point(100)]
    assert sample_spread(records) == pytest.approx(0.2)
    assert sample_spread([point(100), point(0, 50)]) == 0.0
