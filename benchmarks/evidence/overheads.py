"""Overheads a skeptical engineer asks about: server round trips, constraint checks, tuner CPU.

* server round trips/s: ``python -m harmony_server`` as its own process, one keep-alive
  connection, sequential fetch+report pairs (the code of ``benchmarks.server_roundtrip``);
* constraint cost: compiling the PostgreSQL online budget with isl (session launch), and the
  per-point feasibility check the constraint plugin runs on every fetch;
* tuner CPU while measuring: the tuner process (measurer + TPC-H driver threads) against the
  PostgreSQL processes over one measurement (warm-up + 3 samples) on a tiny cluster (SF 0.01,
  the highest query rate, so the worst case for the driver).

Run: ``python -m benchmarks.evidence overheads [--quick]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.evidence.common import fmt, header, machine, write_results
from harmony_base.space import IntParam, RealParam, Space
from harmony_core.definition import PluginSpec, SessionDefinition
from harmony_core.session import SessionCore

logger = logging.getLogger(__name__)

ONLINE = Space((
    IntParam("work_mem", 1, 200, unit="MB"),
    IntParam("maintenance_work_mem", 1, 1024, unit="MB"),
    IntParam("temp_buffers", 1, 1024, unit="MB"),
    IntParam("effective_cache_size", 128, 2048, step=8, unit="MB"),
    RealParam("random_page_cost", 0.1, 30.0, 0.1),
))
BUDGET = "work_mem * 40 + maintenance_work_mem + temp_buffers <= 1536"


def server_roundtrips(pairs: int) -> dict[str, Any]:
    from benchmarks.server_roundtrip import ServerProcess, one_connection

    with tempfile.TemporaryDirectory(prefix="harmony-evidence-") as tmp:
        server = ServerProcess(Path(tmp) / "state")
        try:
            got = one_connection(server, pairs, warmup=100)
        finally:
            server.stop()
    return {"pairs": pairs, "pairs_per_second": got["pairs_per_second"],
            "p50_ms": got["pair"]["p50_ms"], "p99_ms": got["pair"]["p99_ms"],
            "cpu_ms_per_pair": got["cpu_ms_per_pair"]}


def constraint_cost(points: int) -> dict[str, Any]:
    """Session launch with the constraint plugin, and per-point checks (feasible or not)."""
    launches = []
    core = None
    for _ in range(5):
        t0 = time.perf_counter()
        core = SessionCore(SessionDefinition(
            name="c", space=ONLINE, strategy="nelder-mead",
            plugins=(PluginSpec("constraint", {"constraints": [BUDGET]}),)))
        launches.append(time.perf_counter() - t0)
    assert core is not None and core.region is not None
    region = core.region
    plugin = core.plugins[0]
    rng = np.random.default_rng(1)
    pts = [core.space.random_point(rng) for _ in range(points)]
    t0, c0 = time.perf_counter(), time.process_time()
    feasible = sum(1 for p in pts if region.contains(p))
    contains_s = (time.perf_counter() - t0) / points
    contains_cpu = (time.process_time() - c0) / points
    from plugins.base import PluginTrial

    infeasible = [p for p in pts if not region.contains(p)][:max(20, points // 20)]
    trials = [PluginTrial(candidate=i, point=p, client="c") for i, p in enumerate(infeasible)]
    c0 = time.process_time()
    for t in trials:
        plugin.generate(t)
    reject_cpu = (time.process_time() - c0) / len(trials)
    return {"launch_ms_median": statistics.median(launches) * 1e3, "points": points,
            "feasible_fraction": feasible / points, "contains_us": contains_s * 1e6,
            "contains_cpu_us": contains_cpu * 1e6, "rejected_points_timed": len(trials),
            "reject_with_projection_hint_cpu_ms": reject_cpu * 1e3}


def _cluster_cpu_s(data_dir: Path) -> float:
    """User+system CPU seconds of the postmaster and its live children."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ppid = int(fields[1])
        if int(entry.name) == pid or ppid == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def tuner_cpu(state_dir: Path, mix: str) -> dict[str, Any]:
    """One measurement (warm-up + 3 samples): tuner-process CPU vs PostgreSQL CPU."""
    from benchmarks.evidence.flowrun import small_config
    from tuner_client.config import tuner_config_from_dict
    from tuner_client.measurer import Measurer, ServerAccess
    from tuner_client.servers.target import open_target
    from workloads.factory import make_workload

    cfg = tuner_config_from_dict(small_config("evidence-overheads", flow="one-pass", mix=mix,
                                              scale=0.01, queries=60, warmup_s=2.0))
    target = open_target(cfg, state_dir)
    try:
        assert target.cluster is not None
        measurer = Measurer(ServerAccess(target.dsn, target.catalog, target.controller),
                            make_workload(cfg.workload, target.dsn, seed=cfg.seed), cfg.measure)
        measurer.in_force = measurer.current_settings(["work_mem"])
        measurer.start()
        time.sleep(1.0)
        pg0, me0, wall0 = (_cluster_cpu_s(target.cluster.data_dir), time.process_time(),
                           time.monotonic())
        record = measurer.measure("overheads", {}, {"work_mem": "8MB"})
        pg1, me1, wall1 = (_cluster_cpu_s(target.cluster.data_dir), time.process_time(),
                           time.monotonic())
        measurer.restore({"work_mem": measurer.in_force.get("work_mem", "4MB")})
        measurer.close()
    finally:
        target.close()
    wall = wall1 - wall0
    completed = sum(s.completed for s in record.samples)
    return {"mix": mix, "scale": 0.01, "wall_s": wall, "tuner_cpu_s": me1 - me0,
            "postgres_cpu_s": pg1 - pg0, "tuner_cores": (me1 - me0) / wall,
            "postgres_cores": (pg1 - pg0) / wall, "queries_sampled": completed,
            "qpm": record.value, "tuner_cpu_ms_per_query": (me1 - me0) * 1e3 / max(completed, 1)}


def markdown(data: dict[str, Any]) -> str:
    cmd = "python -m benchmarks.evidence overheads" + (" --quick" if data["quick"] else "")
    lines = [header("Overheads", cmd, data["machine"])]
    s = data.get("server")
    if s:
        lines += ["## Server round trips (one keep-alive connection, sequential)\n",
                  "| pairs | pairs/s | p50 ms | p99 ms | server CPU ms/pair | client CPU ms/pair | "
                  "CPU-bound pairs/s (1 / CPU per pair) |",
                  "|---:|---:|---:|---:|---:|---:|---:|",
                  f"| {s['pairs']} | {s['pairs_per_second']:.0f} | {s['p50_ms']:.2f} | "
                  f"{s['p99_ms']:.2f} | {s['cpu_ms_per_pair']['server']:.3f} | "
                  f"{s['cpu_ms_per_pair']['client']:.3f} | "
                  f"{1e3 / (s['cpu_ms_per_pair']['server'] + s['cpu_ms_per_pair']['client']):.0f}"
                  f" |", ""]
    c = data.get("constraint")
    if c:
        lines += ["## Constraint plugin (5 online knobs, `" + BUDGET + "`)\n",
                  "| session launch (isl narrowing) ms | points | feasible | contains µs/point "
                  "(wall) | contains CPU µs/point | rejecting an infeasible point with the "
                  "projection hint, CPU ms |",
                  "|---:|---:|---:|---:|---:|---:|",
                  f"| {c['launch_ms_median']:.1f} | {c['points']} | "
                  f"{c['feasible_fraction']:.0%} | {c['contains_us']:.1f} | "
                  f"{c['contains_cpu_us']:.1f} | {c['reject_with_projection_hint_cpu_ms']:.1f} "
                  f"(over {c['rejected_points_timed']} points) |", ""]
    t = data.get("tuner_cpu")
    if t:
        lines += ["## Tuner CPU while measuring (warm-up + 3 samples of 60 queries)\n",
                  "| mix | scale | wall s | queries | tuner process CPU s | cores | "
                  "PostgreSQL CPU s | cores | tuner ms/query |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
                  f"| {t['mix']} | {t['scale']} | {t['wall_s']:.1f} | {t['queries_sampled']} | "
                  f"{t['tuner_cpu_s']:.2f} | {t['tuner_cores']:.3f} | {t['postgres_cpu_s']:.2f} | "
                  f"{t['postgres_cores']:.3f} | {fmt(t['tuner_cpu_ms_per_query'])} |", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer round trips and points")
    parser.add_argument("--no-postgres", action="store_true", help="skip the tuner CPU part")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-tiny")
    args = parser.parse_args(argv)
    data: dict[str, Any] = {"machine": machine(), "quick": args.quick}
    data["server"] = server_roundtrips(500 if args.quick else 3000)
    data["constraint"] = constraint_cost(2000 if args.quick else 20000)
    if not args.no_postgres:
        data["tuner_cpu"] = tuner_cpu(args.state_dir, "2Q1,2Q6,2Q13")
    write_results("evidence_overheads" + (".quick" if args.quick else ""), data, markdown(data))
    return 0
