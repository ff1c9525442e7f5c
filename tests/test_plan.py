"""Before touching a server: ``harmony validate`` on tuner configs, ``harmony tune --plan``,
knobs proposed from the workload's statistics, and restarts only when asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from harmony.cli import main
from harmony_base.errors import ConfigError
from tuner_client.config import DEFAULT_ONLINE_KNOBS, tuner_config_from_dict
from tuner_client.plan.planner import make_plan
from tuner_client.plan.proposals import choose_online_knobs, propose, proposed_knobs
from tuner_client.plan.workload_stats import StatementStats, WorkloadStats, read_workload_stats
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.pg_binaries import server_version
from tuner_client.servers.target import Target, read_catalog


def _stats(**changes: Any) -> WorkloadStats:
    """A quiet workload: no symptom at all; each test turns one on."""
    base: dict[str, Any] = dict(
        database="db", stats_since=None, xact_commit=50_000, temp_files=0, temp_bytes=0,
        blks_read=10, blks_hit=1_000_000, checkpoints_timed=10, checkpoints_req=0,
        dead_tuples=0, live_tuples=100_000, worst_table=None, database_bytes=40 * 2**30,
        statements=None, settings={"max_parallel_workers_per_gather": "2", "work_mem": "4MB"})
    base.update(changes)
    return WorkloadStats(**base)


def _symptoms(stats: WorkloadStats, *, ram: int = 8 * 2**30, cpus: int = 16,
              restarts: bool = True) -> dict[str, tuple[str, ...]]:
    return {p.symptom: p.knobs for p in propose(stats, ram_bytes=ram, cpus=cpus,
                                                restarts=restarts)}


def test_a_quiet_workload_proposes_nothing() -> None:
    assert _symptoms(_stats()) == {}


def test_each_symptom_proposes_its_knobs_and_only_past_its_threshold() -> None:
    assert list(_symptoms(_stats(temp_files=3, temp_bytes=50 * 2**20)).values()) \
        == [("work_mem", "hash_mem_multiplier")]
    # forced checkpoints: 1 of 10 is the threshold share; 1 of 11 is under it
    assert list(_symptoms(_stats(checkpoints_timed=9, checkpoints_req=1)).values()) \
        == [("max_wal_size", "checkpoint_timeout")]
    assert _symptoms(_stats(checkpoints_timed=10, checkpoints_req=1)) == {}
    behind = _symptoms(_stats(worst_table=("public.t", 0.25, 20_000), dead_tuples=20_000))
    assert list(behind.values()) == [("autovacuum_vacuum_scale_factor",
                                      "autovacuum_vacuum_cost_limit", "autovacuum_naptime")]
    assert _symptoms(_stats(worst_table=("public.t", 0.05, 20_000))) == {}
    assert _symptoms(_stats(worst_table=("public.t", 0.9, 500))) == {}
    jit = StatementStats(count=5, calls=100, exec_ms=10_000.0, jit_ms=300.0,
                         temp_blks_written=0, top_mean_ms=10.0, top_query="select 1")
    assert list(_symptoms(_stats(statements=jit)).values()) == [("jit", "jit_above_cost")]
    # misses: a restart-time knob when restarts are allowed, else the planner's estimate
    missing = _stats(blks_read=50_000, blks_hit=950_000)
    assert list(_symptoms(missing).values()) == [("shared_buffers",)]
    assert list(_symptoms(missing, restarts=False).values()) == [("effective_cache_size",
                                                                  "random_page_cost")]
    # the data fits in memory: a 1 GB database on 8 GB, not a 40 GB one
    assert list(_symptoms(_stats(database_bytes=2**30)).values()) \
        == [("random_page_cost", "effective_cache_size")]


def test_parallel_workers_are_proposed_on_few_cores_for_long_statements() -> None:
    long = StatementStats(count=5, calls=100, exec_ms=50_000.0, jit_ms=0.0,
                          temp_blks_written=0, top_mean_ms=400.0, top_query="select sum(x)")
    assert list(_symptoms(_stats(statements=long), cpus=2).values()) \
        == [("max_parallel_workers_per_gather",)]
    assert _symptoms(_stats(statements=long), cpus=16) == {}
    off = _stats(statements=long, settings={"max_parallel_workers_per_gather": "0"})
    assert _symptoms(off, cpus=2) == {}


def test_proposed_knobs_split_by_restart_and_deduplicated() -> None:
    stats = _stats(blks_read=50_000, blks_hit=950_000, database_bytes=2**30, temp_bytes=10)
    proposals = propose(stats, ram_bytes=8 * 2**30, cpus=16, restarts=True)
    online, offline = proposed_knobs(proposals, restarts=True)
    assert offline == ["shared_buffers"]
    assert online == ["work_mem", "hash_mem_multiplier", "random_page_cost",
                      "effective_cache_size"]
    assert proposed_knobs(proposals, restarts=False)[1] == []


#: the plan and validate never build the controller: its data directory is not read
CONTROLLER = {"kind": "pg_ctl", "options": {"data_dir": "/nonexistent"}}


def _server_config(dsn: str, **extra: Any) -> dict[str, Any]:
    return {"name": "plan-test", "database": {"dsn": dsn, "controller": CONTROLLER},
            "workload": {"pgbench": {"clients": 2}},
            "measure": {"seconds": 5, "samples": 2, "warmup_s": 1},
            "online": {"knobs": {"work_mem": {"min": "1MB", "max": "64MB"}},
                       "evaluations": 4},
            **extra}


def test_a_server_named_by_a_dsn_is_restarted_only_when_asked() -> None:
    dsn = "host=127.0.0.1 port=1 dbname=x"
    assert tuner_config_from_dict(_server_config(dsn)).offline.knobs == ()
    asked = {"dsn": dsn, "controller": CONTROLLER, "allow_restarts": True}
    allowed = tuner_config_from_dict(_server_config(dsn, database=asked))
    assert [k.name for k in allowed.offline.knobs] == ["shared_buffers"]
    listed = tuner_config_from_dict(_server_config(
        dsn, offline={"knobs": {"shared_buffers": {"min": "32MB", "max": "256MB"}}}))
    assert [k.name for k in listed.offline.knobs] == ["shared_buffers"]
    # the embedded cluster is the tuner's own: the default restart-time knob applies
    embedded = tuner_config_from_dict({"name": "e", "workload": {"tpch": {"scale": 0.01}}})
    assert [k.name for k in embedded.offline.knobs] == ["shared_buffers"]


def _settings_and_auto_conf(dsn: str) -> tuple[list[tuple[str, str]], list[Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        settings = conn.execute("SELECT name, setting FROM pg_settings ORDER BY name").fetchall()
        auto = conn.execute("SELECT name, setting FROM pg_file_settings "
                            "WHERE sourcefile LIKE '%auto.conf' ORDER BY name").fetchall()
    return settings, auto


@pytest.mark.postgres
def test_the_plan_reads_a_server_changes_nothing_and_shows_what_the_workload_does(
        own_cluster: LocalCluster, tmp_path: Path) -> None:
    dsn = own_cluster.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (id int, pad text) WITH (autovacuum_enabled = off)")
        conn.execute("INSERT INTO t SELECT g, repeat('x', 50) FROM generate_series(1, 20000) g")
        conn.execute("UPDATE t SET pad = 'y'")  # 20,000 dead rows autovacuum may not remove
        conn.execute("SET work_mem = '64kB'")
        conn.execute("SELECT * FROM t ORDER BY pad, id").fetchall()  # a sort that spills
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT 1")
    before = _settings_and_auto_conf(dsn)
    config = tuner_config_from_dict(_server_config(dsn), source="plan.yaml")
    plan = make_plan(config)
    assert _settings_and_auto_conf(dsn) == before  # read-only: nothing set, nothing written

    symptoms = {p.symptom: p for p in plan.proposals}
    spill = symptoms["sorts and hashes spill to disk"]
    assert spill.knobs == ("work_mem", "hash_mem_multiplier")
    assert "temporary files" in spill.evidence
    vacuum = symptoms["dead tuples pile up faster than autovacuum removes them"]
    assert "public.t holds 20,000 dead rows" in vacuum.evidence
    # only online knobs listed on a DSN server: no restart anywhere in the plan
    assert plan.restarts == 0 and not plan.restarts_allowed
    assert [p.name for p in plan.phases] == ["online", "final"]
    assert [k.name for k in plan.knobs] == ["work_mem"] and not plan.knobs[0].restart
    # windows of 5 s: 4 evaluations of (2 samples + 1 reference) windows plus warm-ups
    online = plan.phases[0]
    assert online.windows == 12 and online.seconds == pytest.approx(12 * 5 + 4 * 1)
    held = dict(plan.held)
    assert "hash_mem_multiplier" in held and "auto" in held["hash_mem_multiplier"]
    assert "never changed" in held["synchronous_commit"]


@pytest.mark.postgres
def test_tune_plan_prints_and_writes_json(own_cluster: LocalCluster, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(_server_config(own_cluster.dsn)))
    assert main(["tune", "--plan", str(path), "--output", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    written = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert "work_mem" in printed and "restarts at most" in printed
    # each phase says how it is measured: work_mem is session-settable and pgbench has a
    # per-transaction driver, so the engine's default takes the most precise design
    assert printed.count("design: per-transaction, the most precise design valid here") == 1
    assert "design: when the candidates differ in the online knobs: per-transaction, the most " \
           "precise design valid here" in printed, printed
    assert written["restarts"] == 0
    assert [k["name"] for k in written["knobs"]] == ["work_mem"]


def test_validate_names_the_file_line_and_key_of_a_tuner_config_typo(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "typo.yaml"
    path.write_text("name: x\nworkload:\n  tpch: {scale: 0.01}\nbudgett:\n  ram: 1GB\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "budgett" in err and "line 4" in err


@pytest.mark.postgres
def test_validate_checks_knobs_against_the_catalog_and_the_budget(
        own_cluster: LocalCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(_server_config(own_cluster.dsn)))
    assert main(["validate", str(good)]) == 0
    version = server_version(own_cluster.bin_dir)  # the server's own version, not the host's
    assert f"ok — tuner config 'plan-test' checked against PostgreSQL {version} at " \
        in capsys.readouterr().out

    unknown = tmp_path / "unknown.yaml"
    cfg = _server_config(own_cluster.dsn)
    cfg["online"]["knobs"] = {"work_memory": {"min": "1MB", "max": "64MB"}}
    unknown.write_text(yaml.safe_dump(cfg))
    assert main(["validate", str(unknown)]) == 2
    assert "work_memory" in capsys.readouterr().err

    # 1 GB of RAM, 512 MB reserved, 20 connections: work_mem of at least 100 MB cannot fit
    tight = tmp_path / "tight.yaml"
    cfg = _server_config(own_cluster.dsn, budget={"ram": "1GB", "os_reserved": "512MB",
                                                  "connections": 20})
    cfg["online"]["knobs"] = {"work_mem": {"min": "100MB", "max": "200MB"}}
    tight.write_text(yaml.safe_dump(cfg))
    assert main(["validate", str(tight)]) == 2
    err = capsys.readouterr().err
    assert "online.knobs.work_mem" in err and "memory budget" in err


def test_validate_still_checks_session_definitions(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    root = Path(__file__).resolve().parent.parent
    assert main(["validate", str(root / "configs" / "synthetic-sphere-pro.yaml")]) == 0
    assert "session 'synthetic-sphere-pro', strategy pro" in capsys.readouterr().out


def test_a_config_error_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="allow_restarts"):
        tuner_config_from_dict({"name": "x", "database": {"dsn": "host=h", "controller": CONTROLLER,
                                                          "allow_restarts": "yes"}})


def test_online_knobs_auto_parses_with_the_defaults_until_the_run_chooses() -> None:
    cfg = _server_config("host=127.0.0.1 port=1 dbname=x")
    cfg["online"]["knobs"] = "auto"
    config = tuner_config_from_dict(cfg)
    assert config.online.auto
    assert [k.name for k in config.online.knobs] == list(DEFAULT_ONLINE_KNOBS)
    cfg["online"]["knobs"] = "automatic"
    with pytest.raises(ConfigError, match="online"):
        tuner_config_from_dict(cfg)


@pytest.mark.postgres
def test_online_knobs_auto_takes_the_knobs_a_spilling_workload_points_at(
        own_cluster: LocalCluster, tmp_path: Path) -> None:
    dsn = own_cluster.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE s AS SELECT g AS id, md5(g::text) AS pad "
                     "FROM generate_series(1, 30000) g")
        conn.execute("ALTER SYSTEM SET work_mem = '64kB'")
        conn.execute("SELECT pg_reload_conf()")
    script = tmp_path / "sort.sql"
    script.write_text("SELECT * FROM s ORDER BY pad LIMIT 5;\n")
    cfg = _server_config(dsn, workload={"scripts": {"files": [str(script)], "clients": 2}},
                         measure={"seconds": 2, "samples": 1, "warmup_s": 2})
    cfg["online"]["knobs"] = "auto"
    config = tuner_config_from_dict(cfg)
    target = Target(dsn=dsn, catalog=read_catalog(dsn), controller=None,  # type: ignore[arg-type]
                    cluster=None, ram_bytes=2**30)
    specs, proposals = choose_online_knobs(config, target)
    spill = [p for p in proposals if p.symptom == "sorts and hashes spill to disk"]
    assert spill and "temporary files" in spill[0].evidence
    # the numbers are the watched window's, and the evidence says so
    assert " s of the workload" in spill[0].evidence
    names = [s.name for s in specs]
    assert names[:2] == ["work_mem", "hash_mem_multiplier"]
    # only reload-time knobs with built-in ranges, each once
    assert len(names) == len(set(names)) and "shared_buffers" not in names


def test_a_spill_only_pg_stat_statements_saw_is_evidenced_by_its_own_numbers() -> None:
    # the database's counters were reset after the spill; pg_stat_statements still has it
    statements = StatementStats(count=3, calls=30, exec_ms=900.0, jit_ms=0.0,
                                temp_blks_written=1280, top_mean_ms=30.0, top_query="select 1")
    (spill,) = propose(_stats(statements=statements), ram_bytes=None, cpus=16, restarts=True)
    assert spill.knobs == ("work_mem", "hash_mem_multiplier")
    assert spill.evidence.startswith("1,280 temporary blocks written by the statements "
                                     "pg_stat_statements tracks")
    assert "0 temporary files" not in spill.evidence


@pytest.mark.postgres
def test_the_parallel_rule_reads_queries_not_copy(own_cluster: LocalCluster) -> None:
    # pgbench -i's COPY took the most time on a pgbench server and proposed parallel workers
    dsn = own_cluster.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    own_cluster.restart()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
        conn.execute("CREATE TABLE c (id int, pad text)")
        with conn.cursor().copy("COPY c FROM STDIN") as copy:
            for i in range(200_000):
                copy.write_row((i, "x" * 40))
        conn.execute("SELECT count(*) FROM c WHERE id < 10").fetchall()
        conn.read_only = True
        stats = read_workload_stats(conn)
    assert stats.statements is not None
    assert stats.statements.top_query.lower().startswith("select count(*) from c")
