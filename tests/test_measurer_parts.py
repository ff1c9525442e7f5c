"""The measurer's pure parts on their own: a sample's value under each estimator, the server's
cores from two CPU readings, and comparing settings in each knob's own units."""

from __future__ import annotations

import pytest

from harmony_base.errors import ConfigError, WorkloadError
from tuner_client.knobs.catalog import Knob, KnobCatalog
from tuner_client.knobs.in_force import InForce
from tuner_client.measurer.estimators import ESTIMATORS, check_estimator, sample_value
from tuner_client.measurer.server_cpu import CpuReading
from tuner_client.measurer.server_process import cores_used
from workloads.sample import QueryStats, Sample


def _sample(concurrency_qpm: float | None = None, progress_qpm: float | None = None) -> Sample:
    per_query = {"Q6": QueryStats(completed=30, errors=0, qpm=60.0, p50=0.9, p95=1.5,
                                  p99=1.8, mean=1.0)}
    return Sample(seconds=30.0, completed=30, errors=0, qpm=60.0, per_query=per_query,
                  concurrency_qpm=concurrency_qpm, progress_qpm=progress_qpm)


def _value(estimator: str, got: Sample, *, work: float | None = None,
           server_cpu: float | None = None) -> float:
    per_cpu = work / server_cpu if work is not None and server_cpu else None
    return sample_value(estimator, got, work=work, per_cpu=per_cpu, server_cpu=server_cpu,
                        live_speed=lambda: 0.8)


def test_each_estimator_gives_its_own_value() -> None:
    got = _sample(concurrency_qpm=66.0, progress_qpm=61.5)
    assert _value("count", got) == 60.0
    assert _value("concurrency", got) == 66.0
    assert _value("progress", got) == 61.5
    assert _value("work", got, work=1.25) == 1.25
    assert _value("work_per_cpu", got, work=1.25, server_cpu=2.5) == 0.5
    assert _value("count_per_cpu", got, server_cpu=2.5) == 24.0
    assert _value("latency", got) == 0.8


def test_concurrency_falls_back_to_the_count_without_every_query() -> None:
    assert _value("concurrency", _sample()) == 60.0


@pytest.mark.parametrize(("estimator", "says"), [
    ("work", "no reference cost"),
    ("work_per_cpu", "no reference cost"),
    ("progress", "does not report when queries start"),
    ("count_per_cpu", "CPU time is not readable"),
])
def test_an_estimator_the_sample_cannot_give_names_itself(estimator: str, says: str) -> None:
    with pytest.raises(WorkloadError, match=f"measure.estimator {estimator}: .*{says}"):
        _value(estimator, _sample())


def test_work_per_cpu_without_cpu_time_says_so() -> None:
    with pytest.raises(WorkloadError, match="CPU time is not readable"):
        _value("work_per_cpu", _sample(), work=1.25)


def test_unknown_estimator_is_a_config_error_listing_the_known_ones() -> None:
    for name in ESTIMATORS:
        check_estimator(name)
    with pytest.raises(ConfigError, match="must be one of .*'count'.*got 'qps'"):
        check_estimator("qps")


def test_cores_used_between_two_readings() -> None:
    before, after = CpuReading(10.0, "proc", 42), CpuReading(16.0, "proc", 42)
    assert cores_used(before, after, 3.0) == (2.0, "proc")
    # a restarted server (another postmaster), another source or a missing reading: unknown
    assert cores_used(before, CpuReading(16.0, "proc", 43), 3.0) == (None, None)
    assert cores_used(before, CpuReading(16.0, "cgroup", 42), 3.0) == (None, None)
    assert cores_used(None, after, 3.0) == (None, None)
    assert cores_used(before, after, 0.0) == (None, None)


def _knob(name: str, unit: str | None, context: str, vartype: str = "integer") -> Knob:
    return Knob(name=name, vartype=vartype, unit=unit, min_val="0", max_val="2147483647",
                enumvals=None, context=context, boot_val=None, reset_val=None, setting=None)


def test_in_force_compares_values_in_the_knobs_units() -> None:
    catalog = KnobCatalog({"work_mem": _knob("work_mem", "kB", "user"),
                           "shared_buffers": _knob("shared_buffers", "8kB", "postmaster"),
                           "random_page_cost": _knob("random_page_cost", None, "user",
                                                     vartype="real")})
    in_force = InForce(catalog)
    in_force.values = {"work_mem": "8MB", "shared_buffers": "128MB", "random_page_cost": "4"}
    assert in_force.same("work_mem", "8MB", "8192kB")
    assert in_force.same("random_page_cost", "4.0", "4")
    assert not in_force.same("work_mem", "8MB", None)
    wanted = {"work_mem": "8192kB", "shared_buffers": "256MB", "random_page_cost": "1.1"}
    assert in_force.differs(wanted) == {"shared_buffers": "256MB", "random_page_cost": "1.1"}
    assert in_force.offline(wanted) == {"shared_buffers": "256MB"}
    assert in_force.holds({"work_mem": "8192kB", "shared_buffers": "131072kB"})
