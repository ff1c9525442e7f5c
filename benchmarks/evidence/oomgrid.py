"""Which points the memory cgroup really kills: a grid of shared_buffers × work_mem run inside
the end-to-end setup's cgroup, each point's OOM kills and unreclaimable peak beside what the
memory budget predicts (the check for ``tuner_client/budget/formula.py``'s per-process model).

For each mix and each point (the other knobs at PostgreSQL's defaults) the cluster restarts
with that shared_buffers inside the cgroup, the mix runs ``--seconds``, and every 0.2 s the
cgroup's ``rss + shmem`` (memory.stat: what cannot be reclaimed without swap; page cache can)
is read. A point *fails* when the cgroup's OOM killer fired or a backend was terminated by
signal 9 during it. The budget's verdict for every point is computed afterwards from the
recorded settings (``verdicts``), so a changed model is checked against the same runs.

Run: ``python -m benchmarks.evidence oomgrid [--quick] [--memory-limit-mb 256]``; writes
``benchmarks/results/evidence_oomgrid[.quick].{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.evidence.common import (
    RESULTS,
    fmt,
    header,
    load_average,
    machine,
    write_results,
)
from benchmarks.evidence.endtoend import (
    MB,
    MIXES,
    cgroup_snapshot,
    oom_lines,
    open_memory_bound,
    tuner_dict,
)
from tuner_client.budget import MemoryBudget
from tuner_client.config import TunerConfig, tuner_config_from_dict
from tuner_client.config.defaults import DEFAULT_PROCESS_MEMORY
from tuner_client.config.units import parse_bytes
from tuner_client.servers.target import Target
from workloads.factory import make_workload

logger = logging.getLogger(__name__)

SHARED_BUFFERS = ("32MB", "64MB", "96MB", "128MB")
WORK_MEMS = ("4MB", "32MB")
STAT_KEYS = ("total_rss", "total_shmem")  # cgroup v1; v2 reads anon + shmem


class CgroupPeak(threading.Thread):
    """The peak of the cgroup's unreclaimable memory (rss + shmem), read every 0.2 s."""

    def __init__(self, cgroup: Path, period_s: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.cgroup, self.period_s = cgroup, period_s
        self.stop_event = threading.Event()
        self.peak = 0

    def read(self) -> int:
        try:
            text = (self.cgroup / "memory.stat").read_text()
        except OSError:
            return 0
        stat = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
        keys = STAT_KEYS if "total_rss" in stat else ("anon", "shmem")
        return sum(int(stat.get(k, 0)) for k in keys)

    def run(self) -> None:
        while not self.stop_event.wait(self.period_s):
            self.peak = max(self.peak, self.read())

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=10)


def config(mix: str, scale: float, limit: int) -> TunerConfig:
    return tuner_config_from_dict(tuner_dict("evidence-oomgrid", mix, scale=scale,
                                             memory_limit=limit, offline_evals=1,
                                             online_evals=1, queries=1, warmup_s=0, seed=1))


def ready(dsn: str, timeout_s: float = 120.0) -> psycopg.Connection[Any]:
    """A connection once the server accepts one (after an OOM kill it runs crash recovery)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return psycopg.connect(dsn, autocommit=True)
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def set_point(target: Target, shared_buffers: str, work_mem: str) -> dict[str, str]:
    """Restart with ``shared_buffers`` and reload ``work_mem``; the settings then in force."""
    with ready(target.dsn) as conn:
        for name, value in (("shared_buffers", shared_buffers), ("work_mem", work_mem)):
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name),
                                                                    sql.Literal(value)))
    assert target.cluster is not None
    target.cluster.restart()
    names = ["shared_buffers", "work_mem", "maintenance_work_mem", "temp_buffers",
             "hash_mem_multiplier", "max_parallel_workers_per_gather", "shared_memory_size"]
    with ready(target.dsn) as conn:
        return {n: str(row[0]) for n in names
                if (row := conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(n))).fetchone())}


def run_point(cfg: TunerConfig, target: Target, shared_buffers: str, work_mem: str,
              seconds: float) -> dict[str, Any]:
    in_force = set_point(target, shared_buffers, work_mem)
    before, lines_before = cgroup_snapshot(target), oom_lines(target)
    cg = target.cluster.cgroup_path() if target.cluster is not None else None
    assert cg is not None, "oomgrid needs the cluster in a memory cgroup"
    peak = CgroupPeak(cg)
    workload = make_workload(cfg.workload, target.dsn, seed=cfg.seed)
    workload.start()
    peak.start()
    try:
        got = workload.sample(seconds=seconds)
    finally:
        workload.stop()
        peak.stop()
    after = cgroup_snapshot(target)
    kills = (after.get("oom_kills") or 0) - (before.get("oom_kills") or 0)
    signal9 = oom_lines(target) - lines_before
    return {"shared_buffers": shared_buffers, "work_mem": work_mem, "in_force": in_force,
            "oom_kills": kills, "signal9_lines": signal9, "failed": kills > 0 or signal9 > 0,
            "peak_unreclaimable_bytes": peak.peak, "qpm": got.qpm, "completed": got.completed,
            "errors": got.errors, "load_average_end": load_average()}


def verdicts(rows: list[dict[str, Any]], budget: MemoryBudget) -> list[dict[str, Any]]:
    """For every measured point: the budget's slack in bytes (< 0: the budget refuses it),
    with work_mem counted as held once per process (``budget_slack_bytes``) and in the worst
    case, hash_mem_multiplier times (``worst_slack_bytes``)."""
    held = replace(budget, unit="B", units={}, work_mem_held=1.0)
    worst = replace(held, work_mem_held=None)
    out = []
    for row in rows:
        s = row["in_force"]
        point = {"shared_buffers": float(parse_bytes(s["shared_buffers"], what="sb")),
                 **{n: float(parse_bytes(s[n], what=n))
                    for n in ("work_mem", "maintenance_work_mem", "temp_buffers")}}
        out.append({**row, "budget_slack_bytes": held.slack(point),
                    "worst_slack_bytes": worst.slack(point)})
    return out


def budget_for(limit: int, connections: int) -> MemoryBudget:
    """The end-to-end setup's budget (32MB OS reserve, 12 streams + 8 parallel workers of
    4MB), without the 25 % fraction cap (this checks the per-process model)."""
    return MemoryBudget(ram_bytes=limit, os_reserved_bytes=32 * MB, connections=connections,
                        hash_mem_multiplier=2.0, process_memory_bytes=DEFAULT_PROCESS_MEMORY,
                        shared_buffers_fraction=1.0)


def markdown(data: dict[str, Any]) -> str:
    extra = (f"\nTPC-H SF {data['scale']} in a {data['memory_limit_bytes'] / MB:.0f} MB memory "
             f"cgroup (v1: rss + shmem is what cannot be reclaimed without swap); "
             f"{data['seconds']:g} s per point; other knobs at PostgreSQL's defaults "
             f"(maintenance_work_mem 64MB, temp_buffers 8MB, hash_mem_multiplier 2, 2 parallel "
             f"workers per gather). *Killed*: the cgroup's OOM killer fired or a backend ended "
             f"by signal 9 during the point. Budget slack: what the memory budget "
             f"(`tuner_client/budget/formula.py`: 32 MB reserve, {data['connections']} processes × "
             f"(4 MB + h × work_mem), maintenance_work_mem and temp_buffers once, no fraction "
             f"cap) leaves, with h = 1 (work_mem held once per process) and in the worst case "
             f"h = hash_mem_multiplier = 2; below 0 it refuses the point. The verdict is "
             f"h = 1's.\n")
    lines = [header("Points the memory cgroup kills, against the budget", data["command"],
                    data["machine"], extra),
             "| mix | shared_buffers | work_mem | shared_memory_size | killed | OOM kills | "
             "peak rss+shmem MB | qpm | slack h=1 MB | slack worst MB | verdict |",
             "|---|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    for row in data["rows"]:
        slack = row.get("budget_slack_bytes")
        verdict = ("–" if slack is None else
                   ("refused, runs" if slack < 0 and not row["failed"] else
                    "allowed, KILLED" if slack >= 0 and row["failed"] else "right"))
        lines.append(
            f"| {row['mix']} | {row['shared_buffers']} | {row['work_mem']} | "
            f"{row['in_force'].get('shared_memory_size')} | {'yes' if row['failed'] else 'no'} "
            f"| {row['oom_kills']} | {fmt(row['peak_unreclaimable_bytes'] / MB)} | "
            f"{fmt(row['qpm'])} | {fmt(None if slack is None else slack / MB)} | "
            f"{fmt(row['worst_slack_bytes'] / MB if 'worst_slack_bytes' in row else None)} | "
            f"{verdict} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one mix, 15 s per point")
    parser.add_argument("--scale", type=float, default=0.4)
    parser.add_argument("--memory-limit-mb", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--connections", type=int, default=20,
                        help="processes the budget counts (12 streams + 8 parallel workers)")
    parser.add_argument("--analyse-only", action="store_true",
                        help="recompute the verdicts of the committed results, measure nothing")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-e2e")
    args = parser.parse_args(argv)
    mixes = MIXES[:1] if args.quick else MIXES
    seconds = 15.0 if args.quick else args.seconds
    limit = args.memory_limit_mb * MB
    command = ("python -m benchmarks.evidence oomgrid"
               + (" --quick" if args.quick else f" --seconds {seconds:g}")
               + f" --memory-limit-mb {args.memory_limit_mb}")
    data: dict[str, Any] = {"machine": machine(), "command": command, "scale": args.scale,
                            "memory_limit_bytes": limit, "seconds": seconds,
                            "connections": args.connections, "rows": []}
    name = "evidence_oomgrid" + (".quick" if args.quick else "")
    if args.analyse_only:
        data = json.loads((RESULTS / f"{name}.json").read_text())
        data["rows"] = verdicts(data["rows"], budget_for(data["memory_limit_bytes"],
                                                         data["connections"]))
        write_results(name, data, markdown(data))
        return 0
    target = open_memory_bound(config(mixes[0], args.scale, limit), args.state_dir)
    budget = budget_for(limit, args.connections)
    try:
        for mix in mixes:
            cfg = config(mix, args.scale, limit)
            for sb in SHARED_BUFFERS:
                for wm in WORK_MEMS:
                    row = {"mix": mix, **run_point(cfg, target, sb, wm, seconds)}
                    logger.info("oomgrid %s sb %s wm %s: killed %s, peak %.0f MB, qpm %s", mix,
                                sb, wm, row["failed"], row["peak_unreclaimable_bytes"] / MB,
                                fmt(row["qpm"]))
                    data["rows"].append(row)
                    data["rows"] = verdicts(data["rows"], budget)
                    write_results(name, data, markdown(data))
    finally:
        with ready(target.dsn) as conn:
            conn.execute("ALTER SYSTEM RESET ALL")
        if target.cluster is not None:
            target.cluster.restart()
        target.close()
    data["load_average_end"] = load_average()
    write_results(name, data, markdown(data))
    return 0
