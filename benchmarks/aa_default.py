"""A/A by the default config (issue 45, Evidence): ``--runs`` runs of ``harmony tune`` as a
user writes it (no ``measure.design``, no final budget), on a user's ``.sql`` mix and server
(:mod:`benchmarks.default_path`'s range mix, 4 clients, the server by DSN with its pg_ctl),
tuning three knobs a read-only mix cannot feel: maintenance_work_mem, vacuum_cost_delay and
vacuum_cost_limit (nothing in the mix vacuums or builds an index); or, with ``--space
server-wide`` (issue 51's A/A of server-wide knobs), shared_buffers from 256MB (the cluster's
own, set before the runs) to 1GB, all of which hold the ~140 MB table and its indexes, with
checkpoint_timeout, max_wal_size and checkpoint_completion_target, which a read-only mix
writes nothing for: a restart knob and knobs with memory, raced by duet (or windows where no
clone can run). Every candidate is the original's twin, so any recommendation is a false
claim. Per run: the wall-clock, whether it
claimed, the design and the interval of the configuration shown (its half-width at the end).

    flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.aa_default --runs 8 --tag T \
        [--space server-wide]

Writes benchmarks/results/aa_default.<tag>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg
import yaml

from benchmarks.accuracy import CLIENTS, LONG, MIX_SQL, _load, _text
from benchmarks.evidence.common import machine, write_results
from benchmarks.evidence.restart import uptime
from tuner_client.servers.local_cluster import LocalCluster

#: knobs a read-only mix of lookups and range reads cannot feel
KNOBS = {"maintenance_work_mem": {"min": "1MB", "max": "1GB"},
         "vacuum_cost_delay": {"min": "0ms", "max": "100ms"},
         "vacuum_cost_limit": {"min": 1, "max": 10000}}
#: server-wide knobs a read-only mix whose data fits the smallest shared_buffers cannot feel:
#: the restart knob offline, the checkpoint knobs (reload-time, with memory) online
SERVER_WIDE = {"offline": {"knobs": {"shared_buffers": {"min": "256MB", "max": "1GB"}},
                           "evaluations": 3},
               "online": {"knobs": {"checkpoint_timeout": {"min": "5min", "max": "30min"},
                                    "max_wal_size": {"min": "1GB", "max": "4GB"},
                                    "checkpoint_completion_target": {"min": 0.5, "max": 0.9}},
                          "evaluations": 10}}
#: ``--space`` → the config's knob sections
SPACES: dict[str, dict[str, Any]] = {
    "session": {"online": {"knobs": KNOBS, "evaluations": 10}}, "server-wide": SERVER_WIDE}


def user_config(cluster: LocalCluster, dsn: str, mix: Path, seed: int,
                sections: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": "my-app", "seed": seed,
            "database": {"dsn": dsn, "controller": {
                "kind": "pg_ctl", "options": {"data_dir": str(cluster.data_dir),
                                              "bin_dir": str(cluster.bin_dir)}}},
            "workload": {"scripts": {"files": [str(mix)], "clients": CLIENTS}},
            **(sections or SPACES["session"])}


def _half_width(iv: dict[str, Any] | None) -> float | None:
    if not iv or not iv.get("low") or iv.get("high") is None:
        return None
    return 0.5 * (math.log(iv["high"]) - math.log(iv["low"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.aa_default")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--tag", default="run")
    parser.add_argument("--space", choices=sorted(SPACES), default="session")
    # runs continuing an earlier set take the seeds after it (each run its own search)
    parser.add_argument("--first-seed", type=int, default=1)
    args = parser.parse_args(argv)
    knobs = SPACES[args.space]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-aa-default-", dir="/tmp"))
    cluster = LocalCluster(state / "cluster", sync_initdb=False)
    data: dict[str, Any] = {"machine": machine(), "args": vars(args), "knobs": knobs,
                            "runs": []}
    harmony = Path(sys.executable).with_name("harmony")
    command = "python -m benchmarks.aa_default " + " ".join(
        argv if argv is not None else sys.argv[1:])
    jpath = mpath = Path()
    try:
        cluster.start()
        dsn = _load(cluster)
        if args.space == "server-wide":  # the smallest candidate is the original itself
            with psycopg.connect(cluster.dsn, autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET shared_buffers = '256MB'")
            cluster.restart()
        mix = state / "mix.sql"
        mix.write_text(MIX_SQL.format(long=LONG["range"]))
        for r in range(args.runs):
            config = state / f"aa-{r}.yaml"
            config.write_text(yaml.safe_dump(user_config(cluster, dsn, mix,
                                                         args.first_seed + r, knobs),
                                             sort_keys=False))
            load = uptime()
            started = time.monotonic()
            run = subprocess.run([str(harmony), "tune", str(config), "--output",
                                  str(state / f"out-{r}"), "--json"], capture_output=True,
                                 text=True, check=False)
            wall = round(time.monotonic() - started, 1)
            row: dict[str, Any] = {"run": r, "seed": args.first_seed + r, "wall_s": wall,
                                   "rc": run.returncode, "uptime": load}
            if run.returncode == 0:
                decision = json.loads(run.stdout).get("decision") or {}
                shown = decision.get("winner") or decision.get("best")
                iv = (decision.get("intervals") or {}).get(shown) if shown else None
                row.update(claimed=decision.get("winner") is not None,
                           design=decision.get("design"), shown=shown, interval=iv,
                           half_width=_half_width(iv))
                summary = state / f"out-{r}" / "summary.json"
                if summary.exists():  # why the final race ran in its design
                    records = json.loads(summary.read_text()).get("decision_records", [])
                    row["final_decisions"] = [d["text"] for d in records
                                              if d.get("phase") == "final"][:12]
                    row["decisions"] = [d["text"] for d in records]
            else:
                row["stderr_tail"] = run.stderr[-2000:]
            logging.info("A/A run %d: %s", r, row)
            data["runs"].append(row)
            # after every run, so that a long set cut short keeps the runs it made
            jpath, mpath = write_results(f"aa_default.{args.tag}", data,
                                         markdown(data, command))
            if run.returncode == 2:  # the config was refused: every run would be
                break
    finally:
        cluster.stop()
        shutil.rmtree(state, ignore_errors=True)
    print(f"wrote {jpath} and {mpath}")
    return 0


def markdown(data: dict[str, Any], command: str) -> str:
    runs = data["runs"]
    space = data["args"].get("space", "session")
    lines = [f"# A/A by the default config on a user's `.sql` mix ({space} knobs)", "",
             f"Command: `{command}`  ", f"Machine: {data['machine']}", "",
             f"Knobs (a read-only mix cannot feel them): {data['knobs']}", "",
             "| run | wall (s) | load at start | claimed | design | shown over the original "
             "(its level) | half-width |", "|---|---:|---|---|---|---|---:|"]
    for r in runs:
        hw = r.get("half_width")
        lines.append(f"| {r['run']} | {r['wall_s']} | {r['uptime'].split('load average:')[-1]}"
                     f" | {r.get('claimed')} | {r.get('design')} | {r.get('shown')}: "
                     f"{_text(r.get('interval'))} | "
                     f"{'–' if hw is None else f'±{100 * hw:.1f} %'} |")
    done = [r for r in runs if r.get("rc") == 0]
    widths = sorted(r["half_width"] for r in done if r.get("half_width") is not None)
    lines += ["", f"**{sum(bool(r.get('claimed')) for r in done)} of {len(done)} claimed**; "
              f"wall-clock max {max((r['wall_s'] for r in runs), default=0)} s; half-width at "
              f"the end: median ±{100 * widths[len(widths) // 2]:.1f} %, max "
              f"±{100 * widths[-1]:.1f} %" if widths else "no interval"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
