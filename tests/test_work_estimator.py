"""The work-weighted and per-CPU estimators and their config key, on real PostgreSQL."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import psycopg
import pytest
from tune_fixtures import TpchCluster, tpch_cluster  # noqa: F401  (fixture)

from harmony_base.errors import ConfigError
from tuner_client.config import MeasureConfig, parse_tuner_config
from tuner_client.knobs.apply import reset_knobs
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.measurer import Measurer, ServerAccess
from tuner_client.measurer.server_cpu import CGROUP_ROOT, child_pids, parent_pid, read_server_cpu
from tuner_client.servers.local_cluster import LocalCluster
from workloads.driver import WorkloadDriver
from workloads.pgbench import PgbenchWorkload
from workloads.sample import reference_costs, summarize

pytestmark = pytest.mark.postgres

BURN = "SELECT count(*) FROM generate_series(1, %s) AS g WHERE g %% 7 = 3"


def test_work_of_a_known_mix_is_completions_times_reference_cost() -> None:
    """1-s and 4-minute templates: the work credits each completion with its cost."""
    reference = summarize([("Q6", 1.0), ("Q6", 1.2), ("Q6", 0.8), ("Q9", 240.0)], [],
                          seconds=60.0)
    costs = reference_costs([reference])
    assert costs == pytest.approx({"Q6": 1.0, "Q9": 240.0})
    later = summarize([("Q6", 0.5)] * 10 + [("Q9", 200.0)], [], seconds=30.0)
    assert later.work_per_s(costs) == pytest.approx((10 * 1.0 + 1 * 240.0) / 30.0)
    assert later.qpm == pytest.approx(22.0)  # the count: Q9 weighs as much as one Q6
    # a template without a cost makes the work unknown, not silently smaller
    assert summarize([("Q1", 3.0)], [], seconds=10.0).work_per_s(costs) is None
    # pooled: completions-weighted mean over samples, not the mean of the samples' means
    two = reference_costs([summarize([("Q6", 1.0)] * 3, [], 10.0),
                           summarize([("Q6", 3.0)], [], 10.0)])
    assert two == pytest.approx({"Q6": 1.5})


def test_measurer_work_estimator_on_tpch(tpch_cluster: TpchCluster) -> None:  # noqa: F811
    """``measure.estimator: work``: the first apply measures the original configuration and
    freezes the costs; each sample's value is sum(completed x cost) / seconds."""
    with psycopg.connect(tpch_cluster.dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    config = MeasureConfig(warmup_s=0.5, samples=3, aggregate="median", queries=12,
                           estimator="work")
    m = Measurer(ServerAccess(tpch_cluster.dsn, catalog),
                 WorkloadDriver(tpch_cluster.dsn, "2Q6,1Q13"), config)
    m.in_force = m.current_settings(["work_mem"])
    try:
        assert m.reference.costs is None
        record = m.measure("test", {}, {"work_mem": "8MB"})
        costs = m.reference.costs
    finally:
        m.close()
        with psycopg.connect(tpch_cluster.dsn, autocommit=True) as conn:
            reset_knobs(conn, ["work_mem"], catalog)
    assert record.failure is None and len(record.samples) == 3
    assert costs is not None and set(costs) == {"Q6", "Q13"}  # every template of the mix
    assert all(0 < c < 60 for c in costs.values())
    for s in record.samples:
        assert s.estimator == "work"
        expected = sum(n * costs[q] for q, (n, _) in s.per_query.items() if n) / s.seconds
        assert s.work_per_s is not None and s.qpm == s.work_per_s
        assert math.isclose(s.work_per_s, expected, rel_tol=1e-9)
        # the count stays in the record, and agrees with the per-query completions
        assert s.count_qpm == pytest.approx(60.0 * sum(n for n, _ in s.per_query.values())
                                            / s.seconds)
        # 3 closed-loop streams, each busy with about one reference-second per second (a
        # window of a dozen completions in 24 ms read 6.1 on a loaded machine)
        assert 0.5 < s.work_per_s < 10.0, s.work_per_s
        assert s.server_cpu is not None and s.server_cpu > 0 and s.cpu_source == "proc"
        assert s.work_per_cpu == pytest.approx(s.work_per_s / s.server_cpu)
    assert record.value == pytest.approx(sorted(s.qpm for s in record.samples)[1])


@pytest.mark.parametrize("estimator", ["work_per_cpu", "count_per_cpu"])
def test_cpu_estimators_are_finite_and_positive(tpch_cluster: TpchCluster,  # noqa: F811
                                                estimator: str) -> None:
    with psycopg.connect(tpch_cluster.dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    config = MeasureConfig(warmup_s=0.5, samples=2, aggregate="median", queries=None,
                           seconds=1.5, estimator=estimator)
    m = Measurer(ServerAccess(tpch_cluster.dsn, catalog),
                 WorkloadDriver(tpch_cluster.dsn, "2Q6,1Q13"), config)
    m.in_force = m.current_settings(["work_mem"])
    try:
        record = m.measure("test", {}, {"work_mem": "6MB"})
    finally:
        m.close()
        with psycopg.connect(tpch_cluster.dsn, autocommit=True) as conn:
            reset_knobs(conn, ["work_mem"], catalog)
    assert record.failure is None and len(record.samples) == 2
    for s in record.samples:
        assert s.estimator == estimator and math.isfinite(s.qpm) and s.qpm > 0
        assert s.server_cpu is not None and 0 < s.server_cpu <= (os.cpu_count() or 1) * 1.05
        assert s.count_qpm is not None
        assert s.qpm == (s.work_per_cpu if estimator == "work_per_cpu"
                         else pytest.approx(s.count_qpm / s.server_cpu))
        if estimator == "work_per_cpu":
            assert s.work_per_s is not None and s.work_per_cpu == pytest.approx(
                s.work_per_s / s.server_cpu)


def _postmaster(conn: psycopg.Connection[object]) -> int:
    pid = parent_pid(conn.info.backend_pid)
    assert pid is not None
    return pid


def test_server_cpu_grows_while_a_query_runs_and_never_drops(pg_cluster: LocalCluster) -> None:
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        postmaster = _postmaster(conn)
        before = read_server_cpu(postmaster)
        assert before is not None and before.source == "proc"
        started = time.monotonic()
        conn.execute(BURN, [3_000_000]).fetchone()
        wall = time.monotonic() - started
        during = read_server_cpu(postmaster)
    assert during is not None
    used = during.cpu_s - before.cpu_s
    assert used >= 0.05 and used <= wall * (os.cpu_count() or 1) + 0.05, (used, wall)
    # the backend has exited: the postmaster reaped it, its time moved into cutime/cstime
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        after = read_server_cpu(postmaster)
        assert after is not None and after.cpu_s >= during.cpu_s - 0.02
        time.sleep(0.2)


def test_the_postmasters_children_file_names_the_children_a_proc_scan_finds(
        pg_cluster: LocalCluster) -> None:
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        postmaster = _postmaster(conn)
        backend = int(conn.info.backend_pid)
        listed = {int(p) for p in child_pids(postmaster)}
        scanned = {int(p.name) for p in Path("/proc").iterdir()
                   if p.name.isdigit() and parent_pid(int(p.name)) == postmaster}
    # the checkpointer, background writer, WAL writer, autovacuum launcher ... and this
    # connection's backend; a process may start or exit between the two readings
    assert backend in listed and len(listed) >= 5, listed
    assert len(listed ^ scanned) <= 1, (listed, scanned)


@pytest.mark.skipif(os.geteuid() != 0 or not (CGROUP_ROOT / "cpuacct" / "cpuacct.usage").exists(),
                    reason="needs root and the cgroup v1 cpuacct controller")
def test_server_cpu_from_a_cgroup_of_its_own(own_cluster: LocalCluster) -> None:
    cg = CGROUP_ROOT / "cpuacct" / f"harmony-test-{os.getpid()}"
    cg.mkdir()
    try:
        with psycopg.connect(own_cluster.dsn, autocommit=True) as conn:
            postmaster = _postmaster(conn)
            assert read_server_cpu(postmaster).source == "proc"  # type: ignore[union-attr]
            for pid in [postmaster] + [int(p.name) for p in Path("/proc").iterdir()
                                       if p.name.isdigit() and parent_pid(int(p.name))
                                       == postmaster]:
                try:
                    (cg / "cgroup.procs").write_text(str(pid))
                except OSError:
                    pass  # exited meanwhile
        with psycopg.connect(own_cluster.dsn, autocommit=True) as conn:
            before = read_server_cpu(postmaster)
            assert before is not None and before.source == "cgroup"
            conn.execute(BURN, [3_000_000]).fetchone()
            after = read_server_cpu(postmaster)
        assert after is not None and after.source == "cgroup"
        assert after.cpu_s - before.cpu_s >= 0.05
    finally:
        _remove_cgroup(cg)


def _remove_cgroup(cg: Path) -> None:
    """Move every process out of ``cg`` and remove it. The postmaster forks on (autovacuum,
    parallel workers), and a child forked inside the group after the move left it busy
    (EBUSY under load), so moves and removal are retried until the group is empty."""
    for _ in range(50):
        for pid in (cg / "cgroup.procs").read_text().split():
            try:
                (cg.parent / "cgroup.procs").write_text(pid)
            except OSError:
                pass  # exited meanwhile
        try:
            cg.rmdir()
            return
        except OSError:
            time.sleep(0.1)
    cg.rmdir()


def test_pgbench_work_is_tps_times_reference_latency(fresh_dsn: str) -> None:
    with PgbenchWorkload(fresh_dsn, clients=2, scale=1) as workload:
        reference = workload.sample(1.0)
        later = workload.sample(1.0)
    costs = reference_costs([reference])
    assert set(costs) == {"pgbench"}
    assert costs["pgbench"] == pytest.approx(reference.per_query["pgbench"].mean)
    work = later.work_per_s(costs)
    assert work == pytest.approx(later.qpm / 60.0 * costs["pgbench"], rel=1e-9)


def test_estimator_key_is_validated() -> None:
    for name in ("count", "concurrency", "work", "work_per_cpu", "count_per_cpu"):
        cfg = parse_tuner_config(f"name: x\nmeasure: {{estimator: {name}}}\n")
        assert cfg.measure.estimator == name
    with pytest.raises(ConfigError) as err:
        parse_tuner_config("name: x\nmeasure:\n  estimator: qpm\n", source="configs/bad.yaml")
    msg = str(err.value)
    assert "configs/bad.yaml, line 3" in msg and "measure.estimator" in msg and "'qpm'" in msg
    for name in ("count", "concurrency", "work", "work_per_cpu"):
        assert f"'{name}'" in msg
