"""A fixed-work window too short to measure (20 pgbench transactions take milliseconds) is
taken as a time window of the workload's ``MIN_WINDOW_S`` instead, for the rest of the run
(:meth:`tuner_client.measurer.sampling.Sampler._window`)."""

from __future__ import annotations

import psycopg

from tuner_client.config import MeasureConfig, parse_tuner_config
from tuner_client.knobs.apply import reset_knobs
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.measurer import Measurer, ServerAccess
from tuner_client.plan.window import TimedWindow, window_seconds
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


def test_the_plan_says_a_short_window_is_measured_as_the_workloads_least() -> None:
    config = parse_tuner_config("name: x\n")
    timed = TimedWindow(queries=20, seconds=0.04, workload="the scripts workload",
                        restart_s=0.3, least_s=PgbenchWorkload.MIN_WINDOW_S)
    seconds, basis = window_seconds(config, None, timed)
    assert seconds == 2.0
    assert "20 queries of the scripts workload took 0.04 s" in basis and "windows of 2 s" \
        in basis
    # a window long enough keeps its timed length
    long = TimedWindow(queries=20, seconds=3.5, workload="w", restart_s=0.3, least_s=2.0)
    assert window_seconds(config, None, long)[0] == 3.5
