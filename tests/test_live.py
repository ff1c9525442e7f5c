"""Live mode (``workload: {observe: ...}``) on a real PostgreSQL with pg_stat_statements
preloaded, the traffic coming from a separate pgbench process: the measurement, the
guardrails, the statement-mix shift detector, and every bad input."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from benchmarks.live_traffic import Traffic, create_shop
from harmony_base.errors import ConfigError, GuardrailTrip, WorkloadError
from tuner_client.api.client import connect
from tuner_client.budget import make_budget_view, worker_processes
from tuner_client.cli.tune_run import format_result
from tuner_client.config import (
    GuardConfig,
    MeasureConfig,
    load_tuner_config,
    parse_tuner_config,
    resolve_knob_space,
)
from tuner_client.flows import Tuner
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.measurer import LiveWatch, Measurer, PointRecord, ServerAccess
from tuner_client.measurer.guardrails import Guardrail
from tuner_client.metrics.exporter import TunerMetrics
from tuner_client.phases.detectors import MixShiftDetector
from tuner_client.phases.result import Best, Evidence, Intervals, Throughput, TuneResult, Work
from tuner_client.servers.controllers import LocalController
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.target import Target
from tuner_client.stats.mix import MixReference, share_distance, time_shares
from workloads.observe import ObservedWindow, ObservedWorkload

#: a knob change that makes key lookups slow: every lookup becomes a sequential scan
SLOW = {"enable_indexscan": "off", "enable_bitmapscan": "off"}
KNOBS = list(SLOW)
ROWS = 50_000


@pytest.fixture(scope="module")
def live_cluster(cluster_factory) -> Iterator[LocalCluster]:  # type: ignore[no-untyped-def]
    """A private cluster with pg_stat_statements preloaded and a shop database."""
    cluster = cluster_factory("live")
    conf = cluster.data_dir / "postgresql.conf"
    conf.write_text(conf.read_text() + "\nshared_preload_libraries = 'pg_stat_statements'\n")
    cluster.restart()
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE shop")
    create_shop(cluster.dsn_for("shop"), rows=ROWS)
    try:
        yield cluster
    finally:
        cluster.stop(mode="immediate")  # a throwaway cluster: no shutdown checkpoint
        cluster.destroy()


def _measurer(dsn: str, *, guard: Guardrail | None = None, warmup_s: float = 1.0,
              seconds: float = 2.0) -> Measurer:
    with psycopg.connect(dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    config = MeasureConfig(warmup_s=warmup_s, samples=1, queries=None, seconds=seconds,
                           estimator="latency")
    measurer = Measurer(ServerAccess(dsn, catalog), ObservedWorkload(dsn, poll_s=0.25), config,
                        live=LiveWatch(guard, min_calls=20))
    measurer.in_force = measurer.current_settings(KNOBS)
    return measurer


def _show(dsn: str, name: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT current_setting(%s)", [name]).fetchone()
    assert row is not None
    return str(row[0])


# -- live measurement ---------------------------------------------------------------------


def test_a_knob_that_slows_the_traffic_is_measured_slower(live_cluster: LocalCluster) -> None:
    dsn = live_cluster.dsn_for("shop")
    traffic = Traffic(dsn, {"lookup": 10, "order": 3}, seconds=10, rows=ROWS).start()
    measurer = _measurer(dsn, warmup_s=0.5, seconds=1.5)
    time.sleep(1.0)  # past the cold start
    try:
        original = dict(measurer.in_force)
        reference = measurer.measure("ref", {}, original)
        slow = measurer.measure("slow", {}, SLOW)
        back = measurer.measure("back", {}, original)
    finally:
        measurer.close()
        result = traffic.wait(timeout_s=30)
    assert reference.failure is None and slow.failure is None and back.failure is None
    ref = measurer.mix_reference
    assert ref is not None and len(ref.shares) >= 2  # the lookup and the insert statements
    # the reference's own speed is 1 by construction up to noise (a few stalls of a loaded
    # 2-core machine move the means of 30-µs statements a lot); sequential scans of 50k rows
    # instead of index lookups are tens of times slower
    assert reference.value is not None and back.value is not None
    assert 0.2 < reference.value < 5.0 and 0.2 < back.value < 5.0
    assert slow.value is not None and slow.value < 0.2 * min(reference.value, back.value)
    assert result.returncode == 0 and result.failed == 0


# -- guardrails ---------------------------------------------------------------------------


def test_guardrail_reverts_within_one_sample_and_nothing_is_lost(
        live_cluster: LocalCluster) -> None:
    dsn = live_cluster.dsn_for("shop")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE orders")
    auto_conf = (live_cluster.data_dir / "postgresql.auto.conf").read_text()
    guard = Guardrail(GuardConfig(latency_margin=0.5, min_calls=5))
    trips = []
    # one pgbench thread: its per-script counts are summed across threads without a lock
    # (pgbench.c: "could use a mutex here, but we choose not to"), and one was lost in CI
    traffic = Traffic(dsn, {"lookup": 10, "order": 3}, seconds=12, rows=ROWS,
                      threads=1).start()
    measurer = _measurer(dsn, guard=guard, warmup_s=2.0, seconds=2.0)
    measurer.trips.on_trip = trips.append
    time.sleep(1.0)  # past pgbench's start
    try:
        original = dict(measurer.in_force)
        measurer.measure("ref", {}, original)
        started = time.monotonic()
        bad = measurer.measure("slow", {}, SLOW)
        elapsed = time.monotonic() - started
        in_force_after = dict(measurer.in_force)
    finally:
        measurer.close()
        result = traffic.wait(timeout_s=30)
    assert bad.failure is not None and "guardrail" in bad.failure and bad.value is None
    assert len(trips) == 1 and trips[0] is guard.trips[0] and trips[0].kind == "latency"
    # detected within the warm-up window of 2 s or the first sample after it (2 s; in
    # quiet runs inside the warm-up's first second), reverted in well under a second
    assert trips[0].detected_after_s is not None and trips[0].detected_after_s < 4.0, trips
    assert trips[0].revert_s < 1.0 and elapsed < 4.0 + 1.0, (trips, elapsed)
    assert trips[0].restored == {"enable_indexscan": "on", "enable_bitmapscan": "on"}
    assert in_force_after == original
    assert _show(dsn, "enable_indexscan") == "on" and _show(dsn, "enable_bitmapscan") == "on"
    # nothing lost: every transaction of the application committed, every order is there.
    # pgbench -T abandons the transactions in flight when its timer ends: a COMMIT already
    # sent is done on the server but not in pgbench's log, so up to one order per client more
    with psycopg.connect(dsn) as conn:
        orders = conn.execute("SELECT count(*) FROM orders").fetchone()
    assert result.returncode == 0 and result.failed == 0 and result.processed > 0
    logged = result.per_script["order"]
    assert orders is not None and logged <= orders[0] <= logged + traffic.clients, \
        (orders, logged)
    # the trip is in the run's summary and metrics
    summary = guard.summary().to_dict()
    assert summary["trips"] == 1 and summary["by_kind"] == {"latency": 1}
    metrics = TunerMetrics(KNOBS)
    metrics.record_guardrail_trip(trips[0].kind, trips[0].revert_s)
    assert 'harmony_tuner_guardrail_trips_total{kind="latency"} 1.0' in \
        metrics.render().decode()
    shown = format_result(TuneResult.conclude(
        Best(original, original, Throughput(None, None)), Intervals([]), Work(1, 1),
        Evidence(guardrails=guard.summary())))
    assert "guardrails: 1 trip(s) {'latency': 1}" in shown and "reverted to" in shown
    # the server's configuration file holds the original values again (explicitly set)
    text = (live_cluster.data_dir / "postgresql.auto.conf").read_text()
    assert "enable_indexscan = 'on'" in text and "'off'" not in text.replace(auto_conf, "")


def test_error_and_memory_guardrails_judge_the_window() -> None:
    guard = Guardrail(GuardConfig(error_margin=0.05), memory_limit_bytes=1000 * 2**20,
                      memory_used=lambda: 950 * 2**20)
    guard.baseline_error_rate = 0.01
    calm = ObservedWindow(1.0, {"1": (100, 0.001)}, xact_commit=100, xact_rollback=2,
                          deadlocks=0, temp_files=0)
    with pytest.raises(GuardrailTrip) as memory:
        guard.check(calm)  # 950 MiB > 90 % of 1000 MiB
    assert memory.value.kind == "memory" and "950 MiB" in str(memory.value)
    guard.memory_used = lambda: 500 * 2**20
    guard.check(calm)  # 2 % errors: within 1 % + 5 %; 500 MiB: fine
    failing = ObservedWindow(1.0, {"1": (100, 0.001)}, xact_commit=90, xact_rollback=8,
                             deadlocks=2, temp_files=0)
    with pytest.raises(GuardrailTrip) as errors:
        guard.check(failing)  # 10 of 98 finished = 10.2 % > 6 %
    assert errors.value.kind == "errors" and "10 rolled-back" in str(errors.value)
    # latency: 2.5x the reference's costs trips at margin 1.0 (limit 2x) while the original
    # runs at its reference speed, not once the original itself drifted to 1.5x (limit 3x)
    guard.reference = MixReference.learn([{"a": (100, 0.010)}], min_calls=20)
    slow = ObservedWindow(1.0, {"a": (50, 0.025)}, xact_commit=50, xact_rollback=0,
                          deadlocks=0, temp_files=0)
    with pytest.raises(GuardrailTrip) as latency:
        guard.check(slow)
    assert latency.value.kind == "latency" and "2.50x" in str(latency.value)
    guard.level = 1.5
    guard.check(slow)
    # the heavy statement made rare: judged on the few calls that completed, after 1 s
    guard.level = 1.0
    guard.reference = MixReference.learn([{"a": (100, 0.010), "b": (100, 0.0005)}],
                                         min_calls=20)
    rare = {"a": (3, 0.050), "b": (200, 0.0005)}
    guard.check(ObservedWindow(0.5, rare, 0, 0, 0, 0))  # too early to judge 3 calls
    with pytest.raises(GuardrailTrip) as starved:
        guard.check(ObservedWindow(1.5, rare, 0, 0, 0, 0))
    assert starved.value.kind == "latency"


# -- the objective and the mix --------------------------------------------------------------


def test_a_change_of_mix_alone_is_not_a_gain() -> None:
    reference = MixReference.learn([{"a": (100, 0.010), "b": (100, 0.001)}], min_calls=20)
    assert reference.shares == pytest.approx({"a": 10 / 11, "b": 1 / 11})
    # same per-statement speeds, ten times more of the cheap statement: still 1.0
    same = reference.score({"a": (20, 0.010), "b": (1000, 0.001)})
    assert same is not None and same.ratio == pytest.approx(1.0)
    # statement a twice as slow: R = 10/11 * 2 + 1/11 = 21/11
    slower = reference.score({"a": (50, 0.020), "b": (50, 0.001)})
    assert slower is not None and slower.ratio == pytest.approx(21 / 11)
    # a statement with too few calls is left out and said so; the rest is renormalised
    partial = reference.score({"a": (50, 0.020), "b": (3, 0.5)})
    assert partial is not None and partial.left_out == ("b",) and partial.ratio == 2.0
    # the statements carrying 9 % of the time are not enough to score a window
    assert reference.score({"b": (100, 0.001)}) is None
    error = reference.coverage_error({"b": (100, 0.001)}, 2.0)
    assert "100 calls in 2.0 s" in str(error) and "9 %" in str(error) and "50 %" in str(error)


def test_statement_mix_shift_is_detected(live_cluster: LocalCluster) -> None:
    dsn = live_cluster.dsn_for("shop")
    workload = ObservedWorkload(dsn, poll_s=0.5)
    workload.start()
    detector = MixShiftDetector(outside=3, distance=0.25)

    costs: dict[str, float] = {}

    def shares() -> dict[str, float]:
        sample = workload.sample(seconds=1.5)
        calls = {q: (s.completed, s.mean) for q, s in sample.per_query.items()
                 if s.completed >= 20}
        for q, (_, mean) in calls.items():
            costs.setdefault(q, mean or 0.0)  # each statement priced at its first mean
        return time_shares(calls, costs)

    lookups = Traffic(dsn, {"lookup": 10, "order": 3}, seconds=5, rows=ROWS).start()
    try:
        time.sleep(0.3)
        first = shares()
        detector.arm(first)
        same = [shares(), shares()]
        fired_before = [detector.observe(s) for s in same]
    finally:
        lookups.wait(timeout_s=20)
    reports = Traffic(dsn, {"lookup": 1, "order": 1, "report": 5}, seconds=6, rows=ROWS).start()
    try:
        time.sleep(0.3)
        shifted = [shares() for _ in range(3)]
        fired_after = [detector.observe(s) for s in shifted]
    finally:
        reports.wait(timeout_s=20)
        workload.stop()
    assert fired_before == [False, False]
    assert max(share_distance(first, s) for s in same) < 0.15
    assert min(share_distance(first, s) for s in shifted) > 0.5
    assert fired_after == [False, False, True]


# -- bad input ------------------------------------------------------------------------------


def test_pg_stat_statements_not_preloaded_says_how_to_enable_it(pg_cluster: LocalCluster) -> None:
    with pytest.raises(WorkloadError) as err:
        ObservedWorkload(pg_cluster.dsn).start()
    text = str(err.value)
    assert "shared_preload_libraries" in text and "restart PostgreSQL" in text
    assert "CREATE EXTENSION pg_stat_statements" in text and f"port={pg_cluster.port}" in text


def test_extension_not_created_and_too_little_traffic(live_cluster: LocalCluster) -> None:
    with psycopg.connect(live_cluster.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier("quiet")))
    dsn = live_cluster.dsn_for("quiet")
    with pytest.raises(WorkloadError) as missing:
        ObservedWorkload(dsn).start()
    assert "not created in database 'quiet'" in str(missing.value)
    assert "CREATE EXTENSION pg_stat_statements" in str(missing.value)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
        conn.execute("CREATE TABLE t (x int)")
        for _ in range(7):
            conn.execute("SELECT count(*) FROM t")
    measurer = _measurer(dsn, warmup_s=0.2, seconds=1.0)
    try:
        with pytest.raises(WorkloadError) as quiet:
            measurer.learn_reference()
    finally:
        measurer.close()
    text = str(quiet.value)
    assert "too little traffic" in text and "needs at least 20 calls" in text
    assert "workload.observe.min_calls" in text


LIVE = """\
name: live
database:
  dsn: "host=127.0.0.1 port=5432 dbname=shop"
  controller: {kind: pg_ctl, options: {data_dir: /tmp/x}}
workload:
  observe: {min_calls: 10}
"""


def test_observe_config_defaults_and_bad_input() -> None:
    config = parse_tuner_config(LIVE, source="live.yaml")
    observe = config.workload.observe
    assert config.workload.kind == "observe" and observe is not None
    assert observe.min_calls == 10 and observe.guard.latency_margin == 1.0
    assert config.measure.estimator == "latency" and config.measure.seconds == 10.0
    assert config.measure.queries is None and config.offline.knobs == ()
    restarts = parse_tuner_config(LIVE.replace("{min_calls: 10}", "{allow_restarts: true}"),
                                  source="live.yaml")
    assert [k.name for k in restarts.offline.knobs] == ["shared_buffers"]

    def bad(text: str, *expected: str) -> None:
        with pytest.raises(ConfigError) as err:
            parse_tuner_config(text, source="live.yaml")
        for part in expected:
            assert part in str(err.value), str(err.value)

    bad(LIVE + "offline: {knobs: [shared_buffers]}\n", "live.yaml, line 7", "need restarts",
        "allow_restarts")
    bad(LIVE + "measure: {queries: 20}\n", "measure.seconds instead of measure.queries")
    bad(LIVE + "measure: {estimator: count}\n", "latency estimator", "'count'")
    bad(LIVE + "measure: {estimator: latency}\n", "estimator")  # implied, never written
    bad(LIVE.replace("workload:\n", "workload:\n  tpch: {scale: 0.01}\n"),
        "but got tpch, observe")
    bad("name: live\nworkload:\n  observe: {}\n", "give database.dsn")
    bad(LIVE.replace("{min_calls: 10}", "{guard: {latency_margn: 1}}"), "latency_margn")


FLOW = """\
name: live-flow
database:
  dsn: "{dsn}"
  controller: {{kind: pg_ctl, options: {{data_dir: {data_dir}}}}}
workload:
  # the guardrail is kept out of this test's way: a trip while the new mix is monitored
  # leaves that window without statements for the mix detector
  observe: {{min_calls: 10, poll_s: 0.25, shift_distance: 0.25, guard: {{latency_margin: 20}}}}
measure: {{warmup_s: 0.3, samples: 1, seconds: 1.0, slice_s: 1, per_transaction_s: 10}}
budget: {{ram: 2GB, connections: 20}}
online:
  knobs:
    random_page_cost: {{min: 1, max: 8, step: 0.5}}
    work_mem: {{min: 1MB, max: 16MB}}
  strategy: {{name: nelder-mead, options: {{simplex_size: 3}}}}
  evaluations: 3
flow: {{kind: multi-pass, max_passes: 2, shift: {{outside: 2, monitor: 4}},
        local_minimum: {{enabled: false}}}}
"""


def test_live_flow_retunes_on_a_mix_shift_and_sigterm_restores_the_original(
        live_cluster: LocalCluster, caplog: pytest.LogCaptureFixture) -> None:
    """A multi-pass live run: the application's mix changes while the converged best is
    monitored, the mix detector starts pass 2 with a new reference, and a SIGTERM during
    pass 2 leaves the server with its original configuration."""
    dsn = live_cluster.dsn_for("shop")
    auto_conf = live_cluster.data_dir / "postgresql.auto.conf"
    original = auto_conf.read_text()
    names = ["random_page_cost", "work_mem"]
    before = {n: _show(dsn, n) for n in names}
    with psycopg.connect(dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    target = Target(dsn=dsn, catalog=catalog, controller=LocalController(live_cluster),
                    cluster=None, ram_bytes=None)
    config = parse_tuner_config(FLOW.format(dsn=dsn, data_dir=live_cluster.data_dir),
                                source="live-flow.yaml")
    traffic = [Traffic(dsn, {"lookup": 10, "order": 3}, seconds=90, rows=ROWS).start()]
    statements: list[int] = []
    tuner: Tuner | None = None

    def on_decision(text: str) -> None:
        assert tuner is not None and tuner.context is not None
        if "monitoring" in text and len(traffic) == 1:  # the application changes its mix
            traffic[0].stop()
            traffic.append(Traffic(dsn, {"lookup": 1, "order": 1, "report": 5}, seconds=90,
                                   rows=ROWS).start())
        if "statement mix shift" in text:
            reference = tuner.context.measurer.mix_reference
            statements.append(len(reference.shares) if reference else 0)

    def on_measured(record: PointRecord) -> None:
        if record.session.startswith("p2-"):  # pass 2 measured its first candidate
            assert tuner is not None and tuner.context is not None
            reference = tuner.context.measurer.mix_reference
            statements.append(len(reference.shares) if reference else 0)
            os.kill(os.getpid(), signal.SIGTERM)

    tuner = Tuner(config, client=connect(None), target=target, run_id="flow",
                  on_decision=on_decision, on_measured=on_measured)
    caplog.set_level(logging.INFO, logger="tuner_client")
    try:
        with pytest.raises(SystemExit):
            tuner.run()
    finally:
        for t in traffic:
            t.stop()
    shift = [d for d in tuner.state.decisions if "statement mix shift" in d]
    assert len(shift) == 1 and tuner.state.passes == 2, tuner.state.decisions
    # pass 1's reference knew the lookups and the orders; pass 2's learned the new mix
    assert statements == [2, 3]
    assert auto_conf.read_text() == original
    assert {n: _show(dsn, n) for n in names} == before
    # the log speaks live mode's unit, not queries per minute
    best = [r.getMessage() for r in caplog.records if r.getMessage().startswith("new best:")]
    assert best and all("x the original's speed" in m and "qpm" not in m for m in best)


def test_shipped_config_resolves_and_the_budget_counts_every_connection(
        pg_cluster: LocalCluster) -> None:
    config = load_tuner_config(Path(__file__).resolve().parent.parent / "configs"
                               / "shop-observe.yaml")
    with psycopg.connect(pg_cluster.dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    space = resolve_knob_space(config.online.knobs, catalog, kind="online")
    assert config.workload.kind == "observe" and config.offline.knobs == ()
    assert space.names == ["work_mem", "random_page_cost", "effective_cache_size", "jit"]
    assert config.database.dsn is not None and "dbname=shop" in config.database.dsn
    # without budget.connections, live mode charges work_mem to every allowed connection
    live = parse_tuner_config(LIVE, source="live.yaml")
    budget = make_budget_view(live, catalog, resolve_knob_space((), catalog, kind="offline"),
                              resolve_knob_space(live.online.knobs, catalog, kind="online"))
    max_connections = int(catalog["max_connections"].current() or 0)
    assert budget.budget.connections == worker_processes(catalog, max_connections)
    assert budget.budget.connections >= max_connections >= 100
