"""Managed mode against the workload's own client (issue 52, Evidence): a role with the rights a
managed service gives (no superuser, ``pg_read_all_settings`` and ``pg_monitor`` granted, so
``ALTER SYSTEM`` is refused) owns a database whose operator set ``work_mem = '64kB'`` on it.
``harmony tune CONFIG --plan`` and ``harmony tune CONFIG`` run as a user writes them (a DSN,
no controller, the workload a sort-heavy pgbench script); then the written
``alter_database.sql`` is checked by pgbench's own tps over ``--rounds`` interleaved rounds
(original, tuned; the order alternating), the ratio's interval a t-interval over the rounds'
log ratios.

    flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.managed_mode --rounds 8 --tag T

Writes benchmarks/results/managed_mode.<tag>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import yaml
from scipy import stats

from benchmarks.evidence.common import machine, write_results
from benchmarks.evidence.restart import uptime
from tuner_client.servers.local_cluster import LocalCluster
from workloads.pgbench import find_pgbench

ROLE = "app"
SCRIPT = "\\set k random(1, 1000)\nSELECT count(DISTINCT s) FROM t WHERE id > :k;\n"


def setup(cluster: LocalCluster, rows: int) -> str:
    """The restricted role, its database (work_mem 64kB set on it) and the table; its DSN."""
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {ROLE} LOGIN NOSUPERUSER")
        conn.execute(f"GRANT pg_read_all_settings, pg_monitor TO {ROLE}")
        conn.execute(f"CREATE DATABASE shop OWNER {ROLE}")
    dsn = cluster.dsn_for("shop").replace("user=postgres", f"user={ROLE}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE t AS SELECT g AS id, md5(g::text) AS s "
                     "FROM generate_series(1, %s) g", [rows])
        conn.execute("VACUUM ANALYZE t")
        conn.execute("ALTER DATABASE shop SET work_mem = '64kB'")
    return dsn


def tps(dsn: str, script: Path, statements: str, seconds: int, clients: int) -> float:
    """Apply ``statements`` as the role, then pgbench's tps (new sessions take them)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for line in statements.splitlines():
            if line.strip() and not line.startswith("--"):
                conn.execute(line)  # the tuner's own file
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    run = subprocess.run([str(find_pgbench()), "-n", "-c", str(clients), "-T", str(seconds),
                          "-f", str(script), "-h", str(params["host"]), "-p",
                          str(params["port"]), "-U", ROLE, "shop"],
                         capture_output=True, text=True, check=True)
    found = re.search(r"tps = ([\d.]+)", run.stdout)
    if found is None:
        raise RuntimeError(run.stdout + run.stderr)
    return float(found.group(1))


def interval(ratios: list[float]) -> tuple[float, float, float]:
    """Geometric mean of ``ratios`` and its 95 % t-interval."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    half = stats.t.ppf(0.975, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.managed_mode")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--seconds", type=int, default=5, help="pgbench seconds per arm")
    parser.add_argument("--rows", type=int, default=50000)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--tag", default="run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-managed-", dir="/tmp"))
    state.chmod(0o755)
    cluster = LocalCluster(state / "cluster", sync_initdb=False)
    data: dict[str, Any] = {"machine": machine(), "args": vars(args), "uptime": [uptime()]}
    # this checkout's CLI (the venv's ``harmony`` script imports the installed tree)
    harmony = [sys.executable, "-m", "harmony"]
    root = Path(__file__).resolve().parent.parent
    try:
        cluster.start()
        dsn = setup(cluster, args.rows)
        script = state / "sort.pgbench"
        script.write_text(SCRIPT)
        config = state / "managed.yaml"
        config.write_text(yaml.safe_dump({
            "name": "managed-bench", "seed": 1, "database": {"dsn": dsn},
            "workload": {"scripts": {"files": [str(script)], "clients": args.clients}},
            "budget": {"ram": "4GB", "connections": 8},
            "online": {"knobs": {"work_mem": {"min": "64kB", "max": "64MB", "log": True}},
                       "evaluations": 6}}, sort_keys=False))
        # run where the state is (the CLI writes harmony-out/ there), this checkout importable
        env = {**os.environ, "PYTHONPATH": str(root)}
        plan = subprocess.run([*harmony, "tune", str(config), "--plan"], cwd=state, env=env,
                              capture_output=True, text=True, check=True)
        data["plan"] = plan.stdout
        started = time.monotonic()
        run = subprocess.run([*harmony, "tune", str(config), "--output", str(state / "out"),
                              "--json"], cwd=state, env=env, capture_output=True, text=True,
                             check=True)
        data["tune_wall_s"] = round(time.monotonic() - started, 1)
        summary = json.loads(run.stdout)
        data["decision"] = summary.get("decision")
        data["best_settings"] = summary.get("best_settings")
        data["files"] = {p.name: p.read_text() for p in sorted((state / "out").iterdir())
                         if p.suffix in (".sql", ".json", ".sh") and p.name != "summary.json"}
        alter = data["files"]["alter_database.sql"]
        rounds = []
        for r in range(args.rounds):
            arms = [("original", "ALTER DATABASE shop SET work_mem = '64kB'"),
                    ("tuned", alter)]
            measured = {name: tps(dsn, script, sql, args.seconds, args.clients)
                        for name, sql in (arms if r % 2 == 0 else arms[::-1])}
            rounds.append({**measured, "ratio": measured["tuned"] / measured["original"]})
            logging.info("round %d: %s", r, rounds[-1])
        data["rounds"] = rounds
        data["pgbench"] = interval([r["ratio"] for r in rounds])
        data["uptime"].append(uptime())
    finally:
        cluster.stop()
        shutil.rmtree(state, ignore_errors=True)
    command = "python -m benchmarks.managed_mode " + " ".join(
        argv if argv is not None else sys.argv[1:])
    jpath, mpath = write_results(f"managed_mode.{args.tag}", data, markdown(data, command))
    print(f"wrote {jpath} and {mpath}")
    return 0


def markdown(data: dict[str, Any], command: str) -> str:
    decision = data.get("decision") or {}
    shown = decision.get("winner") or decision.get("best")
    iv = (decision.get("intervals") or {}).get(shown) or {}
    ratio, low, high = data["pgbench"]
    lines = ["# Managed mode on a restricted role, checked by pgbench (issue 52)", "",
             f"Command: `flock /tmp/harmony-bench.lock {command}`  ",
             f"Machine: {data['machine']}  ", f"uptime: {' / '.join(data['uptime'])}", "",
             "## The plan (`harmony tune CONFIG --plan`)", "", "```", data["plan"].rstrip(),
             "```", "",
             f"## The run ({data['tune_wall_s']} s)", "",
             f"Recommended {data['best_settings']} by {decision.get('design')}: "
             f"{shown} over the original {iv.get('ratio', float('nan')):.3f}× "
             f"({iv.get('low', float('nan')):.3f}–{iv.get('high', float('nan')):.3f}).", ""]
    for name, text in data["files"].items():
        lines += [f"`{name}`:", "", "```", text.rstrip(), "```", ""]
    lines += ["## pgbench's own tps, the written ALTER DATABASE against the original", "",
              "| round | original tps | tuned tps | ratio |", "|---:|---:|---:|---:|"]
    for i, r in enumerate(data["rounds"]):
        lines.append(f"| {i} | {r['original']:.1f} | {r['tuned']:.1f} | {r['ratio']:.3f} |")
    lines += ["", f"**pgbench: {ratio:.3f}× ({low:.3f}–{high:.3f}, 95 % t over "
              f"{len(data['rounds'])} rounds) against the tuner's "
              f"{iv.get('ratio', float('nan')):.3f}× ({iv.get('low', float('nan')):.3f}–"
              f"{iv.get('high', float('nan')):.3f})**"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
