"""Knobs with memory (issue 51 item 2): does a switchback of short slices measure a
checkpoint/WAL knob? pgbench TPC-B (write-heavy), max_wal_size 32MB (A) against 1GB (B),
measured three ways on the same cluster within minutes:

1. **long interleaved rounds** (the reference): whole-server windows of ``WINDOW_S`` s, one
   configuration each, pairs in AB / BA order, a reload between, the first ``SKIP_S`` s of
   each window left out; B/A per pair, Student t over pairs;
2. **switchback of short slices**: one pgbench run throughout, the configuration switched by
   ``ALTER SYSTEM`` + reload every ``SLICE_S`` s in a random order per block, each second's
   count in the slice it falls in (the first second after a switch left out); B/A per block,
   t over blocks;
3. **duet** (:mod:`tuner_client.duet`): the cluster and a clone of it running A and B at the
   same seconds, roles swapped between segments.

A checkpoint started under one slice's setting writes on under the next, and the full-page
images after a checkpoint fade over many seconds, so a short slice carries the previous
configuration's state: if it does, the switchback reads a ratio nearer 1 than the long rounds.

``flock /tmp/harmony-bench.lock python -m benchmarks.memory_knobs [--quick]``; writes
``benchmarks/results/memory_knobs[.quick].{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.evidence.common import header, load_average, machine, write_results
from tuner_client.duet.clone import make_clone
from tuner_client.duet.driver import client_runner, parse_progress
from tuner_client.duet.race import Arm, run_duet
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.stats.paired import interval_from_logs
from workloads.pgbench import PgbenchWorkload

logger = logging.getLogger(__name__)

SCALE, CLIENTS = 10, 4
A = {"max_wal_size": "32MB", "min_wal_size": "32MB"}
B = {"max_wal_size": "1GB", "min_wal_size": "32MB"}
SKIP_S = 3
#: the switchback's slice (s)
SLICE_S = 3.0
#: the carry-over run: seconds under A before the switch, then under B, then A again
CARRY_BEFORE_S, CARRY_AFTER_S = 30, 45


def alter_system(dsn: str, settings: dict[str, str]) -> None:
    """``settings`` by ALTER SYSTEM on ``dsn``, then a reload."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, value in settings.items():
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name),
                                                                     sql.Literal(value)))
        conn.execute("SELECT pg_reload_conf()")


def _pgbench(workload: PgbenchWorkload, dsn: str, seconds: int) -> list[tuple[float, float]]:
    argv, env = workload.progress_command(dsn, seconds)
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"pgbench failed: {done.stderr[-500:]}")
    return parse_progress(done.stderr)


def _interval(logs: list[float]) -> dict[str, Any]:
    iv = interval_from_logs(logs, level=0.95, method="t")
    return {"ratio": math.exp(statistics.fmean(logs)), "low": iv.low if iv else None,
            "high": iv.high if iv else None, "n": len(logs), "logs": logs}


def long_rounds(dsn: str, workload: PgbenchWorkload, pairs: int, window_s: int
                ) -> dict[str, Any]:
    logs, levels = [], []
    for p in range(pairs):
        got = {}
        for label, config in ((("A", A), ("B", B)) if p % 2 == 0 else (("B", B), ("A", A))):
            alter_system(dsn, config)
            rows = _pgbench(workload, dsn, window_s + SKIP_S)
            got[label] = statistics.fmean(t for _, t in rows[SKIP_S:])
        logs.append(math.log(got["B"] / got["A"]))
        levels.append(got)
        logger.info("long rounds pair %d: A %.0f B %.0f tps, B/A %.3f (load %s)", p + 1,
                    got["A"], got["B"], got["B"] / got["A"], load_average())
    return {**_interval(logs), "window_s": window_s, "levels": levels}


def switchback(dsn: str, workload: PgbenchWorkload, blocks: int, slice_s: float, seed: int
               ) -> dict[str, Any]:
    rng = random.Random(seed)
    order = [(b, c) for b in range(blocks) for c in rng.sample([0, 1], 2)]
    seconds = int(len(order) * slice_s + 4)
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(
        rows=_pgbench(workload, dsn, seconds)))
    thread.start()
    time.sleep(2)
    spans = []
    for block, config in order:
        alter_system(dsn, (A, B)[config])
        begin = time.time()
        time.sleep(slice_s)
        spans.append((block, config, begin, time.time()))
    thread.join()
    per: dict[tuple[int, int], list[float]] = {}
    for t, tps in result["rows"]:
        for block, config, begin, end in spans:
            # pgbench's stamp closes its second: the second ran from t-1 to t
            if begin + 1.0 <= t - 1.0 and t <= end + 0.05:
                per.setdefault((block, config), []).append(tps)
    logs = [math.log(statistics.fmean(per[(b, 1)]) / statistics.fmean(per[(b, 0)]))
            for b in range(blocks) if per.get((b, 0)) and per.get((b, 1))]
    return {**_interval(logs), "slice_s": slice_s, "blocks": blocks}


def duet(dsn: str, workload: PgbenchWorkload, journals: Path, parent: Path,
         max_seconds: float, segment_s: int) -> dict[str, Any]:
    clone = make_clone(dsn, journals=journals, mark="bench-memory-knobs", parent=parent)
    try:
        outcome = run_duet(Arm("server", dsn, lambda s: alter_system(dsn, dict(s))),
                           Arm("clone", clone.dsn_like(dsn), lambda s: clone.apply(dict(s))),
                           [A, B], ["A", "B"], client_runner(workload.progress_command),
                           max_seconds=max_seconds, segment_s=segment_s)
    finally:
        clone.remove()
    if outcome is None:
        return {"ratio": None}
    c = outcome.plain["B"]
    return {"ratio": c.interval.ratio, "low": c.interval.low, "high": c.interval.high,
            "n": c.batches, "segments": c.segments, "asymmetry": c.asymmetry,
            "segment_half_width": c.segment_half_width, "setup_s": clone.setup_s,
            "segment_s": segment_s}


def carry_over(dsn: str, workload: PgbenchWorkload, before_s: int, after_s: int
               ) -> dict[str, Any]:
    """One pgbench run: ``before_s`` s under A, then B by reload for ``after_s`` s, then A
    again for ``after_s`` s; per second the WAL bytes per committed transaction (full-page
    images after each checkpoint raise it) and the checkpoints begun. How long after a switch
    the WAL per transaction takes to reach the new setting's level is the knob's memory."""
    alter_system(dsn, A)
    seconds = before_s + 2 * after_s + 2
    thread = threading.Thread(target=_pgbench, args=(workload, dsn, seconds))
    thread.start()
    rows: list[dict[str, float]] = []
    switches: dict[str, float] = {}
    started = time.time()
    with psycopg.connect(dsn, autocommit=True) as conn:
        def sample() -> dict[str, float]:
            row = conn.execute(
                "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, "
                "(SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()), "
                "(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter)").fetchone()
            assert row is not None
            return {"t": time.time() - started, "wal": float(row[0]), "xacts": float(row[1]),
                    "checkpoints": float(row[2])}
        while time.time() - started < seconds - 1:
            now = time.time() - started
            if "B" not in switches and now >= before_s:
                alter_system(dsn, B)
                switches["B"] = now
            if "A" not in switches and now >= before_s + after_s:
                alter_system(dsn, A)
                switches["A"] = now
            conn.execute("SELECT pg_stat_force_next_flush()")
            rows.append(sample())
            time.sleep(1.0)
    thread.join()
    per_s: list[dict[str, Any]] = []
    for a, b in zip(rows, rows[1:], strict=False):
        xacts = b["xacts"] - a["xacts"]
        per_s.append({"t": b["t"], "wal_per_xact": (b["wal"] - a["wal"]) / xacts if xacts > 0
                      else None, "tps": xacts / (b["t"] - a["t"]),
                      "checkpoints": b["checkpoints"] - a["checkpoints"]})

    return carry_summary({"switches": switches, "per_second": per_s}, before_s, after_s)


def carry_summary(raw: dict[str, Any], before_s: float, after_s: float) -> dict[str, Any]:
    """The levels of WAL per transaction under A and B (medians of each one's last 10 s),
    the mean over the first ``SLICE_S`` seconds after each switch (what a switchback slice
    would run under), and the seconds until the 5-s running median lies within 25 % of the
    new level for good."""
    per_s, switches = raw["per_second"], raw["switches"]

    def level(lo: float, hi: float) -> float:
        vals = [r["wal_per_xact"] for r in per_s if lo <= r["t"] < hi and r["wal_per_xact"]]
        return statistics.median(vals) if vals else math.nan

    a_level = level(before_s - 10, before_s)
    b_level = level(before_s + after_s - 10, before_s + after_s)
    end = max(r["t"] for r in per_s)

    def settle(at: float, until: float, target: float) -> float | None:
        ts = [r for r in per_s if at < r["t"] <= until and r["wal_per_xact"]]
        medians = [(ts[k]["t"], statistics.median(x["wal_per_xact"] for x in ts[k:k + 5]))
                   for k in range(max(0, len(ts) - 4))]
        settled = None
        for t, m in medians:
            if abs(m / target - 1) <= 0.25:
                settled = settled if settled is not None else t
            else:
                settled = None
        return None if settled is None else settled - at

    def first_slice(at: float) -> float:
        vals = [r["wal_per_xact"] for r in per_s if at < r["t"] <= at + SLICE_S
                and r["wal_per_xact"]]
        return statistics.fmean(vals) if vals else math.nan

    return {**raw, "wal_per_xact_A": a_level, "wal_per_xact_B": b_level,
            "first_slice_after_A_to_B": first_slice(switches["B"]),
            "first_slice_after_B_to_A": first_slice(switches["A"]),
            "settle_A_to_B_s": settle(switches["B"], switches["A"], b_level),
            "settle_B_to_A_s": settle(switches["A"], end, a_level),
            "checkpoints_under_B_after_switch": sum(
                r["checkpoints"] for r in per_s if switches["B"] < r["t"] <= switches["A"])}


def _row(name: str, r: dict[str, Any], unit: str, seconds: float) -> str:
    if r.get("ratio") is None:
        return f"| {name} | – | – | – | {seconds:.0f} |"
    low, high = r.get("low"), r.get("high")
    iv = "–" if low is None or high is None or not math.isfinite(high) else \
        f"{low:.3f}–{high:.3f}"
    return f"| {name} | {r['ratio']:.3f} | {iv} | {r['n']} {unit} | {seconds:.0f} |"


def _seconds(x: float | None) -> str:
    return "not within the run" if x is None else f"{x:.0f}"


def write_carry(data: dict[str, Any]) -> None:
    c = data["carry"]
    md = [header("A knob with memory: how long one switch of max_wal_size carries over",
                 data["command"], data["machine"],
                 f"\npgbench TPC-B, scale {SCALE}, {CLIENTS} clients; {CARRY_BEFORE_S} s under "
                 f"A (max_wal_size 32MB), then B (1GB) by reload for {CARRY_AFTER_S} s, then "
                 f"A again for {CARRY_AFTER_S} s, in one pgbench run; per second the WAL bytes "
                 f"per committed transaction (full-page images after each checkpoint raise "
                 f"it).\n"),
          "| | value |", "|---|---|",
          f"| WAL per transaction under A (median of its last 10 s) | "
          f"{c['wal_per_xact_A']:,.0f} B |",
          f"| WAL per transaction under B (median of its last 10 s) | "
          f"{c['wal_per_xact_B']:,.0f} B |",
          f"| mean over the first {SLICE_S:g} s after the switch A→B (a switchback slice) | "
          f"{c['first_slice_after_A_to_B']:,.0f} B |",
          f"| mean over the first {SLICE_S:g} s after the switch B→A | "
          f"{c['first_slice_after_B_to_A']:,.0f} B |",
          f"| seconds after A→B until the 5-s running median stays within 25 % of B's level "
          f"| {_seconds(c['settle_A_to_B_s'])} |",
          f"| seconds after B→A until it stays within 25 % of A's level | "
          f"{_seconds(c['settle_B_to_A_s'])} |",
          f"| checkpoints begun under B after the switch | "
          f"{c['checkpoints_under_B_after_switch']:.0f} |",
          "", "Per second (t, WAL bytes per transaction, tps, checkpoints begun):", "",
          "| t (s) | WAL/xact | tps | checkpoints |", "|---|---|---|---|"]
    md += [f"| {r['t']:.0f} | {r['wal_per_xact'] or 0:,.0f} | {r['tps']:.0f} | "
           f"{r['checkpoints']:.0f} |" for r in c["per_second"]]
    md.append(f"\nSwitches at {c['switches']}. Load after: {data['load_after']}.")
    write_results("memory_knobs.carry", data, "\n".join(md))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory_knobs")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--carry", action="store_true",
                        help="only the carry-over of one switch (results under .carry)")
    parser.add_argument("--from-json", type=Path, default=None,
                        help="re-analyse a measured carry-over run and rewrite its files")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.from_json is not None:
        measured = json.loads(args.from_json.read_text())
        measured["carry"] = carry_summary(measured["carry"], CARRY_BEFORE_S, CARRY_AFTER_S)
        write_carry(measured)
        return 0
    pairs, window_s, blocks, slice_s, duet_s = (2, 10, 6, 3.0, 60) if args.quick \
        else (3, 25, 15, 3.0, 100)
    command = "flock /tmp/harmony-bench.lock python -m benchmarks.memory_knobs " + \
        " ".join(argv if argv is not None else sys.argv[1:])
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-memory-", dir="/var/tmp"))
    data: dict[str, Any] = {"machine": machine(), "command": command, "scale": SCALE,
                            "clients": CLIENTS, "A": A, "B": B}
    cluster = LocalCluster(state / "c1", sync_initdb=False)
    timings: dict[str, float] = {}
    try:
        cluster.start()
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        dsn = cluster.dsn_for("bench")
        workload = PgbenchWorkload(dsn, clients=CLIENTS, scale=SCALE, threads=2)
        workload.start()
        if args.carry:
            started = time.monotonic()
            data["carry"] = carry_over(dsn, workload, CARRY_BEFORE_S, CARRY_AFTER_S)
            timings["carry"] = time.monotonic() - started
        for name, run in () if args.carry else (
                ("long", lambda: long_rounds(dsn, workload, pairs, window_s)),
                          ("switchback", lambda: switchback(dsn, workload, blocks, slice_s,
                                                            args.seed)),
                          ("duet", lambda: duet(dsn, workload, state / "journals", state,
                                                duet_s, 20))):
            started = time.monotonic()
            data[name] = run()
            timings[name] = time.monotonic() - started
            logger.info("%s: %s", name, {k: v for k, v in data[name].items()
                                          if k not in ("logs", "levels")})
    finally:
        cluster.destroy()
        shutil.rmtree(state, ignore_errors=True)
    data["seconds"] = timings
    data["load_after"] = load_average()
    if args.carry:
        write_carry(data)
        return 0
    md = [header("A knob with memory: switchback of short slices against long rounds and duet",
                 command, data["machine"],
                 f"\npgbench TPC-B, scale {SCALE}, {CLIENTS} clients; A = max_wal_size 32MB, B "
                 f"= 1GB (min_wal_size 32MB both); B/A with 95 % intervals (t over pairs or "
                 f"blocks; duet: anytime-valid over {5}-s batches, the clone's asymmetry "
                 f"cancelled by role swaps).\n"),
          "| design | B/A | 95 % interval | observations | seconds |", "|---|---|---|---|---|",
          _row(f"long interleaved rounds ({window_s}-s windows)", data["long"], "pairs",
               timings["long"]),
          _row(f"switchback ({slice_s:g}-s slices)", data["switchback"], "blocks",
               timings["switchback"]),
          _row("duet (20-s segments)", data["duet"], "batches", timings["duet"]),
          "", f"Duet: clone/server asymmetry {data['duet'].get('asymmetry') or float('nan'):.3f}"
          f", clone set-up {data['duet'].get('setup_s') or float('nan'):.1f} s. "
          f"Load after: {data['load_after']}."]
    name = "memory_knobs" + ".quick" * args.quick
    write_results(name, data, "\n".join(md))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
