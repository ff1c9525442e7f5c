"""The memory budget: RAM detection and the constraint strings, with exact numbers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from harmony_base.errors import ConfigError, ConstraintError
from tuner_client.budget import (
    BudgetView,
    MemoryBudget,
    detect_ram_bytes,
    mem_total_bytes,
    worker_processes,
)
from tuner_client.config import parse_tuner_config, resolve_knob_space
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.servers.local_cluster import LocalCluster

MB = 2**20
GB = 2**30


def _fake_proc(tmp_path: Path, cgroup: str, meminfo_kb: int) -> tuple[Path, Path]:
    (tmp_path / "cgroup").write_text(cgroup)
    (tmp_path / "meminfo").write_text(f"MemTotal:       {meminfo_kb} kB\nMemFree: 1 kB\n")
    return tmp_path / "cgroup", tmp_path / "meminfo"


def test_ram_from_meminfo_and_cgroup_limits(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    # v1: memory:/a/b limited to 3GB at /a, unlimited at /a/b
    (root / "memory" / "a" / "b").mkdir(parents=True)
    (root / "memory" / "a" / "memory.limit_in_bytes").write_text(str(3 * GB))
    (root / "memory" / "a" / "b" / "memory.limit_in_bytes").write_text("9223372036854771712")
    cg, mi = _fake_proc(tmp_path, "4:memory:/a/b\n0::/\n", 8 * 1024 * 1024)
    assert mem_total_bytes(mi) == 8 * GB
    assert detect_ram_bytes(proc_self_cgroup=cg, cgroup_root=root, meminfo=mi) == 3 * GB
    # v2: 0::/svc with memory.max = 1GB; "max" above it means unlimited
    root2 = tmp_path / "sys2"
    (root2 / "svc").mkdir(parents=True)
    (root2 / "memory.max").write_text("max\n")
    (root2 / "svc" / "memory.max").write_text(str(GB))
    cg2, _ = _fake_proc(tmp_path, "0::/svc\n", 8 * 1024 * 1024)
    assert detect_ram_bytes(proc_self_cgroup=cg2, cgroup_root=root2, meminfo=mi) == GB
    # no limit anywhere: MemTotal
    cg3, _ = _fake_proc(tmp_path, "0::/\n", 4 * 1024 * 1024)
    assert detect_ram_bytes(proc_self_cgroup=cg3, cgroup_root=tmp_path / "none",
                            meminfo=mi) == 4 * GB
    # this machine: positive and at most MemTotal
    assert 0 < detect_ram_bytes() <= mem_total_bytes()


def test_study_budget_constraints_in_mb() -> None:
    # 4GB machine, 512MB for the OS, 20 connections, hash_mem_multiplier 2 (PG 15 default)
    budget = MemoryBudget(ram_bytes=4 * GB, os_reserved_bytes=512 * MB, connections=20)
    assert budget.work_mem_coefficient == 40
    assert budget.shared_buffers_max_bytes == 2 * GB
    assert budget.offline_constraints() == ["shared_buffers <= 2048"]
    # shared_buffers in force 1GB: 4096 - 1024 - 512 = 2560MB left
    assert budget.online_constraints(GB) == [
        "work_mem * 40 + maintenance_work_mem + temp_buffers <= 2560"
    ]
    point = {"work_mem": 50, "maintenance_work_mem": 256, "temp_buffers": 256}
    # 50*40 + 256 + 256 = 2512 <= 2560 -> 48MB of slack
    assert budget.slack(point, GB) == 48 * MB and budget.is_feasible(point, GB)
    point["work_mem"] = 52  # 2080 + 512 = 2592 > 2560
    assert budget.slack(point, GB) == -32 * MB and not budget.is_feasible(point, GB)
    assert budget.slack({"shared_buffers": 2048}) == 0
    assert not budget.is_feasible({"shared_buffers": 2049})


def test_hash_multiplier_fraction_units_and_fixed_knobs() -> None:
    budget = MemoryBudget(ram_bytes=8 * GB, os_reserved_bytes=GB, connections=7,
                          hash_mem_multiplier=1.5, shared_buffers_fraction=0.25,
                          units={"work_mem": "kB"})
    assert budget.work_mem_coefficient == 11  # ceil(7 * 1.5) = ceil(10.5)
    assert budget.offline_constraints() == ["shared_buffers <= 2048"]
    # mixed units: the constraint is written in kB (the finest), MB knobs scaled by 1024
    assert budget.online_constraints(2 * GB) == [
        "work_mem * 11 + maintenance_work_mem * 1024 + temp_buffers * 1024 <= 5242880"
    ]
    # temp_buffers not tuned: its value in force (8MB) comes off the right-hand side
    assert budget.online_constraints(
        2 * GB, tuned=["work_mem", "maintenance_work_mem"], fixed={"temp_buffers": 8 * MB}
    ) == ["work_mem * 11 + maintenance_work_mem * 1024 <= 5234688"]
    with pytest.raises(ConfigError, match="temp_buffers"):
        budget.online_constraints(2 * GB, tuned=["work_mem", "maintenance_work_mem"])
    # the tight online budget of docs/background.md §2: a fixed 64MB instead of RAM - S - O
    tight = MemoryBudget(ram_bytes=4 * GB, connections=4, hash_mem_multiplier=1,
                         online_limit_bytes=64 * MB)
    assert tight.online_constraints(GB) == [
        "work_mem * 4 + maintenance_work_mem + temp_buffers <= 64"
    ]


def test_bad_budgets_are_errors() -> None:
    with pytest.raises(ConfigError, match="os_reserved"):
        MemoryBudget(ram_bytes=GB, os_reserved_bytes=2 * GB)
    with pytest.raises(ConfigError, match="shared_buffers_fraction"):
        MemoryBudget(ram_bytes=GB, shared_buffers_fraction=1.5)
    with pytest.raises(ConfigError, match="unit of work_mem"):
        MemoryBudget(ram_bytes=GB, units={"work_mem": "mb"})
    budget = MemoryBudget(ram_bytes=GB, os_reserved_bytes=512 * MB)
    with pytest.raises(ConstraintError, match="online memory budget is empty"):
        budget.online_constraints(512 * MB)
    with pytest.raises(ConfigError, match="shared_buffers in force"):
        budget.slack({"work_mem": 4})


def test_auto_connections_count_the_parallel_workers(pg_cluster: LocalCluster) -> None:
    """Each parallel worker may use work_mem too: m = streams + the workers they can start."""
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        catalog = KnobCatalog.from_connection(conn)
        per_gather = int(conn.execute("SHOW max_parallel_workers_per_gather").fetchone()[0])
        cap = min(int(conn.execute("SHOW max_parallel_workers").fetchone()[0]),
                  int(conn.execute("SHOW max_worker_processes").fetchone()[0]))
    assert (per_gather, cap) == (2, 8)  # PostgreSQL 15's defaults
    assert worker_processes(catalog, 1) == 1 + 2
    assert worker_processes(catalog, 3) == 3 + 6
    assert worker_processes(catalog, 12) == 12 + 8  # the server-wide cap binds


def test_processes_and_operations_in_both_inequalities() -> None:
    # 1GB container, 64MB for the OS, 20 processes of 8MB each, plans with 3 sort/hash nodes
    budget = MemoryBudget(ram_bytes=GB, os_reserved_bytes=64 * MB, connections=20,
                          process_memory_bytes=8 * MB, operations=3, hash_mem_multiplier=2)
    assert budget.work_mem_coefficient == 120  # 20 processes x 3 nodes x 2
    assert budget.processes_bytes == 160 * MB
    # online: 1024 - 256 (S) - 64 (O) - 160 (n*P) = 544MB for the online knobs
    assert budget.online_constraints(256 * MB) == [
        "work_mem * 120 + maintenance_work_mem + temp_buffers <= 544"]
    # offline with nothing online: the fraction cap (512MB) binds before 1024-64-160 = 800MB
    assert budget.offline_constraints() == ["shared_buffers <= 512"]
    # with the online knobs in force (4MB*120 + 64MB + 8MB = 552MB) only 248MB are left
    online = {"work_mem": 4, "maintenance_work_mem": 64, "temp_buffers": 8}
    assert budget.online_use(online) == 552 * MB
    assert budget.offline_constraints(552 * MB) == ["shared_buffers <= 248"]
    # a point with both sides: shared_buffers 256MB breaks the whole budget by 8MB, whichever
    # inequality is asked
    assert budget.slack({"shared_buffers": 256, **online}) == -8 * MB
    assert budget.slack({"shared_buffers": 248, **online}) == 0
    assert budget.slack(online, 256 * MB) == -8 * MB
    # the original formula (docs/background.md §2) is the special case P = 0, one operation
    study = replace(budget, process_memory_bytes=0, operations=1)
    assert study.work_mem_coefficient == 40
    assert study.online_constraints(256 * MB) == [
        "work_mem * 40 + maintenance_work_mem + temp_buffers <= 704"]
    # nothing left for shared_buffers: a clear error naming what took the memory
    with pytest.raises(ConstraintError, match="no memory is left for shared_buffers.*20 "
                                              "processes × 8MB.*online knobs in force 960MB"):
        budget.offline_constraints(960 * MB)
    with pytest.raises(ConfigError, match="operations must be >= 1"):
        MemoryBudget(ram_bytes=GB, operations=0)
    with pytest.raises(ConfigError, match="20 processes × process_memory 64MB leave nothing"):
        MemoryBudget(ram_bytes=GB, connections=20, process_memory_bytes=64 * MB)


def test_work_mem_held_replaces_the_worst_case() -> None:
    """The end-to-end evidence setup (320 MB cgroup, 32 MB reserve, 12 streams + 8 parallel
    workers of 4 MB): with work_mem counted as held once per process (h = 1; measured at most
    0.71 at the peak, ``benchmarks/results/evidence_procmem.md``), PGTune's point fits
    exactly; the worst case (h = hash_mem_multiplier 2) refused it by 53 MB, as it refused
    PGTune's 64 MB in the 256 MB run. Points the 256 MB cgroup OOM-killed stay refused."""
    worst = MemoryBudget(ram_bytes=320 * MB, os_reserved_bytes=32 * MB, connections=20,
                         process_memory_bytes=4 * MB, hash_mem_multiplier=2.0,
                         shared_buffers_fraction=0.25, unit="kB")
    held = replace(worst, work_mem_held=1.0)
    assert (worst.work_mem_coefficient, held.work_mem_coefficient) == (40, 20)
    pgtune = {"shared_buffers": 80 * 1024, "work_mem": 3413, "maintenance_work_mem": 40 * 1024,
              "temp_buffers": 8 * 1024}
    # 320 - 32 - 80 - (20 x 3413kB + 48MB) = 93.3MB left; the 25 % cap (80MB) binds
    assert held.slack(pgtune) == 0
    assert held.shared_buffers_cap(held.online_use(pgtune)) == 80 * MB
    # 320 - 32 - 80 - (40 x 3413kB + 48MB) = 26.7MB for shared_buffers: 80MB is refused
    assert worst.slack(pgtune) == (160 * 1024 - 40 * 3413) * 1024 // 8192 * 8192 - 80 * MB
    assert not worst.is_feasible(pgtune)
    # PostgreSQL's defaults are refused in 320 MB by the cap and by the processes' memory
    default = {"shared_buffers": 128 * 1024, "work_mem": 4096,
               "maintenance_work_mem": 64 * 1024, "temp_buffers": 8 * 1024}
    assert replace(held, shared_buffers_fraction=1.0).slack(default) == -72 * MB
    # the points the 256 MB cgroup killed (benchmarks/results/evidence_oomgrid.md)
    small = replace(held, ram_bytes=256 * MB, shared_buffers_fraction=1.0)
    for sb_mb, wm_mb in ((96, 32), (128, 4)):
        assert not small.is_feasible({**default, "shared_buffers": sb_mb * 1024,
                                      "work_mem": wm_mb * 1024})
    with pytest.raises(ConfigError, match="work_mem_held must be a positive number"):
        MemoryBudget(ram_bytes=GB, work_mem_held=0)
    # the tuner config: unset is the worst case; a non-positive value names file and line
    assert parse_tuner_config("name: t\n").budget.work_mem_held is None
    assert parse_tuner_config("name: t\nbudget: {work_mem_held: 1}\n").budget.work_mem_held == 1
    with pytest.raises(ConfigError, match=r"t.yaml, line 2: budget.work_mem_held"):
        parse_tuner_config("name: t\nbudget: {work_mem_held: 0}\n", source="t.yaml")


def test_fit_online_lowers_work_mem_first_then_the_others(pg_cluster: LocalCluster) -> None:
    """Before the offline search the online knobs in force must leave room for shared_buffers:
    the tuned ones are lowered on the online grid, work_mem first, untuned ones never."""
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        catalog = KnobCatalog.from_connection(conn)
    cfg = parse_tuner_config("name: x\nonline: {knobs: {"
                             "work_mem: {min: 1MB, max: 64MB, step: 1MB}, "
                             "maintenance_work_mem: {min: 1MB, max: 256MB, step: 1MB}}}\n")
    online = resolve_knob_space(cfg.online.knobs, catalog, kind="online")
    offline = resolve_knob_space(cfg.offline.knobs, catalog, kind="offline")
    # 256MB container: 32MB OS, 10 processes x 4MB, work_mem counted 10 x 2 = 20 times
    budget = MemoryBudget(ram_bytes=256 * MB, os_reserved_bytes=32 * MB, connections=10,
                          process_memory_bytes=4 * MB)
    view = BudgetView(budget, catalog, offline, online)
    in_force = {"work_mem": "4MB", "maintenance_work_mem": "64MB", "temp_buffers": "8MB",
                "shared_buffers": "128MB"}
    # W = 4*20 + 64 + 8 = 152MB; 256 - 32 - 40 = 184MB: 32MB left for shared_buffers
    assert view.online_use(in_force) == 152 * MB
    assert view.shared_buffers_cap(in_force) == 32 * MB
    assert view.fit_online(in_force, 32 * MB) == {}
    # 64MB of shared_buffers: 120MB for W -> work_mem <= (120 - 72) / 20 = 2.4 -> 2MB
    assert view.fit_online(in_force, 64 * MB) == {"work_mem": "2MB"}
    # 120MB: 64MB for W; work_mem at its 1MB minimum still leaves 20 + 72 > 64, so
    # maintenance_work_mem goes down to 64 - 20 - 8 = 36MB
    assert view.fit_online(in_force, 120 * MB) == {"work_mem": "1MB",
                                                    "maintenance_work_mem": "36MB"}
    # 150MB: 34MB for W; temp_buffers (8MB) is not tuned: maintenance_work_mem 34 - 20 - 8
    assert view.fit_online(in_force, 150 * MB) == {"work_mem": "1MB",
                                                    "maintenance_work_mem": "6MB"}
    # 160MB: 24MB; the minima need 20 + 1 + 8 = 29MB: the error says what takes the memory
    with pytest.raises(ConstraintError, match=r"no room for shared_buffers 160MB.*10 processes "
                                              r"× 4MB leaves 24MB.*smallest take 29MB"):
        view.fit_online(in_force, 160 * MB)
