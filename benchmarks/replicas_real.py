"""Tuning on 1, 2 and 3 real replicas on this machine: wall-clock of one search.

Starts one PostgreSQL 15 cluster, loads TPC-H (``--scale``), clones it twice (stop, copy,
start: :func:`tuner_client.replicas.clone_cluster`); all three share this machine's two
cores (so replicas contend for CPU: the speed-up is bounded by the cores, not by the
replica count). Each repetition runs the same online search (PRO over ``random_page_cost``
and ``work_mem``, a fixed budget of paired evaluations, no final rounds) once with 1, 2
and 3 replicas, the order rotated every repetition, and records the wall-clock of the
search session, the evaluations per minute, and the wall-clock until the search first
measured a configuration whose paired ratio to the reference is at least 90 % of the best
ratio any run of that repetition found (the "best-known" here: the best the three runs
found, not a verified optimum). Every figure is given as the mean over repetitions with a
95 % t interval.

Run: ``flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.replicas_real [--quick]``
Writes benchmarks/results/replicas_real[.quick].json and .md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
from scipy import stats

from benchmarks.machine import cpu_model
from tuner_client.api.client import connect
from tuner_client.config import parse_tuner_config
from tuner_client.flows import Tuner
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.replicas import Replica, clone_cluster
from tuner_client.servers.controllers import LocalController
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.target import Target
from workloads.tpch.load import load_tpch

RESULTS = Path(__file__).parent / "results"

CONFIG = """\
name: replicas-bench
seed: {seed}
workload:
  tpch: {{scale: {scale}, mix: "3Q6,1Q13"}}
  statement_timeout_s: 60
measure: {{warmup_s: 0.5, samples: 1, seconds: {seconds}, queries: null}}
budget: {{os_reserved: 256MB, connections: auto, online: 256MB}}
offline:
  knobs: {{shared_buffers: {{min: 128MB, max: 128MB, step: 8MB}}}}
  evaluations: 1
online:
  knobs:
    random_page_cost: {{min: 0.5, max: 8, step: 0.5}}
    work_mem: {{min: 1MB, max: 16MB}}
  strategy: {{name: pro, options: {{simplex_size: 4}}}}
  evaluations: {evaluations}
flow: {{kind: one-pass}}
final: {{rounds: 0}}
"""


def _target(cluster: LocalCluster) -> Target:
    dsn = cluster.dsn_for("tpch")
    with psycopg.connect(dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    return Target(dsn=dsn, catalog=catalog, controller=LocalController(cluster), cluster=None,
                  ram_bytes=None)


def _one_run(clusters: list[LocalCluster], n: int, seed: int, args: argparse.Namespace,
             tag: str) -> dict[str, Any]:
    config = parse_tuner_config(CONFIG.format(seed=seed, scale=args.scale,
                                              seconds=args.seconds,
                                              evaluations=args.evaluations),
                                source="replicas_real")
    replicas = [Replica(f"replica-{i + 2}", _target(c)) for i, c in enumerate(clusters[1:n])]
    stamps: list[tuple[float, float]] = []  # (seconds since the run started, ratio)
    started = time.monotonic()

    def on_record(record: Any) -> None:
        if record.session == "p1-online" and record.ratio is not None:
            stamps.append((time.monotonic() - started, float(record.ratio)))

    with connect(None) as client:
        tuner = Tuner(config, client=client, target=_target(clusters[0]), run_id=tag,
                      replicas=replicas or None, on_record=on_record)
        tuner.run()
    online = [r for r in tuner.records if r.session == "p1-online"]
    return {"replicas": n, "seed": seed, "evaluations": len(online),
            "seconds": stamps[-1][0] if stamps else None, "stamps": stamps}


def _ci(values: list[float]) -> tuple[float, float, float]:
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, float("nan"), float("nan")
    half = stats.t.ppf(0.975, len(values) - 1) * statistics.stdev(values) / len(values) ** 0.5
    return mean, mean - half, mean + half


def _write(runs: list[dict[str, Any]], args: argparse.Namespace, load_before: tuple[float, ...],
           started: float) -> None:
    """The tables so far (written after every repetition: a cut-short run keeps them)."""
    rows: list[dict[str, Any]] = []
    for n in (1, 2, 3):
        mine = [r for r in runs if r["replicas"] == n]
        if not mine:
            continue
        secs = [r["seconds"] for r in mine]
        per_min = [60.0 * r["evaluations"] / r["seconds"] for r in mine]
        to90 = [r["to_90"] if r["to_90"] is not None else r["seconds"] for r in mine]
        rows.append({"replicas": n, "seconds": _ci(secs), "evals_per_min": _ci(per_min),
                     "to_90": _ci(to90), "runs": len(mine)})
    meta = {"command": "flock /tmp/harmony-bench.lock .venv/bin/python -m "
                       "benchmarks.replicas_real" + " ".join(["", *args.argv]),
            "cpu": cpu_model(), "cores": os.cpu_count(), "scale": args.scale,
            "evaluations": args.evaluations, "sample_seconds": args.seconds,
            "repetitions": len({r["repetition"] for r in runs}),
            "load_before": " ".join(f"{x:.1f}" for x in load_before),
            "load_after": " ".join(f"{x:.1f}" for x in os.getloadavg()),
            "wall_s": time.monotonic() - started}
    stem = "replicas_real" + (".quick" if args.quick else "")
    (RESULTS / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows,
                                                      "runs": runs}, indent=2))
    lines = ["# Tuning on 1, 2 and 3 real replicas sharing two cores", "",
             f"Command: `{meta['command']}`; {meta['cpu']}, {meta['cores']} cores shared by "
             f"all replicas (and by other work: load {meta['load_before']} before, "
             f"{meta['load_after']} after); TPC-H SF {args.scale}, mix 3Q6,1Q13; PRO over "
             f"random_page_cost and work_mem, {args.evaluations} paired evaluations of "
             f"{args.seconds:g}-s samples; {meta['repetitions']} repetitions, the order of the "
             f"replica counts rotated. Means with 95 % t intervals over repetitions.", "",
             "Wall-clock is from the run's start (prepare, the one-point offline session, "
             "the reference measured on every replica) to the last search evaluation; a run "
             "that never reached 90 % counts its whole wall-clock.", "",
             "| replicas | wall-clock to the last search evaluation, s | search evaluations / "
             "min | s to 90 % of the best ratio found |", "|---:|---|---|---|"]
    for row in rows:
        cells = [f"{m:.1f} ({lo:.1f}–{hi:.1f})" for m, lo, hi in
                 (row["seconds"], row["evals_per_min"], row["to_90"])]
        lines.append(f"| {row['replicas']} | " + " | ".join(cells) + " |")
    (RESULTS / f"{stem}.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 repetitions, 8 evaluations")
    parser.add_argument("--repetitions", type=int, default=None)
    parser.add_argument("--evaluations", type=int, default=None)
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--seconds", type=float, default=2.0, help="one sample's length")
    args = parser.parse_args(argv)
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    args.repetitions = args.repetitions or (2 if args.quick else 3)
    args.evaluations = args.evaluations or (8 if args.quick else 12)
    logging.basicConfig(level=logging.WARNING)
    load_before = os.getloadavg()
    started = time.monotonic()
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-replicas-", dir="/tmp"))
    primary = LocalCluster(state / "primary", sync_initdb=False)
    clones: list[LocalCluster] = []
    runs: list[dict[str, Any]] = []
    try:
        primary.start()
        with psycopg.connect(primary.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE tpch")
        load_tpch(primary.dsn_for("tpch"), args.scale, workdir=state / "data")
        clones = clone_cluster(primary, state, 2)
        clusters = [primary, *clones]
        for rep in range(args.repetitions):
            order = [1, 2, 3][rep % 3:] + [1, 2, 3][:rep % 3]
            got = [_one_run(clusters, n, seed=rep, args=args, tag=f"r{rep}n{n}")
                   for n in order]
            best = max(ratio for g in got for _, ratio in g["stamps"])
            for g in got:
                g["repetition"] = rep
                g["to_90"] = next((t for t, ratio in g["stamps"] if ratio >= 0.9 * best), None)
                print(f"rep {rep}: {g['replicas']} replica(s): {g['evaluations']} evaluations in "
                      f"{g['seconds']:.0f} s; 90 % of the best ratio ({best:.2f}) after "
                      f"{g['to_90']} s", flush=True)
            runs.extend(got)
            _write(runs, args, load_before, started)
    finally:
        for cluster in (*clones, primary):
            cluster.destroy()
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
