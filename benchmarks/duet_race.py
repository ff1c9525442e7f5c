"""The duet race as the tuner runs it (:func:`tuner_client.duet.race.run_duet`, a clone made by
:func:`tuner_client.duet.clone.make_clone`) on restart-time comparisons: an A/A of
shared_buffers (two values with no effect on a data set that fits both) and a real
comparison (shared_buffers 16MB against 128MB on pgbench select-only, scale 6, ~90 MB: the
data fits in 128MB, not in 16MB). Each race stops when its interval excludes 1 or its
seconds are spent; the intervals are anytime-valid over 5-s batches, the clone's asymmetry
cancelled by role swaps and reported.

``flock /tmp/harmony-bench.lock python -m benchmarks.duet_race [--seconds S] [--tag T]``;
writes ``benchmarks/results/duet_race[.T].{json,md}``.
"""

from __future__ import annotations

import argparse
import logging
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.evidence.common import header, load_average, machine, write_results
from tuner_client.duet.clone import make_clone
from tuner_client.duet.driver import client_runner
from tuner_client.duet.race import Arm, run_duet
from tuner_client.servers.local_cluster import LocalCluster
from workloads.pgbench import PgbenchWorkload

logger = logging.getLogger(__name__)

SCALE, CLIENTS = 6, 2
#: (name, reference, candidate)
RACES = (("A/A: shared_buffers 128MB vs 160MB", {"shared_buffers": "128MB"},
          {"shared_buffers": "160MB"}),
         ("shared_buffers 16MB vs 128MB", {"shared_buffers": "16MB"},
          {"shared_buffers": "128MB"}))


def _configure(cluster: LocalCluster, settings: dict[str, str]) -> None:
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        for name, value in settings.items():
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name),
                                                                     sql.Literal(value)))
    cluster.restart()


def _configurer(cluster: LocalCluster) -> Callable[[Mapping[str, str]], None]:
    return lambda settings: _configure(cluster, dict(settings))


def pgbench_select_only(cluster: LocalCluster, scale: int, clients: int
                        ) -> tuple[str, PgbenchWorkload]:
    """``cluster`` started with a database ``bench`` of pgbench's tables at ``scale``; its DSN
    and pgbench -S with ``clients`` clients on it."""
    cluster.start()
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench")
    dsn = cluster.dsn_for("bench")
    subprocess.run([str(cluster.bin_dir / "pgbench"), "-i", "-q", "-s", str(scale), dsn],
                   check=True, capture_output=True)
    return dsn, PgbenchWorkload(dsn, clients=clients, scale=scale, threads=clients,
                                builtin="select-only")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.duet_race")
    parser.add_argument("--seconds", type=float, default=120.0,
                        help="each race's budget (s)")
    parser.add_argument("--tag", default="")
    parser.add_argument("--pin", action="store_true",
                        help="each cluster and its client on its own CPU (taskset)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    command = "flock /tmp/harmony-bench.lock python -m benchmarks.duet_race " + \
        " ".join(argv if argv is not None else sys.argv[1:])
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-duet-race-", dir="/var/tmp"))
    data: dict[str, Any] = {"machine": machine(), "command": command, "scale": SCALE,
                            "clients": CLIENTS, "pinned": args.pin, "races": []}
    cluster = LocalCluster(state / "c1", sync_initdb=False)
    try:
        dsn, workload = pgbench_select_only(cluster, SCALE, CLIENTS)
        for name, ref, cand in RACES:
            clone = make_clone(dsn, journals=state / "journals", mark="bench-duet-race",
                               parent=state)
            started, load = time.monotonic(), load_average()
            try:
                outcome = run_duet(
                    Arm("server", dsn, lambda s: _configure(cluster, dict(s)),
                        cpus="0" if args.pin else None, data_dir=cluster.data_dir),
                    Arm("clone", clone.dsn_like(dsn), _configurer(clone.cluster),
                        cpus="1" if args.pin else None, data_dir=clone.cluster.data_dir),
                    [ref, cand], ["reference", "candidate"],
                    client_runner(workload.progress_command), max_seconds=args.seconds)
            finally:
                clone.remove()
            took = time.monotonic() - started
            row: dict[str, Any] = {"name": name, "reference": ref, "candidate": cand,
                                   "seconds": took, "load_at_start": load,
                                   "clone_setup_s": clone.setup_s,
                                   "clone_bytes": clone.size_bytes}
            if outcome is not None:
                c = outcome.plain["candidate"]
                row.update(ratio=c.interval.ratio, low=c.interval.low, high=c.interval.high,
                           batches=c.batches, segments=c.segments, asymmetry=c.asymmetry,
                           segment_half_width=c.segment_half_width,
                           claim=outcome.winner is not None or c.interval.below_one)
            data["races"].append(row)
            logger.info("%s: %s", name, row)
    finally:
        cluster.destroy()
        shutil.rmtree(state, ignore_errors=True)
    data["load_after"] = load_average()
    md = [header("The duet race on restart-time comparisons", command, data["machine"],
                 f"\npgbench -S, scale {SCALE}, {CLIENTS} clients per cluster"
                 f"{'; each cluster and its client pinned to its own CPU' if args.pin else ''}"
                 f"; the server and "
                 f"a pg_basebackup clone, roles swapped between 20-s segments (both restart "
                 f"for every change), first 3 s of each dropped; 95 % anytime-valid interval "
                 f"over 5-s batch means, the clone's asymmetry cancelled; each race stops when "
                 f"its interval excludes 1 or {args.seconds:g} s are spent.\n"),
          "| race | candidate/reference | 95 % interval | half-width | batches (segments) "
          "| claim | clone/server | by segment | seconds | load at start |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["races"]:
        if r.get("ratio") is None:
            md.append(f"| {r['name']} | – | – | – | – | – | – | – | {r['seconds']:.0f} | – |")
            continue
        half = 0.5 * math.log(r["high"] / r["low"]) if r["low"] > 0 and \
            math.isfinite(r["high"]) else math.inf
        seg = r["segment_half_width"]
        md.append(f"| {r['name']} | {r['ratio']:.3f} | {r['low']:.3f}–{r['high']:.3f} | "
                  f"±{100 * half:.1f} % | {r['batches']} ({r['segments']}) | "
                  f"{'yes' if r['claim'] else 'no'} | {r['asymmetry']:.3f} | "
                  f"{'–' if seg is None else f'±{100 * seg:.1f} %'} | {r['seconds']:.0f} | "
                  f"{', '.join(str(x) for x in r['load_at_start'])} |")
    setups = ", ".join(f"{r['clone_setup_s']:.1f} s" for r in data["races"])
    md.append(f"\nClone set-up (pg_basebackup + start): {setups}. "
              f"Load after: {data['load_after']}.")
    name = "duet_race" + f".{args.tag}" * bool(args.tag)
    write_results(name, data, "\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
