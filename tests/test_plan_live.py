"""``harmony tune --plan`` beyond the knobs: live mode's plan (guardrails, restarts, what
blocks the run), the memory budget's arithmetic behind a narrowed work_mem, and a time
estimate for windows of a number of queries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from harmony.cli import main
from tuner_client.budget.formula import MemoryBudget
from tuner_client.config import load_tuner_config, tuner_config_from_dict
from tuner_client.plan.planner import make_plan
from tuner_client.servers.local_cluster import LocalCluster

MB = 2**20
ROOT = Path(__file__).resolve().parent.parent
#: the plan never builds the controller: its data directory is not read
CONTROLLER = {"kind": "pg_ctl", "options": {"data_dir": "/nonexistent"}}


def _settings(dsn: str) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT name, setting FROM pg_settings ORDER BY name").fetchall()


def test_the_budget_states_its_work_mem_arithmetic() -> None:
    # 320 MB cgroup: 320 - 64 shared_buffers - 32 OS - 16 x 4 MB processes - 64 maintenance
    # - 8 temp_buffers = 88 MB for 16 connections x 1 operation x 1.0 held = 5.5 MB each
    budget = MemoryBudget(ram_bytes=320 * MB, os_reserved_bytes=32 * MB, connections=16,
                          process_memory_bytes=4 * MB, work_mem_held=1.0)
    text = budget.explain_work_mem(64 * MB, {"maintenance_work_mem": 64 * MB,
                                             "temp_buffers": 8 * MB})
    assert text.startswith("work_mem <= (RAM 320 MB - shared_buffers 64 MB - OS reserve 32 MB "
                           "- 16 processes x 4 MB - maintenance_work_mem 64 MB - temp_buffers "
                           "8 MB) / (16 connections x 1 sort/hash operation(s) x 1 work_mem "
                           "held)")
    assert text.endswith("= 88 MB / 16 = 5.5 MB")
    # the same number as the constraint the session is given
    assert budget.online_constraints(64 * MB, tuned=["work_mem"],
                                     fixed={"maintenance_work_mem": 64 * MB,
                                            "temp_buffers": 8 * MB}) == ["work_mem * 16 <= 88"]


@pytest.mark.postgres
def test_a_small_memory_cgroup_narrows_work_mem_and_the_plan_says_so() -> None:
    config = tuner_config_from_dict({
        "name": "small-cgroup", "database": {"memory_limit": "320MB"},
        "workload": {"tpch": {"scale": 0.01}},
        "budget": {"os_reserved": "32MB", "connections": 16, "process_memory": "4MB",
                   "work_mem_held": 1.0},
        "offline": {"knobs": {"shared_buffers": {"min": "64MB", "max": "128MB",
                                                 "step": "8MB"}}},
        "online": {"knobs": {"work_mem": {"min": "1MB", "max": "200MB", "step": "1MB"}}},
    }, source="small.yaml")
    plan = make_plan(config)
    assert plan.budget.startswith("RAM 320 MB, OS reserve 32 MB, 16 connections")
    work_mem = next(k for k in plan.knobs if k.name == "work_mem")
    assert work_mem.configured == "1MB .. 200MB"
    assert work_mem.after_budget == "1MB .. 5MB"  # 88 MB / 16 = 5.5 MB, whole MB below it
    # the arithmetic, with the offline range's smallest shared_buffers (the widest range)
    assert plan.budget_detail == [
        "work_mem <= (RAM 320 MB - shared_buffers 64 MB - OS reserve 32 MB - 16 processes x "
        "4 MB - maintenance_work_mem 64 MB - temp_buffers 8 MB) / (16 connections x 1 "
        "sort/hash operation(s) x 1 work_mem held) = 88 MB / 16 = 5.5 MB (with the offline "
        "range's smallest shared_buffers; a larger one leaves less)"]


def _live_config(dsn: str, **observe: Any) -> dict[str, Any]:
    return {"name": "live", "database": {"dsn": dsn, "controller": CONTROLLER},
            "workload": {"observe": {"guard": {"latency_margin": 0.5, "error_margin": 0.02,
                                               "memory_fraction": 0.8}, **observe}},
            "measure": {"seconds": 10, "samples": 2, "warmup_s": 2},
            "budget": {"ram": "2GB", "os_reserved": "512MB", "connections": 20},
            "online": {"knobs": {"work_mem": {"min": "1MB", "max": "64MB"}},
                       "evaluations": 6}}


@pytest.mark.postgres
def test_the_plan_of_a_live_mode_config(own_cluster: LocalCluster, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    dsn = own_cluster.dsn
    before = _settings(dsn)
    plan = make_plan(tuner_config_from_dict(_live_config(dsn), source="live.yaml"))
    assert _settings(dsn) == before  # read-only
    live = plan.live
    assert live is not None
    assert "the tuner drives no load" in live.traffic
    assert live.guardrails[0].startswith("the statements of a running window get 1.5x the "
                                         "original's latency")
    assert "2 points (per 100 transactions)" in live.guardrails[1]
    assert "80% of the 1536MB the budget gives PostgreSQL" in live.guardrails[2]
    # no restart unless observe.allow_restarts, and the plan says how to allow them
    assert plan.restarts == 0 and live.restarts.startswith("none: reload-time knobs only")
    assert "workload.observe.allow_restarts" in dict(plan.held)[
        "restart-time knobs (shared_buffers, …)"]
    # 6 evaluations of (2 samples + the original) windows of 10 s, each after 2 s warm-up
    online = next(p for p in plan.phases if p.name == "online")
    assert online.windows == 18 and online.seconds == pytest.approx(18 * 10 + 6 * 2)
    # the test cluster does not preload pg_stat_statements: live mode cannot run, and says why
    assert live.blocker is not None and "shared_preload_libraries" in live.blocker

    allowed = make_plan(tuner_config_from_dict(_live_config(dsn, allow_restarts=True)))
    assert allowed.live is not None and allowed.live.restarts.startswith("allowed")
    assert allowed.restarts_allowed and allowed.restarts > 0
    assert [k.name for k in allowed.knobs if k.restart] == ["shared_buffers"]

    path = tmp_path / "live.yaml"
    path.write_text(yaml.safe_dump(_live_config(dsn)))
    assert main(["tune", "--plan", str(path), "--output", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "live mode (workload.observe):" in printed and "CANNOT RUN YET" in printed
    written = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert len(written["live"]["guardrails"]) == 3 and written["restarts"] == 0


@pytest.mark.postgres
@pytest.mark.slow
def test_the_demo_plan_times_a_window_of_queries() -> None:
    config = load_tuner_config(ROOT / "configs" / "tpch-demo.yaml")
    assert config.measure.seconds is None and config.measure.queries == 60
    untimed = make_plan(config)
    assert untimed.window_s is None and untimed.seconds is None
    plan = make_plan(config, time_window=True)
    assert plan.window_s is not None and 0 < plan.window_s < 120
    assert "one window of TPC-H SF 0.01 `2Q1,2Q6,1Q13` timed" in plan.window_basis
    phases = {p.name: p for p in plan.phases}
    # windows and warm-ups; a phase with restarts also counts the timed restart's length
    online = phases["online"]
    assert online.seconds == pytest.approx(online.windows * plan.window_s
                                           + online.evaluations * config.measure.warmup_s)
    offline = phases["offline"]
    # 3 evaluations (candidate and reference each) plus one restart per BME probe (on by
    # default), each probe settling up to bme.settle_s
    assert config.bme.probes == 4
    assert offline.restarts == 6 + 4 and offline.seconds is not None
    assert offline.seconds > offline.windows * plan.window_s + 4 * config.bme.settle_s
    assert plan.seconds == pytest.approx(sum(p.seconds or 0 for p in plan.phases))
    # the demo's restart part (shared_buffers) races on a budget of its own
    assert "the restart part by duet (" in phases["final"].design, phases["final"].design
    assert "in 80 s (final.restart_seconds)" in phases["final"].design, phases["final"].design
