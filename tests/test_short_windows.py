"""A fixed-work window too short to measure (20 pgbench transactions take milliseconds) is
taken as a time window of the workload's ``MIN_WINDOW_S`` instead, for the rest of the run
(:meth:`tuner_client.measurer.sampling.Sampler._window`)."""

from __future__ import annotations

import psycopg

from tuner_client.config import MeasureConfig
from tuner_client.knobs.apply import reset_knobs
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.measurer import Measurer, ServerAccess
from workloads.pgbench import PgbenchWorkload


def test_twenty_fast_transactions_become_two_second_windows(fresh_dsn: str) -> None:
    with psycopg.connect(fresh_dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    workload = PgbenchWorkload(fresh_dsn, clients=2, scale=1, builtin="select-only")
    m = Measurer(ServerAccess(fresh_dsn, catalog), workload,
                 MeasureConfig(warmup_s=0.0, samples=3, queries=20))
    m.in_force = m.current_settings(["work_mem"])
    try:
        record = m.measure("test", {}, {"work_mem": "8MB"})
    finally:
        m.close()
        with psycopg.connect(fresh_dsn, autocommit=True) as conn:
            reset_knobs(conn, ["work_mem"], catalog)
    assert record.failure is None and len(record.samples) == 3
    assert m.windows.short_work_s == PgbenchWorkload.MIN_WINDOW_S == 2.0
    for sample in record.samples:
        # pgbench's seconds exclude its connection set-up: a 2-s run reports a little less
        assert sample.seconds > 1.5 and sample.completed > 20 * 10, sample
