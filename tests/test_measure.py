"""Measuring one configuration on a real PostgreSQL with a real TPC-H workload (no mocks)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from tune_fixtures import TpchCluster, tpch_cluster  # noqa: F401  (fixture)

from tuner_client.budget import BudgetView, MemoryBudget
from tuner_client.config import MeasureConfig, parse_tuner_config, resolve_knob_space
from tuner_client.knobs.apply import reset_knobs
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.measurer import (
    Measurer,
    ServerAccess,
    StatsSnapshot,
    read_database_stats,
    stats_delta,
)
from tuner_client.servers.controllers import LocalController
from workloads.driver import WorkloadDriver
from workloads.sample import Sample

MEASURE = MeasureConfig(warmup_s=0.5, samples=3, aggregate="best", queries=15)


def _setting(dsn: str, name: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT current_setting(%s)", [name]).fetchone()
        assert row is not None
        return str(row[0])


@pytest.fixture
def measurer(tpch_cluster: TpchCluster) -> Iterator[Measurer]:  # noqa: F811
    with psycopg.connect(tpch_cluster.dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    m = Measurer(ServerAccess(tpch_cluster.dsn, catalog),
                 WorkloadDriver(tpch_cluster.dsn, "2Q6,1Q13"), MEASURE)
    m.in_force = m.current_settings(["work_mem", "shared_buffers", "maintenance_work_mem",
                                     "temp_buffers", "random_page_cost"])
    try:
        yield m
    finally:
        m.close()
        with psycopg.connect(tpch_cluster.dsn, autocommit=True) as conn:
            reset_knobs(conn, ["work_mem", "random_page_cost"], catalog)


def test_one_point_gives_three_samples_with_counters(measurer: Measurer,
                                                      tpch_cluster: TpchCluster) -> None:  # noqa: F811
    record = measurer.measure("test", {"work_mem": 8}, {"work_mem": "8MB",
                                                        "random_page_cost": "1.5"})
    assert record.failure is None
    assert len(record.samples) == 3
    assert all(s.qpm > 0 and s.completed == 15 and s.errors == 0 for s in record.samples)
    assert record.value == max(s.qpm for s in record.samples)  # best of three
    # every knob the measurer keeps track of, as in force while the samples ran
    assert record.in_force == {**measurer.in_force, "work_mem": "8MB", "random_page_cost": "1.5"}
    assert record.in_force["shared_buffers"] == "128MB"
    assert _setting(tpch_cluster.dsn, "work_mem") == "8MB"
    total = record.stats_total()
    assert total is not None and total.blks_hit + total.blks_read > 0
    assert total.miss_ratio is not None and 0.0 <= total.miss_ratio <= 1.0
    # applying the same settings again changes nothing on the server
    assert measurer.apply({"work_mem": "8MB"}).changed is False


def test_infeasible_point_is_never_applied(measurer: Measurer, tpch_cluster: TpchCluster  # noqa: F811
                                           ) -> None:
    cfg = parse_tuner_config("name: t\nonline: {knobs: {work_mem: {min: 1MB, max: 64MB}, "
                             "maintenance_work_mem: {min: 1MB, max: 64MB}, "
                             "temp_buffers: {min: 1MB, max: 64MB}}}\n")
    offline = resolve_knob_space(cfg.offline.knobs, measurer.catalog, kind="offline")
    online = resolve_knob_space(cfg.online.knobs, measurer.catalog, kind="online")
    # 3 connections x hash_mem_multiplier 2 -> work_mem*6 + mwm + tb <= 64MB
    budget = MemoryBudget(ram_bytes=8 * 2**30, connections=3, online_limit_bytes=64 * 2**20)
    view = BudgetView(budget, measurer.catalog, offline, online)
    measurer.applier.feasible = view.violation
    assert view.online_constraints(measurer.in_force) == [
        "work_mem * 6 + maintenance_work_mem + temp_buffers <= 64"]
    before = _setting(tpch_cluster.dsn, "work_mem")
    outcome = measurer.apply({"work_mem": "32MB"})  # 192MB + 64MB + 8MB > 64MB
    assert outcome.failure is not None and outcome.failure.startswith("infeasible")
    assert "exceeds the online budget 64MB" in outcome.failure
    assert measurer.applier.applied_log == []
    assert _setting(tpch_cluster.dsn, "work_mem") == before
    record = measurer.measure("test", {}, {"work_mem": "32MB"})
    assert record.failure is not None and record.samples == []
    assert _setting(tpch_cluster.dsn, "work_mem") == before
    # a feasible one goes through: 2MB*6 + 64MB... still above: shrink maintenance_work_mem too
    ok = measurer.apply({"work_mem": "2MB", "maintenance_work_mem": "16MB"})
    assert ok.failure is None and _setting(tpch_cluster.dsn, "work_mem") == "2MB"
    with psycopg.connect(tpch_cluster.dsn, autocommit=True) as conn:
        reset_knobs(conn, ["maintenance_work_mem"], measurer.catalog)


def test_stats_delta_guards_against_resets(tpch_cluster: TpchCluster) -> None:  # noqa: F811
    with psycopg.connect(tpch_cluster.dsn, autocommit=True) as conn:
        # a plain sequential scan in this backend: no parallel workers, no index-only scan
        for setting in ("max_parallel_workers_per_gather", "enable_indexscan",
                        "enable_indexonlyscan", "enable_bitmapscan"):
            conn.execute(sql.SQL("SET {} = 0").format(sql.Identifier(setting)))
        row = conn.execute("SELECT pg_relation_size('lineitem') "
                           "/ current_setting('block_size')::int").fetchone()
        assert row is not None
        pages = int(row[0])
        a = read_database_stats(conn)
        conn.execute("SELECT sum(l_quantity) FROM lineitem").fetchone()
        # a backend flushes its counters at most once a second unless told to
        conn.execute("SELECT pg_stat_force_next_flush()")
        b = read_database_stats(conn)
    delta = stats_delta(a, b)
    # a sequential scan touches every block of lineitem once, from shared buffers or not
    assert pages > 100 and delta is not None
    assert delta.blks_hit + delta.blks_read >= pages, (delta, pages)
    assert delta.xact_commit >= 1
    reset = StatsSnapshot(0, 0, 0, 0, b.stats_reset, b.taken)
    assert stats_delta(b, reset) is None  # counters went down: a reset, no delta
    moved = StatsSnapshot(b.xact_commit + 5, b.blks_hit, b.blks_read, b.temp_bytes, None, b.taken)
    assert stats_delta(b, moved) is None or b.stats_reset is None


def test_apply_survives_a_dropped_admin_connection(measurer: Measurer,
                                                   tpch_cluster: TpchCluster) -> None:  # noqa: F811
    """After a crash and restart the measurer's connection is dead; the next apply reconnects
    (it used to fail with 'the connection is lost' and score the point as failed)."""
    assert measurer.apply({"work_mem": "6MB"}).failure is None
    old_pid = measurer.conn().info.backend_pid
    with psycopg.connect(tpch_cluster.dsn, autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [old_pid]).fetchone() == (True,)
    outcome = measurer.apply({"work_mem": "7MB"})
    assert outcome.failure is None, outcome.failure
    assert measurer.conn().info.backend_pid != old_pid
    assert _setting(tpch_cluster.dsn, "work_mem") == "7MB"


@pytest.mark.parametrize("estimator", ["concurrency", "progress"])
def test_latency_based_estimators_agree_with_the_count(tpch_cluster: TpchCluster,  # noqa: F811
                                                       estimator: str) -> None:
    """Little's-law samples (streams / mean latency per query, only queries started under the
    measured configuration) and progress samples (queries credited by their run time inside
    the window): on a steady workload both agree with the completion count."""
    with psycopg.connect(tpch_cluster.dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    config = MeasureConfig(warmup_s=0.5, samples=3, aggregate="median", queries=30,
                           estimator=estimator)
    m = Measurer(ServerAccess(tpch_cluster.dsn, catalog),
                 WorkloadDriver(tpch_cluster.dsn, "2Q6,1Q13"), config)
    m.in_force = m.current_settings(["work_mem"])
    try:
        record = m.measure("test", {}, {"work_mem": "8MB"})
    finally:
        m.close()
        with psycopg.connect(tpch_cluster.dsn, autocommit=True) as conn:
            reset_knobs(conn, ["work_mem"], catalog)
    assert record.failure is None and len(record.samples) == 3
    for s in record.samples:
        value = s.concurrency_qpm if estimator == "concurrency" else s.progress_qpm
        assert value is not None and s.count_qpm is not None and s.count_qpm > 0
        assert s.qpm == value and s.estimator == estimator and s.completed >= 30
        assert 0.5 < value / s.count_qpm < 2.0, (value, s.count_qpm)


def test_a_restart_gets_its_own_warm_up(tpch_cluster: TpchCluster,  # noqa: F811
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """``measure.restart_warmup_s`` after an offline knob's restart (shared_buffers empties),
    ``warmup_s`` after an online change; both as long as configured."""
    with psycopg.connect(tpch_cluster.dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    config = MeasureConfig(warmup_s=0.2, restart_warmup_s=1.5, samples=1, queries=5,
                           prewarm=False)  # a cold restart (tests/test_prewarm.py: warm)
    driver = WorkloadDriver(tpch_cluster.dsn, "2Q6")
    asked: list[float | None] = []  # the time windows the measurer waited on the workload
    real_sample = driver.sample

    def recorded(seconds: float | None = None, **kwargs: Any) -> Sample:
        asked.append(seconds)
        return real_sample(seconds, **kwargs)

    monkeypatch.setattr(driver, "sample", recorded)
    m = Measurer(ServerAccess(tpch_cluster.dsn, catalog,
                              LocalController(tpch_cluster.cluster, precheck_memory=False)),
                 driver, config)
    m.in_force = m.current_settings(["shared_buffers", "work_mem"])
    original = dict(m.in_force)
    try:
        m.start()
        asked.clear()
        started = time.monotonic()
        outcome = m.apply({"shared_buffers": "64MB"})
        restarted = time.monotonic() - started
        assert outcome.failure is None and outcome.restart_s is not None
        assert m.windows.last_warmup_s == 1.5 and restarted >= 1.5 + outcome.restart_s
        assert asked == [1.5]
        asked.clear()
        outcome = m.apply({"work_mem": "8MB"})
        assert outcome.failure is None and outcome.restart_s is None
        # the only wait on the workload was the short warm-up (not the restart's 1.5 s);
        # said by what was asked of it, not by a wall-clock bound a loaded machine can break
        assert m.windows.last_warmup_s == 0.2 and asked == [0.2]
    finally:
        m.apply(original, check_budget=False, warm_up=False)
        m.close()
        with psycopg.connect(tpch_cluster.dsn, autocommit=True) as conn:
            reset_knobs(conn, ["work_mem"], catalog)
    assert _setting(tpch_cluster.dsn, "shared_buffers") == original["shared_buffers"]
    # the key is read from the config, null by default (then the warm-up is warmup_s)
    assert parse_tuner_config("name: x\nmeasure: {restart_warmup_s: 30}\n"
                              ).measure.restart_warmup_s == 30.0
    assert parse_tuner_config("name: x\n").measure.restart_warmup_s is None
