"""A short real one-pass tuning run: PostgreSQL + TPC-H SF 0.01 + a Harmony server (no mocks)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import psycopg
import pytest
from test_decision_records import assert_valid_summary
from tune_fixtures import TpchCluster, jit_tpch_cluster, tpch_cluster  # noqa: F401  (fixture)

from harmony_server.server import start_server
from tuner_client.api.client import connect
from tuner_client.config import parse_tuner_config
from tuner_client.flows import Tuner
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.phases.outputs import alter_system_sql, conf_fragment
from tuner_client.servers.controllers import LocalController
from tuner_client.servers.target import Target

CONFIG = """\
name: flowtest
seed: 4
workload:
  tpch: {scale: 0.01, mix: "2Q6,1Q13"}
  statement_timeout_s: 60
# the windows flow, paired blocks of samples (the default, auto, would measure these session
# knobs per transaction)
measure: {warmup_s: 0.3, samples: 3, aggregate: best, queries: 15, design: windows}
budget: {os_reserved: 256MB, connections: auto, online: 48MB}
offline:
  knobs: {shared_buffers: {min: 16MB, max: 64MB, step: 8MB}}
  evaluations: 2
online:
  knobs:
    work_mem: {min: 1MB, max: 32MB}
    maintenance_work_mem: {min: 1MB, max: 32MB}
    temp_buffers: {min: 1MB, max: 16MB}
    random_page_cost: {min: 0.5, max: 8, step: 0.5}
  strategy: {name: nelder-mead, options: {simplex_size: 5}}
  evaluations: 3
bme: {probes: 0}  # the plain offline search (probes are on by default)
flow: {kind: one-pass}
final: {rounds: 1, candidates: 2}
"""
MB = 2**20


def _settings(dsn: str, names: list[str]) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        return {n: conn.execute("SELECT current_setting(%s)", [n]).fetchone()[0]  # type: ignore[index]
                for n in names}


def test_one_pass_against_a_server(tpch_cluster: TpchCluster, tmp_path: Path) -> None:  # noqa: F811
    cluster, dsn = tpch_cluster.cluster, tpch_cluster.dsn
    names = ["shared_buffers", "work_mem", "maintenance_work_mem", "temp_buffers",
             "random_page_cost"]
    before = _settings(dsn, names)
    auto_conf = (cluster.data_dir / "postgresql.auto.conf").read_text()
    log_start = cluster.log_path.stat().st_size
    with psycopg.connect(dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    target = Target(dsn=dsn, catalog=catalog, controller=LocalController(cluster), cluster=None,
                    ram_bytes=None)
    config = parse_tuner_config(CONFIG, source="flowtest.yaml")
    out = tmp_path / "out"
    with start_server(port=0, state_dir=tmp_path / "server") as server:
        with connect(server.url) as client:
            tuner = Tuner(config, client=client, target=target, output_dir=out, run_id="t1")
            result = tuner.run()
            sessions = {s["name"] for s in client.list_sessions()}
    assert {"flowtest-t1-p1-offline", "flowtest-t1-p1-online"} <= sessions

    # the run measured 2 offline + 3 online points, each with three positive samples
    measured = [r for r in tuner.records if r.session.startswith("p1-")]
    assert [r.session for r in measured].count("p1-offline") == 2
    assert [r.session for r in measured].count("p1-online") == 3
    for r in measured:
        assert r.failure is None and len(r.samples) == 3 and min(s.qpm for s in r.samples) > 0
    assert result.work.passes == 1 and result.work.evaluations == 5
    assert result.best.throughput.default is not None and result.best.throughput.default > 0
    assert result.best.throughput.best is not None and result.best.throughput.best > 0

    # m counts the 3 streams and the 6 parallel workers they may start, x hash_mem_multiplier 2
    coef = tuner.budget.budget.work_mem_coefficient  # type: ignore[union-attr]
    assert coef == 18
    # no point breaking work_mem*18 + maintenance_work_mem + temp_buffers <= 48MB reached the server
    for r in measured:
        if r.session == "p1-online":
            used = sum(catalog[n].parse(r.in_force[n]) * (coef if n == "work_mem" else 1)
                       for n in ("work_mem", "maintenance_work_mem", "temp_buffers"))
            assert used <= 48 * MB, r.in_force
    log = cluster.log_path.read_text(errors="replace")[log_start:]
    work_mem_seen = [catalog["work_mem"].parse(v) for v in
                     re.findall(r'parameter "work_mem" changed to "(\d+[kM]B)"', log)]
    assert work_mem_seen, "the online session changed work_mem on the server"
    # 18*2 + 1 + 1 <= 48: nothing beyond the feasible box; 4MB is the server's default, put
    # back for the final default measurement and at the end (never applied by the search)
    assert any(v <= 2 * MB for v in work_mem_seen)
    assert all(v <= 2 * MB or v == 4 * MB for v in work_mem_seen)
    assert all(catalog["work_mem"].parse(r.in_force["work_mem"]) <= 2 * MB
               for r in measured if r.session == "p1-online")

    # final: the search's two best feasible configurations re-measured beside the default
    # (and PGTune's rules when the budget admits them), interleaved, two rounds at least
    finals = {r.session: r for r in tuner.records if r.session.startswith("final")}
    assert set(finals) - {"final-pgtune"} == {"final-default", "final-best", "final-candidate-2"}
    # the race's seconds buy rounds: one window a visit (final.visit_samples), where the
    # search's evaluations take measure.samples (3)
    assert all(len(r.samples) == 1 for r in tuner.records if r.session.startswith("final"))
    runner_up = {n: finals["final-candidate-2"].in_force[n] for n in result.best.original}
    search_best = {n: finals["final-best"].in_force[n] for n in result.best.original}
    assert runner_up != search_best
    # the offline points (default work_mem 4MB: 4*18 > 48) break the online budget as a whole,
    # so both candidates are online points inside it
    for settings in (search_best, runner_up):
        assert sum(catalog[n].parse(settings[n]) * (coef if n == "work_mem" else 1)
                   for n in ("work_mem", "maintenance_work_mem", "temp_buffers")) <= 48 * MB
    rounds = result.intervals.rounds
    # up to max_rounds, and on a close call (a lead the next rounds may settle) on past them
    # up to close_call_rounds, as designed (tuner_client/stats/racing.py; a loaded machine's
    # noise makes close calls: 12 rounds were seen)
    assert 2 <= len(rounds) <= config.final.close_call_rounds
    first_best = next(r for r in tuner.records if r.session == "final-best")
    assert rounds[0]["best"] == first_best.value
    decision = result.intervals.decision
    assert decision is not None and decision.rounds == len(rounds)
    if decision.winner is None:
        # no interval above 1: the tuner keeps the original and says so, with the interval
        assert result.best.settings == result.best.original
        assert result.intervals.improvement_ci is None
        assert any("keeping the original" in d for d in result.work.decisions)
    else:
        won = {"best": search_best, "candidate-2": runner_up}.get(decision.winner) or next(
            r.settings for r in tuner.records if r.session == "final-pgtune")
        assert result.best.settings == won
        low, high = result.intervals.improvement_ci  # type: ignore[misc]
        assert 0.0 < low <= decision.improvement <= high

    # outputs: ALTER SYSTEM statements and a postgresql.conf fragment for the best settings
    sql_text = (out / "alter_system.sql").read_text()
    assert "SELECT pg_reload_conf();" in sql_text
    changed = {k: v for k, v in result.best.settings.items() if v != result.best.original[k]}
    for name, value in changed.items():
        assert f"ALTER SYSTEM SET {name} = '{value}';" in sql_text
        assert f"{name} = '{value}'" in (out / "postgresql.conf.fragment").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["passes"] == 1 and len(summary["ab_rounds"]) == len(rounds)
    # every decision a record under the published schema (the final race's and the phases')
    assert {"design", "raced", "line"} <= assert_valid_summary(summary)
    assert summary["improvement_ci"] == (list(result.intervals.improvement_ci)
                                         if result.intervals.improvement_ci else None)
    assert len((out / "trials.jsonl").read_text().splitlines()) == len(tuner.records)

    # the server is left running with its original configuration
    assert cluster.is_running()
    assert _settings(dsn, names) == before
    assert (cluster.data_dir / "postgresql.auto.conf").read_text() == auto_conf


def test_output_statements_are_quoted() -> None:
    text = alter_system_sql({"shared_buffers": "256MB", "search_path": "a', b"},
                            {"shared_buffers"})
    assert "ALTER SYSTEM SET shared_buffers = '256MB';  -- needs a restart" in text
    assert "ALTER SYSTEM SET search_path = 'a'', b';" in text
    assert "restart PostgreSQL for shared_buffers" in text
    assert conf_fragment({"work_mem": "64MB"}).endswith("work_mem = '64MB'\n")


SLOW_CONFIG = """\
name: slowtest
seed: 2
workload:
  tpch: {scale: 0.01, mix: "2Q6,1Q13"}
  statement_timeout_s: 60
measure: {warmup_s: 0.3, samples: 3, queries: 9, estimator: concurrency, design: windows}
budget: {os_reserved: 256MB, connections: 3}
offline:
  knobs: {shared_buffers: {min: 128MB, max: 128MB, step: 8MB}}
  evaluations: 1
online:
  knobs:
    jit_above_cost: {min: 0, max: 10, step: 1}
    jit_optimize_above_cost: {min: 0, max: 10, step: 1}
    jit_inline_above_cost: {min: 0, max: 10, step: 1}
  strategy: {name: nelder-mead, options: {simplex_size: 4}}
  evaluations: 3
flow: {kind: one-pass}
# no PGTune baseline: it may be recommended now, and this test is about the searched JIT points
final: {rounds: 1, candidates: 2, baselines: []}
"""


def test_a_search_that_finds_nothing_better_keeps_the_original(
        jit_tpch_cluster: TpchCluster, tmp_path: Path) -> None:  # noqa: F811
    """Every point of this space JIT-compiles, optimises and inlines every query (costs <= 10):
    far slower than the original on SF 0.01. The final rounds show it, and the tuner's result
    is the original configuration, not the least bad candidate."""
    dsn = jit_tpch_cluster.dsn
    with psycopg.connect(dsn) as conn:
        if not conn.execute("SELECT pg_jit_available()").fetchone()[0]:  # type: ignore[index]
            pytest.skip("this PostgreSQL has no JIT provider")
        catalog = KnobCatalog.from_connection(conn)
    target = Target(dsn=dsn, catalog=catalog,
                    controller=LocalController(jit_tpch_cluster.cluster), cluster=None,
                    ram_bytes=None)
    config = parse_tuner_config(SLOW_CONFIG, source="slowtest.yaml")
    tuner = Tuner(config, client=connect(None), target=target, run_id="s1")
    result = tuner.run()
    finals = {r.session: r for r in tuner.records if r.session.startswith("final")}
    defaults = [r.value for r in tuner.records if r.session == "final-default"]
    assert len(defaults) >= 2 and all(v is not None for v in defaults)
    original = result.best.original
    searched = [r for r in tuner.records
                if r.session == "final-best" or r.session.startswith("final-candidate")]
    # every searched candidate forces JIT (the original, the search's start, is measured
    # only as the default, never again as a candidate)
    assert searched and all({n: r.in_force[n] for n in original} != original for r in searched)
    assert any("the search's best is the original configuration" in d
               for d in result.work.decisions)
    # every candidate that forces JIT lost to the original, measured side by side, round by
    # round: its ratio to the default is below 1 in every round it ran
    for row in result.intervals.rounds:
        for label in [k for k in row if k == "best" or k.startswith("candidate")]:
            assert row[label] is not None and row[label] < row["default"], result.intervals.rounds
    # the result is the original configuration, kept by the rule because nothing won
    assert result.best.settings == original
    assert any("keeping the original" in d for d in result.work.decisions), result.work.decisions
    decision = result.intervals.decision
    assert result.intervals.improvement_ci is None
    assert decision is not None and decision.improvement == 0.0
    assert result.best.throughput.best == result.best.throughput.default
    assert result.best.throughput.default == pytest.approx(sum(defaults) / len(defaults))  # type: ignore[arg-type]
    assert set(finals) == {"final-default", "final-best", "final-candidate-2"}
    assert _settings(dsn, ["jit_above_cost"]) == {"jit_above_cost": "100000"}


ROOM_CONFIG = """\
name: roomtest
seed: 2
workload:
  tpch: {scale: 0.01, mix: "2Q6,1Q13"}
  statement_timeout_s: 60
measure: {warmup_s: 0.3, samples: 2, queries: 10, design: windows}
budget: {ram: 256MB, os_reserved: 32MB, connections: 10, process_memory: 4MB}
offline:
  knobs: {shared_buffers: {min: 16MB, max: 64MB, step: 8MB}}
  evaluations: 2
  prior: {enabled: false}
online:
  knobs:
    work_mem: {min: 1MB, max: 32MB}
    maintenance_work_mem: {min: 1MB, max: 64MB}
  evaluations: 2
bme: {probes: 0}  # the plain offline search (probes are on by default)
flow: {kind: one-pass}
final: {rounds: 1, candidates: 1}
"""


def test_online_knobs_in_force_are_lowered_to_make_room_for_shared_buffers(
        tpch_cluster: TpchCluster) -> None:  # noqa: F811
    """256MB, 32MB for the OS, 10 processes x 4MB: 184MB for shared_buffers + W. PostgreSQL's
    defaults take W = 4MB x 20 + 64MB + 8MB = 152MB, which leaves 32MB, less than the offline
    session's start (64MB: the server's 128MB inside the searched range). work_mem is lowered
    to 48MB / 20 = 2457kB first (W = 120MB), so no offline point breaks the budget; the
    original configuration comes back at the end."""
    dsn = tpch_cluster.dsn
    names = ["shared_buffers", "work_mem", "maintenance_work_mem", "temp_buffers"]
    before = _settings(dsn, names)
    assert before == {"shared_buffers": "128MB", "work_mem": "4MB",
                      "maintenance_work_mem": "64MB", "temp_buffers": "8MB"}
    with psycopg.connect(dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    target = Target(dsn=dsn, catalog=catalog,
                    controller=LocalController(tpch_cluster.cluster), cluster=None,
                    ram_bytes=None)
    tuner = Tuner(parse_tuner_config(ROOM_CONFIG, source="roomtest.yaml"), client=connect(None),
                  target=target, run_id="r1")
    result = tuner.run()
    assert any("lowered to {'work_mem': '2457kB'} before the offline search" in d
               for d in result.work.decisions), result.work.decisions
    offline = [r for r in tuner.records if r.session.endswith("offline")]
    assert offline and all(r.failure is None and r.in_force["work_mem"] == "2457kB"
                           for r in offline), offline
    # every searched point, offline and online: S + work_mem*20 + mwm + temp_buffers <= 184MB
    for r in tuner.records:
        if r.session.endswith(("offline", "online")):
            used = (catalog["shared_buffers"].parse(r.in_force["shared_buffers"])
                    + 20 * catalog["work_mem"].parse(r.in_force["work_mem"])
                    + catalog["maintenance_work_mem"].parse(r.in_force["maintenance_work_mem"])
                    + catalog["temp_buffers"].parse(r.in_force["temp_buffers"]))
            assert used <= 184 * MB, r.in_force
    assert _settings(dsn, names) == before
