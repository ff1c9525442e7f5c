"""Integration tests of the TPC-H workload against a real PostgreSQL (SF 0.01)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from harmony.cli import tpch_parser as cli
from harmony_base.errors import ConfigError, DatabaseError, WorkloadError
from tuner_client.servers.local_cluster import LocalCluster
from workloads.driver import STOP_TIMEOUT_S, WorkloadDriver
from workloads.schedule import ScheduledDriver, wait_for_phase
from workloads.tpch.load import LoadResult, load_tpch
from workloads.tpch.params import NATIONS, REGIONS
from workloads.tpch.queries import QUERY_NAMES, make_query, validation_query
from workloads.tpch.schema import ROW_COUNTS, TABLES

pytestmark = pytest.mark.postgres

TEST_SCALE = 0.01
_DB_NAME = "harmony_tpch_sf001"


@pytest.fixture(scope="session")
def tpch_loaded(pg_cluster: LocalCluster) -> Iterator[tuple[str, LoadResult]]:
    """(DSN, LoadResult) of a TPC-H SF 0.01 database loaded once per test session."""
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(_DB_NAME))
        )
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(_DB_NAME)))
    dsn = pg_cluster.dsn_for(_DB_NAME)
    try:
        yield dsn, load_tpch(dsn, TEST_SCALE)
    finally:
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(pg_cluster.dsn, autocommit=True) as conn,
        ):
            conn.execute(
                sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(_DB_NAME))
            )


@pytest.fixture
def tpch_dsn(tpch_loaded: tuple[str, LoadResult]) -> str:
    """DSN of the session's TPC-H SF 0.01 database."""
    return tpch_loaded[0]


UNREACHABLE = "host=127.0.0.1 port=1 user=postgres dbname=postgres connect_timeout=2"

#: Queries whose random instances can be empty at SF 0.01 (Q18 needs sum(quantity) > 312 on
#: one order, Q11 and Q20 depend on the nation); their validation instances return rows.
MAY_BE_EMPTY = {"Q11", "Q18", "Q20"}


def test_load_gives_the_spec_row_counts(tpch_loaded: tuple[str, LoadResult]) -> None:
    dsn, result = tpch_loaded
    assert not result.reused
    assert result.rows == {
        "region": 5, "nation": 25, "supplier": 100, "customer": 1500, "part": 2000,
        "partsupp": 8000, "orders": 15000, "lineitem": result.rows["lineitem"],
    }  # fmt: skip
    assert abs(result.rows["lineitem"] - 60_000) <= 0.01 * 60_000  # 60,175 from dbgen's rules
    assert result.database_bytes > 10 * 2**20
    with psycopg.connect(dsn) as conn:
        for table in TABLES:
            (count,) = conn.execute(f"select count(*) from {table}").fetchone()  # type: ignore[misc]
            assert count == result.rows[table]
            assert ROW_COUNTS[table].accepts(count, TEST_SCALE)
        (pk,) = conn.execute(  # type: ignore[misc]
            "select count(*) from pg_constraint where contype = 'p' and conrelid::regclass::text"
            " = any(%s)", (list(TABLES),),
        ).fetchone()
        assert pk == 8
        nations = conn.execute(
            "select n_nationkey, trim(n_name), n_regionkey from nation order by 1"
        ).fetchall()
        regions = conn.execute("select trim(r_name) from region order by r_regionkey").fetchall()
    assert [(name, region) for _, name, region in nations] == list(NATIONS)
    assert [r for (r,) in regions] == list(REGIONS)


def _table_files(dsn: str) -> dict[str, tuple[int, int]]:
    """Each TPC-H table's oid and data file number."""
    with psycopg.connect(dsn) as conn:
        return {t: conn.execute(  # type: ignore[misc]
            "select %s::regclass::oid::int8, pg_relation_filenode(%s::regclass)::int8",
            (t, t)).fetchone() for t in TABLES}


def test_load_is_idempotent_and_refuses_another_scale(tpch_loaded: tuple[str, LoadResult]) -> None:
    dsn, first = tpch_loaded
    before = _table_files(dsn)
    again = load_tpch(dsn, TEST_SCALE)
    assert again.reused and again.rows == first.rows
    # nothing was reloaded: the same tables in the same files (a drop, a truncate or a
    # rewrite gives a table a new oid or file); not timed, which a loaded machine stretches
    assert _table_files(dsn) == before
    with pytest.raises(WorkloadError, match="already holds TPC-H at scale 0.01, but scale 0.02"):
        load_tpch(dsn, 0.02)


@pytest.mark.parametrize("scale", [0, -1, float("nan"), "1"])
def test_bad_scale_is_a_clear_error(scale: object) -> None:
    with pytest.raises(WorkloadError, match="scale factor must be a number > 0"):
        load_tpch(UNREACHABLE, scale)  # type: ignore[arg-type]


def test_unreachable_dsn_is_a_clear_error() -> None:
    where = "cannot connect to PostgreSQL at host=127.0.0.1 port=1 "
    with pytest.raises(DatabaseError, match=where):
        load_tpch(UNREACHABLE, 0.01)
    with pytest.raises(DatabaseError, match="cannot connect"):
        WorkloadDriver(UNREACHABLE, "1Q6").start()


def test_driver_refuses_a_database_without_tpch(fresh_dsn: str) -> None:
    with pytest.raises(WorkloadError, match="no finished TPC-H load"):
        WorkloadDriver(fresh_dsn, "1Q6").start()


@pytest.mark.parametrize("name", QUERY_NAMES)
def test_every_query_runs_with_random_parameters(tpch_dsn: str, name: str) -> None:
    rng = random.Random(11)
    with psycopg.connect(tpch_dsn, autocommit=True) as conn:
        counts = []
        for _ in range(3):
            cur = conn.execute(make_query(name, rng, TEST_SCALE).statement)
            counts.append(len(cur.fetchall()))
        default_rows = len(conn.execute(validation_query(name, TEST_SCALE).statement).fetchall())
    assert default_rows > 0
    if name not in MAY_BE_EMPTY:
        assert min(counts) > 0, counts


def test_mix_gives_positive_throughput_per_query(tpch_dsn: str) -> None:
    with WorkloadDriver(tpch_dsn, "2Q6,1Q13", seed=1) as driver:
        cpu0, wall0 = time.process_time(), time.monotonic()
        sample = driver.sample(3.0)
        cpu_fraction = (time.process_time() - cpu0) / (time.monotonic() - wall0)
    assert sample.seconds == pytest.approx(3.0, abs=0.2)
    assert set(sample.per_query) == {"Q6", "Q13"}
    assert sample.errors == 0
    for stats in sample.per_query.values():
        assert stats.completed > 0 and stats.qpm > 0
        assert stats.p50 is not None and stats.p99 is not None and 0 < stats.p50 <= stats.p99
    assert sample.completed == sum(s.completed for s in sample.per_query.values())
    assert sample.qpm == pytest.approx(sample.completed * 60 / sample.seconds)
    assert cpu_fraction < 0.5  # loose here; benchmarks/tpch_load.py records the real number


def test_fixed_work_sample_counts_exactly(tpch_dsn: str) -> None:
    with WorkloadDriver(tpch_dsn, "2Q6,1Q14") as driver:
        for wanted in (1, 37):
            sample = driver.sample(queries=wanted, timeout_s=30)
            assert sample.completed == wanted
            assert sum(s.completed for s in sample.per_query.values()) == wanted
            assert sample.seconds > 0


def _terminate(admin_dsn: str, application_name: str) -> int:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        rows = conn.execute(
            "select pg_terminate_backend(pid) from pg_stat_activity"
            " where application_name = %s and backend_type = 'client backend'",
            (application_name,),
        ).fetchall()
    return len(rows)


def test_killed_connection_is_an_error_and_the_stream_recovers(tpch_dsn: str) -> None:
    with WorkloadDriver(tpch_dsn, "1Q1") as driver:
        driver.sample(queries=1, timeout_s=30)  # the stream is connected and looping
        result: list = []
        sampler = threading.Thread(target=lambda: result.append(driver.sample(3.0)))
        sampler.start()
        time.sleep(0.5)
        assert _terminate(tpch_dsn, "harmony-tpch-Q1-0") == 1
        sampler.join()
        (sample,) = result
        after = driver.sample(queries=3, timeout_s=30)
        assert driver.reconnects >= 1
    assert sample.per_query["Q1"].errors >= 1
    assert sample.per_query["Q1"].completed >= 1  # completions after the reconnect
    assert after.completed == 3


def test_statement_timeout_counts_errors_without_reconnecting(tpch_dsn: str) -> None:
    with WorkloadDriver(tpch_dsn, "1Q9", statement_timeout_s=0.001) as driver:
        sample = driver.sample(1.0)
        assert driver.reconnects == 0
    assert sample.completed == 0 and sample.errors >= 3


def test_stop_is_prompt_and_idempotent(tpch_dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    driver = WorkloadDriver(tpch_dsn, "2Q1,2Q9")
    driver.start()
    time.sleep(0.3)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="workloads.driver"):
        driver.stop()
    # every stream stopped (its query cancelled) before stop() gave up on it after
    # STOP_TIMEOUT_S and warned; not a tighter wall-clock bound, which a loaded machine breaks
    assert time.monotonic() - started < STOP_TIMEOUT_S
    assert not [r for r in caplog.records if "did not stop" in r.getMessage()], caplog.text
    driver.stop()
    with pytest.raises(WorkloadError, match="not running"):
        driver.sample(1.0)
    # every stream's connection is closed; its backend exits on its own schedule (a loaded
    # machine may take a moment), so wait for the count rather than sample it once
    deadline = time.monotonic() + 30.0
    while True:
        with psycopg.connect(tpch_dsn) as conn:
            (left,) = conn.execute(  # type: ignore[misc]
                "select count(*) from pg_stat_activity "
                "where application_name like 'harmony-tpch-%%'").fetchone()
        if left == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert left == 0


def test_schedule_switches_mix_at_the_phase_boundary(tpch_dsn: str) -> None:
    with ScheduledDriver(tpch_dsn, "1Q6:1;1Q13:60") as driver:
        sample = driver.sample(2.5)
        assert driver.phase_index == 1 and str(driver.current_mix) == "1Q13"
        later = driver.sample(0.5)
    assert sample.mix == "1Q6 -> 1Q13"
    assert sample.per_query["Q6"].completed > 0 and sample.per_query["Q13"].completed > 0
    assert later.mix == "1Q13" and set(later.per_query) == {"Q13"}


def test_schedule_clock_survives_a_stop_and_start(tpch_dsn: str) -> None:
    # the tuner stops and starts the driver around every restart: the schedule must not rewind
    driver = ScheduledDriver(tpch_dsn, "1Q6:1;1Q13:60")
    driver.start()
    assert driver.phase_index == 0
    driver.stop()
    time.sleep(1.2)
    driver.start()
    try:
        assert driver.phase_index == 1 and str(driver.current_mix) == "1Q13"
    finally:
        driver.stop()


def test_schedule_repeat_cycles(tpch_dsn: str) -> None:
    with ScheduledDriver(tpch_dsn, "1Q6:0.3;1Q14:0.3", repeat=True) as driver:
        assert wait_for_phase(driver, 1, 5)
        assert wait_for_phase(driver, 0, 5)


def _cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_run_json_and_bad_mix(tpch_dsn: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli("tpch", "run", "--dsn", tpch_dsn, "--mix", "1Q6", "--seconds", "1", "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["samples"][0]["per_query"]["Q6"]["completed"] > 0
    assert 0 <= report["driver_cpu_fraction"] < 1
    with pytest.raises(ConfigError, match="Q1..Q22"):
        _cli("tpch", "run", "--dsn", tpch_dsn, "--mix", "4Q23", "--seconds", "1")
    with pytest.raises(ConfigError, match="--scale must be > 0"):
        _cli("tpch", "load", "--dsn", tpch_dsn, "--scale", "0")


def test_cli_prints_query_instances(capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli("tpch", "queries", "--query", "6", "--default") == 0
    out = capsys.readouterr().out
    assert "l_discount between 0.06 - 0.01 and 0.06 + 0.01" in out
    assert _cli("tpch", "queries", "--seed", "4") == 0
    assert capsys.readouterr().out.count("-- Q") == 22
