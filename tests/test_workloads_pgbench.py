"""Integration test of pgbench as a workload with the driver's sample interface."""

from __future__ import annotations

import pytest

from harmony_base.errors import WorkloadError
from workloads.pgbench import PgbenchWorkload

pytestmark = pytest.mark.postgres


def test_pgbench_samples_time_and_fixed_work(fresh_dsn: str) -> None:
    with PgbenchWorkload(fresh_dsn, clients=2, scale=1) as workload:
        sample = workload.sample(1.0)
        fixed = workload.sample(queries=10)
    assert sample.completed > 0 and sample.errors == 0 and sample.qpm > 0
    stats = sample.per_query["pgbench"]
    assert stats.p50 is not None and stats.p99 is not None and stats.p50 <= stats.p99
    assert 0.5 < sample.seconds <= 1.2
    assert fixed.completed == 10  # 5 transactions per client


def test_pgbench_bad_arguments() -> None:
    with pytest.raises(WorkloadError, match="clients must be a whole number >= 1"):
        PgbenchWorkload("dbname=x", clients=0)
    with pytest.raises(WorkloadError, match="builtin must be one of"):
        PgbenchWorkload("dbname=x", builtin="tpcc")
