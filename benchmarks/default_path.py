"""The default path on a user's own scripted workload (issue 45, Evidence): a config as a user
writes it, without ``measure.design``, on a server and tables the tuner did not create, whose
original configuration is known to be slow; then the recommendation against the original by
the workload's own client.

The server: a private cluster with :mod:`benchmarks.accuracy`'s 600,000-row table and its
``range`` mix (four weighted statements, 4 clients). Its original configuration is the one
that benchmark measured at 0.60× (0.49–0.72) the defaults (work_mem 128MB, random_page_cost 1,
no parallel workers), set by ``ALTER SYSTEM`` before the run: moving back is a known gain of
about 1.6×. The run: ``harmony tune`` on a DSN (online knobs only, no restart), timed. Then
the truth: pgbench running the same statements with the same weights, ``--rounds``
interleaved rounds of ``--round-s`` seconds of the original against the recommendation.

    flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.default_path --tag T

Writes benchmarks/results/default_path.<tag>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import yaml

from benchmarks.accuracy import CANDIDATE, CLIENTS, LONG, MIX_SQL, Pgbench, _load, _text, truth
from benchmarks.evidence.common import machine, write_results
from benchmarks.evidence.restart import uptime
from tuner_client.config import tuner_config_from_dict
from tuner_client.servers.local_cluster import LocalCluster

#: the server's original configuration: slow on this mix (benchmarks/accuracy.py, r2)
SLOW = dict(CANDIDATE)


def user_config(cluster: LocalCluster, dsn: str, mix: Path) -> dict[str, Any]:
    """The config as a user writes it: the server (by DSN, with its pg_ctl, restarts not
    allowed), the workload, the knobs; no design."""
    return {"name": "my-app", "seed": 1,
            "database": {"dsn": dsn, "controller": {
                "kind": "pg_ctl", "options": {"data_dir": str(cluster.data_dir),
                                              "bin_dir": str(cluster.bin_dir)}}},
            "workload": {"scripts": {"files": [str(mix)], "clients": CLIENTS}},
            "online": {"knobs": {"work_mem": {"min": "1MB", "max": "128MB"},
                                 "random_page_cost": {"min": 1, "max": 8, "step": 0.5},
                                 "max_parallel_workers_per_gather": {"min": 0, "max": 2}},
                       "evaluations": 10}}


def slow_server(cluster: LocalCluster, state: Path) -> tuple[str, Path]:
    """Start ``cluster``, load the table, set the slow original (:data:`SLOW`) by ALTER SYSTEM
    and write the user's ``range`` mix under ``state``: the DSN and the mix's path."""
    cluster.start()
    dsn = _load(cluster)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, value in SLOW.items():
            conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        conn.execute("SELECT pg_reload_conf()")
    mix = state / "mix.sql"
    mix.write_text(MIX_SQL.format(long=LONG["range"]))
    return dsn, mix


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.default_path")
    parser.add_argument("--tag", default="run")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--round-s", type=int, default=20)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-default-path-", dir="/tmp"))
    cluster = LocalCluster(state / "cluster", sync_initdb=False)
    data: dict[str, Any] = {"machine": machine(), "args": vars(args), "original": SLOW}
    try:
        dsn, mix = slow_server(cluster, state)
        config = state / "my-app.yaml"
        config.write_text(yaml.safe_dump(user_config(cluster, dsn, mix), sort_keys=False))
        out = state / "out"
        harmony = Path(sys.executable).with_name("harmony")
        data["uptime_start"] = uptime()
        started = time.monotonic()
        run = subprocess.run([str(harmony), "tune", str(config), "--output", str(out),
                              "--json"], capture_output=True, text=True, check=False)
        data["wall_s"] = round(time.monotonic() - started, 1)
        data["rc"] = run.returncode
        summary = json.loads(run.stdout) if run.returncode == 0 else None
        data["stderr_tail"] = run.stderr[-3000:]
        if summary is not None:
            decision = summary.get("decision") or {}
            winner = decision.get("winner")
            data["decision"] = {k: decision.get(k) for k in ("winner", "best", "design",
                                                             "intervals", "text")}
            data["best_settings"] = summary["best_settings"]
            data["decisions"] = [d for d in summary["decisions"]
                                 if "design" in d or "recommend" in d or "measured" in d]
            if winner is not None:
                recommended = {n: str(summary["best_settings"][n]) for n in SLOW}
                data["recommended"] = recommended
                cfg = tuner_config_from_dict(user_config(cluster, dsn, mix))
                bench = Pgbench(dsn, cfg.workload.files, state)
                data["truth"] = truth(dsn, bench, [dict(SLOW), recommended],
                                      rounds=args.rounds, round_s=args.round_s)
        data["uptime_end"] = uptime()
    finally:
        cluster.stop()
        shutil.rmtree(state, ignore_errors=True)
    command = "python -m benchmarks.default_path " + " ".join(argv if argv is not None
                                                              else sys.argv[1:])
    jpath, mpath = write_results(f"default_path.{args.tag}", data, markdown(data, command))
    print(f"wrote {jpath} and {mpath}")
    return 0


def markdown(data: dict[str, Any], command: str) -> str:
    decision = data.get("decision") or {}
    shown = decision.get("winner") or decision.get("best")
    iv = (decision.get("intervals") or {}).get(shown) if shown else None
    lines = ["# The default path on a user's scripted workload (issue 45)", "",
             f"Command: `{command}`  ", f"Machine: {data['machine']}  ",
             f"Uptime: {data.get('uptime_start')} / {data.get('uptime_end')}", "",
             f"Original (set by ALTER SYSTEM before the run): {data['original']}; the config "
             f"has no `measure.design`.", "",
             "| | |", "|---|---|",
             f"| wall-clock of `harmony tune` | {data.get('wall_s')} s (rc {data.get('rc')}) |",
             f"| recommendation | {data.get('recommended') or 'kept the original'} |",
             f"| design | {decision.get('design')} |",
             f"| tuner's interval, {shown} over the original | "
             f"{_text(iv) if iv else '–'} |",
             f"| truth: pgbench's own tps, recommendation over the original | "
             f"{_text((data.get('truth') or {}).get('interval'))} |", ""]
    lines += [f"- {d}" for d in data.get("decisions", [])]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
