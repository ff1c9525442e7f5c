"""Knobs proposed from the workload's statistics against the knobs a broad screening clears.

For each workload (a TPC-H mix on the embedded cluster in a memory cgroup; pgbench TPC-B):

1. the workload runs for ``--observe`` seconds and :func:`tuner_client.knob_proposals.propose`
   names the knobs its statistics point at (reload-time knobs only: ``restarts=False``);
2. the real tuner (:class:`tuner_client.flows.Tuner`) screens a fixed broad set of reload-time
   knobs with their built-in ranges (Plackett–Burman, 2 replicates, short windows), one online
   evaluation, one final round: the ranking is ``summary["screening"]``;
3. the table: knob | proposed (symptom) | effect ratio ± se | cleared; and how many of the
   cleared knobs the proposal contains.

pg_stat_statements is preloaded on the cluster (as a user with statistics would have it), so
the rules that read statements (JIT time, long parallel-capable statements) can fire.

Run: ``flock /tmp/harmony-bench.lock python -m benchmarks.evidence proposals [--quick]``;
writes ``benchmarks/results/evidence_proposals[.quick].{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.evidence.common import RESULTS, header, load_average, machine, write_results
from benchmarks.evidence.endtoend import open_memory_bound
from tuner_client.client import connect
from tuner_client.config import tuner_config_from_dict
from tuner_client.flows import Tuner
from tuner_client.host_memory import detect_ram_bytes
from tuner_client.knob_proposals import observe_workload, propose, proposed_knobs
from tuner_client.measurer import Workload
from tuner_client.target import Target, make_workload, open_target

MB = 1024**2
#: the broad set: reload-time knobs only, each with its built-in range (KNOWN_RANGES)
BROAD = ("work_mem", "hash_mem_multiplier", "random_page_cost", "effective_cache_size", "jit",
         "max_parallel_workers_per_gather", "max_wal_size", "checkpoint_timeout",
         "autovacuum_vacuum_scale_factor")


def tuner_dict(kind: str, *, quick: bool, memory_limit: int) -> dict[str, Any]:
    """A one-pass run that is mostly its screening: shared_buffers held, 1 online evaluation."""
    if kind == "tpch":
        database: dict[str, Any] = {"memory_limit": memory_limit, "restart_timeout_s": 120}
        workload: dict[str, Any] = {"tpch": {"scale": 0.1, "mix": "2Q3,2Q6,2Q9,2Q13"},
                                    "statement_timeout_s": 120}
        budget: dict[str, Any] = {"ram": "auto", "os_reserved": "32MB", "connections": "auto",
                                  "shared_buffers_fraction": 0.25, "work_mem_held": 1.0}
        shared = "64MB"
    else:
        database = {"restart_timeout_s": 120}
        workload = {"pgbench": {"scale": 10, "clients": 4}}
        budget = {"ram": "1GB", "os_reserved": "128MB", "connections": "auto"}
        shared = "128MB"
    return {
        "name": f"evidence-proposals-{kind}", "seed": 1,
        "database": database, "workload": workload,
        "measure": {"warmup_s": 1.0, "samples": 1, "seconds": 5.0 if quick else 8.0,
                    "queries": None},
        "budget": budget,
        "offline": {"knobs": {"shared_buffers": {"min": shared, "max": shared, "step": "8MB"}},
                    "evaluations": 1, "prior": {"enabled": False}},
        "online": {"knobs": list(BROAD), "evaluations": 1},
        "screening": {"enabled": True, "design": "pb", "replicates": 2, "samples": 1},
        "flow": {"kind": "one-pass"},
        "final": {"rounds": 1, "max_rounds": 2, "candidates": 1},
    }


class Running:
    """A workload driver that generates load between start() and stop() (pgbench's driver
    only runs while it samples)."""

    def __init__(self, driver: Workload, seconds: float) -> None:
        self.driver, self.seconds = driver, seconds
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self.driver.sample, args=(self.seconds,),
                                       daemon=True)
        self.thread.start()

    def stop(self) -> None:
        if self.thread is not None:
            self.thread.join()
        self.driver.stop()


def preload_statements(target: Target) -> None:
    """pg_stat_statements preloaded and created in the tuned database (one restart)."""
    assert target.cluster is not None
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    target.cluster.restart()
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")


def one_workload(kind: str, *, quick: bool, observe_s: float, memory_limit: int,
                 state_dir: Path) -> dict[str, Any]:
    cfg = tuner_config_from_dict(tuner_dict(kind, quick=quick, memory_limit=memory_limit),
                                 source="benchmarks/evidence/proposals.py")
    if kind == "tpch":
        target = open_memory_bound(cfg, state_dir / kind)
    else:
        target = open_target(cfg, state_dir / kind)
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET ALL")
        if target.cluster is not None:
            target.cluster.restart()
    started = time.monotonic()
    try:
        preload_statements(target)
        driver = make_workload(cfg, target.dsn)
        if kind == "pgbench":  # pgbench -i (load, index builds) before the observed window
            driver.start()
        runner = Running(driver, observe_s) if kind == "pgbench" else driver
        stats = observe_workload(target.dsn, observe_s, runner)
        # as choose_online_knobs: the cgroup's memory, else the host's
        proposals = propose(stats, ram_bytes=target.ram_bytes or detect_ram_bytes(),
                            cpus=os.cpu_count(), restarts=False)
        online, _ = proposed_knobs(proposals, restarts=False)
        observed_s = time.monotonic() - started
        result = Tuner(cfg, target=target, client=connect(None)).run()
        summary = result.to_dict()
    finally:
        target.close()
    screening = summary.get("screening") or {}
    effects = screening.get("effects") or []
    cleared = [e["knob"] for e in effects if e["cleared"]]
    symptom = {k: p.symptom for p in proposals for k in p.knobs}
    return {"kind": kind, "config": tuner_dict(kind, quick=quick, memory_limit=memory_limit),
            "observe_s": observe_s, "observed_wall_s": observed_s,
            "ram_bytes": target.ram_bytes,
            "stats": {"xact_commit": stats.xact_commit, "temp_files": stats.temp_files,
                      "temp_bytes": stats.temp_bytes, "blks_read": stats.blks_read,
                      "blks_hit": stats.blks_hit, "checkpoints_req": stats.checkpoints_req,
                      "checkpoints_timed": stats.checkpoints_timed,
                      "dead_tuples": stats.dead_tuples, "worst_table": stats.worst_table,
                      "database_bytes": stats.database_bytes,
                      "statements": (None if stats.statements is None else
                                     {"calls": stats.statements.calls,
                                      "exec_ms": stats.statements.exec_ms,
                                      "jit_ms": stats.statements.jit_ms,
                                      "top_mean_ms": stats.statements.top_mean_ms})},
            "proposals": [p.to_dict() for p in proposals], "proposed": online,
            "symptom": symptom, "effects": effects, "cleared": cleared,
            "contained": [k for k in cleared if k in online],
            "screening_decisions": [d for d in summary["decisions"]
                                    if d.startswith("screening")],
            "evaluations": summary["evaluations"], "load_average": load_average(),
            "wall_s": time.monotonic() - started}


def table(run: dict[str, Any]) -> list[str]:
    effects = {e["knob"]: e for e in run["effects"]}
    lines = ["| knob | proposed? (symptom) | screening effect ratio ± se | cleared? |",
             "|---|---|---|---|"]
    for knob in BROAD:
        e = effects.get(knob)
        effect = f"{e['ratio']:.3f} ± {e['se']:.3f}" if e else "– (not screened)"
        sym = run["symptom"].get(knob)
        lines.append(f"| {knob} | {'yes (' + sym + ')' if sym else 'no'} | {effect} | "
                     f"{'**yes**' if e and e['cleared'] else 'no'} |")
    extra = [k for k in run["proposed"] if k not in BROAD]
    n, k = len(run["cleared"]), len(run["contained"])
    lines += ["", f"cleared knobs contained in the proposal: **{k} of {n}**"
              + (f" (missed: {', '.join(c for c in run['cleared'] if c not in run['proposed'])})"
                 if k < n else "")
              + f"; proposed {len(run['proposed'])} knobs"
              + (f" (also outside the broad set: {', '.join(extra)})" if extra else "")
              + f"; {run['evaluations']} evaluations, {run['wall_s']:.0f} s wall, load average "
              f"after {', '.join(str(x) for x in run['load_average'])}."]
    lines += ["", "Evidence of the proposals:", ""]
    lines += [f"- {p['symptom']}: {', '.join(p['knobs'])} — {p['evidence']}"
              for p in run["proposals"]] or ["- none"]
    return lines


def markdown(data: dict[str, Any]) -> str:
    lines = [header("Proposed knobs vs the knobs a broad screening clears", data["command"],
                    data["machine"],
                    f"Each workload runs {data['observe_s']:.0f} s for the proposal "
                    f"(statistics delta; pg_stat_statements preloaded; reload-time knobs only), "
                    f"then the tuner screens the broad set {', '.join(BROAD)} with their "
                    f"built-in ranges (PB, 2 replicates, {data['window_s']:.0f} s windows, the "
                    f"default measured between runs; shared_buffers held). A knob clears when "
                    f"|log ratio| ≥ z·se. One run per workload: a screening's verdict near the "
                    f"threshold can flip between runs.")]
    names = {"tpch": f"TPC-H SF 0.1 `2Q3,2Q6,2Q9,2Q13`, embedded cluster in a "
                     f"{data['memory_limit'] // MB} MB memory cgroup",
             "pgbench": "pgbench TPC-B, scale 10, 4 clients, embedded cluster (no cgroup)"}
    for run in data["runs"]:
        lines += ["", f"## {names[run['kind']]}", ""] + table(run)
    total = sum(len(r["cleared"]) for r in data["runs"])
    got = sum(len(r["contained"]) for r in data["runs"])
    lines += ["", f"Over both workloads: {got} of {total} cleared knobs were proposed."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.evidence proposals")
    parser.add_argument("--quick", action="store_true", help="5 s windows instead of 8 s")
    parser.add_argument("--observe", type=float, default=40.0,
                        help="seconds of the workload the proposal reads (default 40)")
    parser.add_argument("--memory-limit-mb", type=int, default=320)
    parser.add_argument("--only", choices=("tpch", "pgbench"), default=None)
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}"
                        / "evidence-proposals")
    args = parser.parse_args(argv)
    command = ("python -m benchmarks.evidence proposals" + (" --quick" if args.quick else "")
               + (f" --observe {args.observe:g}" if args.observe != 40.0 else "")
               + (f" --only {args.only}" if args.only else ""))
    data: dict[str, Any] = {"machine": machine(), "command": command, "quick": args.quick,
                            "observe_s": args.observe, "window_s": 5.0 if args.quick else 8.0,
                            "memory_limit": args.memory_limit_mb * MB, "broad": list(BROAD),
                            "runs": []}
    name = "evidence_proposals" + (".quick" if args.quick else "")
    previous = RESULTS / f"{name}.json"
    if args.only and previous.exists():  # one workload again: the other's run is kept
        kept = json.loads(previous.read_text())
        data["runs"] = [r for r in kept["runs"] if r["kind"] != args.only]
        data["command"] = f"{kept['command']}; then {command}"
    for kind in (args.only,) if args.only else ("tpch", "pgbench"):
        data["runs"].append(one_workload(kind, quick=args.quick, observe_s=args.observe,
                                         memory_limit=args.memory_limit_mb * MB,
                                         state_dir=args.state_dir))
        data["runs"].sort(key=lambda r: ("tpch", "pgbench").index(r["kind"]))
        write_results(name, data, markdown(data))
    return 0

