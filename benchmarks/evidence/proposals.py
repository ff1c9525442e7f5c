"""Knobs proposed from the workload's statistics against the knobs a broad screening clears.

For each workload (a TPC-H mix on the embedded cluster in a memory cgroup; pgbench TPC-B):

1. the workload runs for ``--observe`` seconds and :func:`tuner_client.plan.proposals.propose`
   names the knobs its statistics point at (reload-time knobs only: ``restarts=False``);
2. the real tuner (:class:`tuner_client.flows.Tuner`) screens a fixed broad set of reload-time
   knobs with their built-in ranges (Plackett–Burman, 2 replicates, short windows), one online
   evaluation, one final round: the ranking is ``summary["screening"]``;
3. the table: knob | proposed (symptom) | effect ratio ± se | cleared; and how many of the
   cleared knobs the proposal contains.

pg_stat_statements is preloaded on the cluster (as a user with statistics would have it), so
the rules that read statements (JIT time, long parallel-capable statements) can fire.

Each workload runs ``--repeats`` times, interleaved (every workload's first run, then every
workload's second), so the containment figure is a count over runs.

Run: ``python -m benchmarks.evidence proposals [--quick] [--repeats N] [--only KIND]``;
writes ``benchmarks/results/evidence_proposals[.quick].{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.evidence.common import RESULTS, load_average, machine, write_results
from benchmarks.evidence.endtoend import open_memory_bound
from benchmarks.evidence.proposals_report import markdown
from tuner_client.api.client import connect
from tuner_client.config import tuner_config_from_dict
from tuner_client.flows import Tuner
from tuner_client.plan.proposals import propose, proposed_knobs
from tuner_client.plan.workload_stats import WorkloadStats, observe_workload
from tuner_client.servers.host_memory import detect_ram_bytes
from tuner_client.servers.target import Target, open_target
from workloads.factory import make_workload

MB = 1024**2
SQL = Path(__file__).resolve().parent / "sql"
#: the broad set: reload-time knobs only, each with its built-in range (KNOWN_RANGES)
BROAD = ("work_mem", "hash_mem_multiplier", "random_page_cost", "effective_cache_size", "jit",
         "max_parallel_workers_per_gather", "max_wal_size", "checkpoint_timeout",
         "autovacuum_vacuum_scale_factor")
#: the workloads: (title, database, workload, budget, shared_buffers held)
WORKLOADS: dict[str, tuple[str, dict[str, Any], dict[str, Any], dict[str, Any], str]] = {
    "tpch": ("TPC-H SF 0.1 `2Q3,2Q6,2Q9,2Q13`, embedded cluster in a 320 MB memory cgroup",
             {"memory_limit": 320 * MB, "restart_timeout_s": 120},
             {"tpch": {"scale": 0.1, "mix": "2Q3,2Q6,2Q9,2Q13"}, "statement_timeout_s": 120},
             {"ram": "auto", "os_reserved": "32MB", "connections": "auto",
              "shared_buffers_fraction": 0.25, "work_mem_held": 1.0}, "64MB"),
    # a mix in a cgroup large enough that the budget leaves work_mem room to show an effect
    # (320 MB narrows it to 1-5 MB); its hashes stayed under 4MB x hash_mem_multiplier 2
    "tpch-spill": ("TPC-H SF 0.1 `2Q9,2Q13,2Q18`, embedded cluster in a 1.5 GB memory cgroup "
                   "(work_mem 1-82 MB after the budget; meant to spill at 4MB, it did not)",
                   {"memory_limit": 1536 * MB, "restart_timeout_s": 120},
                   {"tpch": {"scale": 0.1, "mix": "2Q9,2Q13,2Q18"}, "statement_timeout_s": 120},
                   {"ram": "auto", "os_reserved": "128MB", "connections": "auto",
                    "shared_buffers_fraction": 0.25, "work_mem_held": 1.0}, "128MB"),
    # the user's analytic SQL (a .sql file) over the TPC-H data, sorting and hashing
    # lineitem whole: spills at work_mem 4MB
    "sql-spill": ("analytic .sql over TPC-H SF 0.1 (benchmarks/evidence/sql/analytic_spill.sql, "
                  "4 clients), embedded cluster in a 1.5 GB memory cgroup",
                  {"memory_limit": 1536 * MB, "restart_timeout_s": 120},
                  {"scripts": {"files": [str(SQL / "analytic_spill.sql")], "clients": 4},
                   "statement_timeout_s": 120},
                  {"ram": "auto", "os_reserved": "128MB", "connections": "auto",
                   "shared_buffers_fraction": 0.25, "work_mem_held": 1.0}, "128MB"),
    "pgbench": ("pgbench TPC-B, scale 10, 4 clients, embedded cluster (no cgroup)",
                {"restart_timeout_s": 120}, {"pgbench": {"scale": 10, "clients": 4}},
                {"ram": "1GB", "os_reserved": "128MB", "connections": "auto"}, "128MB"),
}


def tuner_dict(kind: str, *, window_s: float, replicates: int) -> dict[str, Any]:
    """A one-pass run that is mostly its screening: shared_buffers held, 1 online evaluation."""
    _, database, workload, budget, shared = WORKLOADS[kind]
    return {
        "name": f"evidence-proposals-{kind}", "seed": 1,
        "database": database, "workload": workload,
        "measure": {"warmup_s": 1.0, "samples": 1, "seconds": window_s, "queries": None},
        "budget": budget,
        "offline": {"knobs": {"shared_buffers": {"min": shared, "max": shared, "step": "8MB"}},
                    "evaluations": 1, "prior": {"enabled": False}},
        "online": {"knobs": list(BROAD), "evaluations": 1},
        "screening": {"enabled": True, "design": "pb", "replicates": replicates, "samples": 1},
        "flow": {"kind": "one-pass"},
        # the final race is not what this measures: kept short
        "final": {"rounds": 1, "max_rounds": 2, "close_call_rounds": 2, "candidates": 1,
                  "baselines": []},
    }


def preload_statements(target: Target) -> None:
    """pg_stat_statements preloaded and created in the tuned database (one restart)."""
    assert target.cluster is not None
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    target.cluster.restart()
    with psycopg.connect(target.dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")


def one_workload(kind: str, *, repeat: int, window_s: float, replicates: int,
                 observe_s: float, state_dir: Path) -> dict[str, Any]:
    """One run of ``kind``: the proposal from ``observe_s`` s of the workload, then the broad
    screening on the same cluster (its data kept between repeats)."""
    config = tuner_dict(kind, window_s=window_s, replicates=replicates)
    cfg = tuner_config_from_dict(config, source="benchmarks/evidence/proposals.py")
    if kind == "sql-spill":  # the TPC-H data the SQL reads, loaded as the TPC-H mixes' is
        loader = tuner_config_from_dict({**config, "workload": WORKLOADS["tpch-spill"][2]})
        target = open_memory_bound(loader, state_dir / kind)
    elif cfg.database.memory_limit_bytes is not None:
        target = open_memory_bound(cfg, state_dir / kind)
    else:
        target = open_target(cfg, state_dir / kind)
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET ALL")
        if target.cluster is not None:
            target.cluster.restart()
    started = time.monotonic()
    load_before = load_average()
    try:
        preload_statements(target)
        driver = make_workload(cfg.workload, target.dsn, seed=cfg.seed)
        if kind == "pgbench":  # pgbench -i (load, index builds) before the observed window
            driver.start()
        # the load runs inside sample(), which observe_workload calls for the window
        stats = observe_workload(target.dsn, observe_s, driver)
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
    return {"kind": kind, "repeat": repeat, "config": config, "observe_s": observe_s,
            "observed_wall_s": observed_s, "ram_bytes": target.ram_bytes,
            "stats": stats_dict(stats),
            "proposals": [p.to_dict() for p in proposals], "proposed": online,
            "symptom": symptom, "effects": effects, "cleared": cleared,
            "contained": [k for k in cleared if k in online],
            "screening_decisions": [d for d in summary["decisions"]
                                    if d.startswith("screening")],
            "evaluations": summary["evaluations"], "load_average_before": load_before,
            "load_average": load_average(), "wall_s": time.monotonic() - started}


def stats_dict(stats: WorkloadStats) -> dict[str, Any]:
    """The statistics the proposal read, for the JSON record."""
    st = stats.statements
    return {"xact_commit": stats.xact_commit, "temp_files": stats.temp_files,
            "temp_bytes": stats.temp_bytes, "blks_read": stats.blks_read,
            "blks_hit": stats.blks_hit, "checkpoints_req": stats.checkpoints_req,
            "checkpoints_timed": stats.checkpoints_timed, "dead_tuples": stats.dead_tuples,
            "worst_table": stats.worst_table, "database_bytes": stats.database_bytes,
            "statements": (None if st is None else
                           {"calls": st.calls, "exec_ms": st.exec_ms, "jit_ms": st.jit_ms,
                            "top_mean_ms": st.top_mean_ms})}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.evidence proposals")
    parser.add_argument("--quick", action="store_true",
                        help="5 s windows and 2 replicates instead of 8 s and 3")
    parser.add_argument("--observe", type=float, default=40.0,
                        help="seconds of the workload the proposal reads (default 40)")
    parser.add_argument("--repeats", type=int, default=2, help="runs per workload (default 2)")
    parser.add_argument("--only", choices=tuple(WORKLOADS), action="append", default=None,
                        help="these workloads (repeatable); the others' runs are kept")
    parser.add_argument("--append", action="store_true",
                        help="with --only: keep these workloads' earlier runs, add more")
    parser.add_argument("--results", default=None,
                        help="results file name (default evidence_proposals[.quick])")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}"
                        / "evidence-proposals")
    args = parser.parse_args(argv)
    window_s, replicates = (5.0, 2) if args.quick else (8.0, 3)
    command = ("python -m benchmarks.evidence proposals" + (" --quick" if args.quick else "")
               + (f" --observe {args.observe:g}" if args.observe != 40.0 else "")
               + f" --repeats {args.repeats}"
               + "".join(f" --only {k}" for k in args.only or ())
               + (f" --results {args.results}" if args.results else "")
               + (" --append" if args.append else ""))
    data: dict[str, Any] = {"machine": machine(), "command": command, "quick": args.quick,
                            "observe_s": args.observe, "window_s": window_s,
                            "replicates": replicates, "broad": list(BROAD),
                            "titles": {k: w[0] for k, w in WORKLOADS.items()}, "runs": []}
    name = args.results or "evidence_proposals" + (".quick" if args.quick else "")
    previous = RESULTS / f"{name}.json"
    kinds = tuple(args.only or WORKLOADS)
    if args.only and previous.exists():  # these workloads again: the others' runs are kept
        kept = json.loads(previous.read_text())
        data["runs"] = [r for r in kept["runs"] if args.append or r["kind"] not in kinds]
        data["command"] = f"{kept['command']}; then {command}"
    done = {k: sum(r["kind"] == k for r in data["runs"]) for k in kinds}
    # interleaved: every workload's first run, then every workload's second, ...
    for repeat in range(args.repeats):
        for kind in kinds:
            data["runs"].append(one_workload(kind, repeat=done[kind] + repeat,
                                             window_s=window_s,
                                             replicates=replicates, observe_s=args.observe,
                                             state_dir=args.state_dir))
            data["runs"].sort(key=lambda r: (list(WORKLOADS).index(r["kind"]),
                                             r.get("repeat", 0)))
            write_results(name, data, markdown(data))
    return 0
