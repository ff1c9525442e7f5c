"""Switchback runs on a real PostgreSQL: configurations switched by ALTER SYSTEM + reload in
balanced slices read a known-worse configuration as worse with an interval excluding 1, an
A/A comparison keeps 1 inside, transactions running past a switch are kept in the slice they
started in (counted as carried), and the
server's configuration comes back exactly (pg_settings and pg_file_settings) even when the
run fails half-way."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from harmony_base.errors import ConfigError, WorkloadError
from tuner_client.knobs.apply import reload_and_wait
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.stats.switchback import (
    attribute,
    balanced_order,
    block_log_speedups,
    compare,
    race,
    totals_from_deltas,
    totals_from_transactions,
)
from tuner_client.switchback import (
    ConfigurationSwitch,
    counters_reader,
    run_driven,
    run_slices,
)
from workloads.per_transaction import (
    PgbenchAssignment,
    StreamAssignment,
    Template,
    statement_draws,
)
from workloads.per_transaction.trace import Trace
from workloads.script_file import read_script_file

#: a point lookup on 200,000 rows (the key drawn once, in an InitPlan, so the index is
#: usable): an index scan, or a sequential scan when the index scans are off (known to be
#: many times slower)
LOOKUP = "SELECT pad FROM items WHERE id = (SELECT (random() * 200000)::int)"
INDEX_OFF = {"enable_indexscan": "off", "enable_bitmapscan": "off",
             "enable_indexonlyscan": "off"}
INDEX_ON = dict.fromkeys(INDEX_OFF, "on")


@pytest.fixture(scope="module")
def cluster(cluster_factory: Callable[..., LocalCluster]) -> Iterator[LocalCluster]:
    made = cluster_factory("switchback")
    with psycopg.connect(made.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, pad text)")
        conn.execute("INSERT INTO items SELECT g, md5(g::text) FROM generate_series(1, 200000) g")
        conn.execute("VACUUM ANALYZE items")
    yield made


def _snapshot(conn: psycopg.Connection[Any]) -> tuple[list[Any], list[Any]]:
    settings = conn.execute("SELECT name, setting, source, sourcefile, sourceline "
                            "FROM pg_settings ORDER BY name").fetchall()
    files = conn.execute("SELECT sourcefile, sourceline, seqno, name, setting, applied, error "
                         "FROM pg_file_settings ORDER BY seqno").fetchall()
    return settings, files


def _lookups(dsn: str, tmp_path: Path, streams: int = 2) -> StreamAssignment:
    (tmp_path / "lookup.sql").write_text(LOOKUP + ";\n")
    return StreamAssignment(dsn, [{}], statement_draws(read_script_file(tmp_path / "lookup.sql"),
                                                       streams), seed=1)


def _totals(dsn: str, configs: list[dict[str, str]], driver: Any, *, blocks: int,
            slice_s: float = 1.0, seed: int = 2) -> tuple[Any, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = _snapshot(conn)
        run = run_driven(conn, KnobCatalog.from_connection(conn), configs, driver,
                         blocks=blocks, slice_s=slice_s, warmup_s=0.5, seed=seed)
        assert _snapshot(conn) == before
    trace = run.trace
    totals = totals_from_transactions(list(run.spans), trace.template, trace.origin + trace.start,
                                      trace.latency, trace.ok, settle_s=0.05)
    return run, totals


def test_known_worse_configuration_reads_worse(cluster: LocalCluster, tmp_path: Path) -> None:
    run, totals = _totals(cluster.dsn, [INDEX_ON, INDEX_OFF], _lookups(cluster.dsn, tmp_path),
                          blocks=6)
    result = compare(totals, 0, 1)
    assert len(run.spans) == 12 and result.blocks == 6
    assert result.interval.high < 0.8, result.text()  # sequential scans: several times slower
    assert min(result.observations) > 20


def test_pgbench_driver_plans_under_each_slice(cluster: LocalCluster) -> None:
    """A prepared statement keeps its plan across a reload: the switchback's pgbench driver
    (no configuration of its own) plans every execution, so the index scans switched off
    by reload read several times slower, as with the Python streams."""
    driver = PgbenchAssignment(cluster.dsn, [{}], [Template("lookup", LOOKUP + ";\n")],
                               clients=2)
    assert driver.query_mode == "extended"
    _, totals = _totals(cluster.dsn, [INDEX_ON, INDEX_OFF], driver, blocks=6)
    result = compare(totals, 0, 1)
    assert result.interval.high < 0.8, result.text()


def test_aa_switchback_keeps_one_inside(cluster: LocalCluster, tmp_path: Path) -> None:
    # its own order (seed): a known-worse switchback in another worker with the same order
    # and phase would load the same configuration's slices in every block
    _, totals = _totals(cluster.dsn, [INDEX_ON, dict(INDEX_ON)], _lookups(cluster.dsn, tmp_path),
                        blocks=6, seed=11)
    result = compare(totals, 0, 1)
    logs = block_log_speedups(totals, 0, 1)
    assert result.interval.low < 1.0 < result.interval.high, (result.text(), logs.round(3))


def test_straddling_transactions_are_carried(cluster: LocalCluster, tmp_path: Path) -> None:
    (tmp_path / "sleep.sql").write_text("SELECT pg_sleep(0.3);\n")
    driver = StreamAssignment(cluster.dsn, [{}],
                              statement_draws(read_script_file(tmp_path / "sleep.sql"), 3))
    run, totals = _totals(cluster.dsn, [INDEX_ON, INDEX_OFF], driver, blocks=3)
    # at every slice's end but the last (the streams are stopped then) each of the 3 streams
    # is inside a 0.3 s sleep begun in that slice (but for the few ms between two of a
    # stream's transactions)
    slices = len(run.spans)
    assert 3 * (slices - 1) - 2 <= totals.carried <= 3 * slices
    assert "straddling" not in totals.dropped
    kept = totals.counts.sum(axis=1)
    assert np.all(kept >= 1) and totals.kept == kept.sum()
    ends = np.array([s.end for s in run.spans])
    start = run.trace.origin + run.trace.start
    crossing = ((start[:, None] < ends) & (start[:, None] + run.trace.latency[:, None] > ends))
    where, _, carried = attribute(list(run.spans), start, run.trace.latency, run.trace.ok,
                                  settle_s=0.05)
    assert carried == totals.carried == int((crossing.any(axis=1) & (where >= 0)).sum())
    # a carried sleep counts whole in the slice it began in: ~0.3 s each
    assert totals.sums.sum() / totals.kept == pytest.approx(0.3, abs=0.05)


class _FailingDriver:
    """Fails at once: the switchback must still restore the server."""

    def run(self, seconds: int) -> Trace:
        raise WorkloadError("the workload broke")


def test_configuration_restored_after_a_failure(cluster: LocalCluster) -> None:
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET wal_writer_delay = '300ms'")
        assert reload_and_wait(conn)
        try:
            before = _snapshot(conn)
            catalog = KnobCatalog.from_connection(conn)
            configs = [{"wal_writer_delay": "50ms", "bgwriter_delay": "20ms"},
                       {"wal_writer_delay": "400ms", "bgwriter_delay": "500ms"}]
            with pytest.raises(WorkloadError, match="the workload broke"):
                run_driven(conn, catalog, configs, _FailingDriver(), blocks=2, slice_s=0.3,
                           warmup_s=0.1)
            assert _snapshot(conn) == before

            def fail_after_first_block(_: object) -> bool:
                raise RuntimeError("interrupted")

            with (pytest.raises(RuntimeError, match="interrupted"),
                  ConfigurationSwitch(conn, catalog, configs) as switch):
                run_slices(switch, balanced_order(2, 3), 0.3, after_block=fail_after_first_block)
            assert _snapshot(conn) == before
            with pytest.raises(ConfigError, match="context is 'postmaster'"):
                ConfigurationSwitch(conn, catalog, [{"shared_buffers": "16MB"},
                                                    {"shared_buffers": "32MB"}])
        finally:
            conn.execute("ALTER SYSTEM RESET wal_writer_delay")
            reload_and_wait(conn)


def test_counters_per_slice_from_pg_stat_database(cluster: LocalCluster, tmp_path: Path) -> None:
    """Without pg_stat_statements, each slice's committed transactions over its seconds."""
    driver = _lookups(cluster.dsn, tmp_path)
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        catalog = KnobCatalog.from_connection(conn)
        read, source, settle_s = counters_reader(conn)
        assert source.startswith("committed transactions") and settle_s == 1.0
        with ConfigurationSwitch(conn, catalog, [INDEX_ON, INDEX_OFF]) as switch:
            load = threading.Thread(target=driver.run, args=(14,), daemon=True)
            load.start()
            run = run_slices(switch, balanced_order(2, 3, seed=4), 2.0, settle_s=settle_s,
                             counters=read)
        driver.stop_event.set()
        load.join()
    assert len(run.deltas) == 6 and all(set(d) == {"xact_commit"} for d in run.deltas)
    result = race(totals_from_deltas(run.spans, run.deltas), ["on", "off"], slice_s=2.0,
                  settle_s=settle_s, source=source)
    assert result.comparisons["off"].interval.ratio < 0.8
