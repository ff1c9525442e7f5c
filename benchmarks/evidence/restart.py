"""How long throughput takes to recover after a restart, cold or warm, against an online change.

The 320 MB headroom rounds measured the label that followed PGTune's configuration (a
restart from shared_buffers 80MB back to 128MB) 15.7 % below its round's mean with the 3-s
warm-up. This measures the recovery directly, in the headroom setup (TPC-H SF 0.4 in a
320 MB memory cgroup): each cycle puts PGTune-like settings in force with a restart, then
returns to the default either by a restart from a cold buffer (``restart``), by a warm
restart (``warm``: the buffer's blocks recorded before it and loaded back with pg_prewarm,
``measure.prewarm``), or, as a control, first restarts into the default, runs 30 s, changes
one online knob back and forth (``online``). After the return, consecutive ``--window``-s
windows are counted without a warm-up. Cycles interleave the kinds (A B B A); the result is
each window's throughput over the mean of the same cycle's last three windows (the settled
level), with a 95 % t interval over the cycles, and the warm restarts' blocks and seconds.

Both estimators are recorded per window: ``count`` (completions) and ``progress`` (queries
credited by their run time inside the window), to see which one a restart biases.

``--pgbench-scale N`` runs pgbench TPC-B (4 clients, its own database on the same cluster,
initialised at scale N) instead of the TPC-H mix: every window is one pgbench run.

Run: ``python -m benchmarks.evidence restart [--mix M] [--kinds restart,warm,online]
[--cycles 4] [--window 3] [--windows 10] [--pgbench-scale N] [--tag T]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.evidence.common import (
    header,
    load_average,
    machine,
    target_measurer,
    write_results,
)
from benchmarks.evidence.endtoend import MB, open_memory_bound
from benchmarks.evidence.headroom import headroom_config
from benchmarks.evidence.live import t_interval
from harmony_base.errors import HarmonyError
from tuner_client.config import TunerConfig
from tuner_client.measurer import Measurer, ServerAccess
from tuner_client.servers.target import Target
from workloads.pgbench import PgbenchWorkload

logger = logging.getLogger(__name__)

AWAY = {"shared_buffers": "80MB", "work_mem": "3413kB", "random_page_cost": "1.1"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mix", default="4Q1,4Q16")
    parser.add_argument("--scale", type=float, default=0.4)
    parser.add_argument("--memory-limit-mb", type=int, default=320)
    parser.add_argument("--kinds", default="restart,warm,online",
                        help="how the default returns: restart (cold), warm, online")
    parser.add_argument("--cycles", type=int, default=4, help="cycles of each kind")
    parser.add_argument("--window", type=float, default=3.0, help="seconds a window")
    parser.add_argument("--windows", type=int, default=10, help="windows after the return")
    parser.add_argument("--pgbench-scale", type=int, default=0,
                        help="run pgbench TPC-B at this scale instead of the TPC-H mix")
    parser.add_argument("--synchronous-commit", default="on", choices=["on", "off"],
                        help="pgbench: synchronous_commit of its database")
    parser.add_argument("--tag", default="", help="suffix of the result files")
    parser.add_argument("--system", action="append", default=[], metavar="NAME=VALUE",
                        help="a reload-time server setting (ALTER SYSTEM) for the whole run, "
                             "e.g. full_page_writes=off to see what the full-page images "
                             "after a restart's checkpoint cost; repeatable")
    parser.add_argument("--steady", type=int, default=3,
                        help="the settled level: the mean of the cycle's last N windows")
    parser.add_argument("--warmup-windows", type=int, default=0,
                        help="the tuner's warm-up after a restart, in windows: the headline "
                             "is the window after them against the settled level")
    parser.add_argument("--from-json", type=Path, nargs="+",
                        help="re-analyse measured runs, pooling their cycles (each cut to "
                             "the fewest windows any run measured)")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-e2e")
    args = parser.parse_args(argv)
    if args.from_json:
        measured = pooled([json.loads(p.read_text()) for p in args.from_json])
        measured["steady"] = args.steady
        measured["warmup_windows"] = args.warmup_windows
        measured["analysis"] = analyse(measured)
        write_results("evidence_restart" + (f".{args.tag}" if args.tag else ""), measured,
                      markdown(measured))
        return 0
    cfg = headroom_config(args.mix, scale=args.scale, limit=args.memory_limit_mb * MB,
                          quick=False, estimator="count")
    measure = replace(cfg.measure, samples=1, seconds=args.window, warmup_s=0.0, prewarm=True)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if not kinds or set(kinds) - set(KINDS):
        parser.error(f"--kinds must name some of {', '.join(KINDS)}, got {args.kinds!r}")
    data: dict[str, Any] = {"machine": machine(), "mix": args.mix, "scale": args.scale,
                            "pgbench_scale": args.pgbench_scale,
                            "synchronous_commit": args.synchronous_commit,
                            "kinds": kinds, "steady": args.steady,
                            "warmup_windows": args.warmup_windows,
                            "memory_limit_mb": args.memory_limit_mb, "window_s": args.window,
                            "command": "python -m benchmarks.evidence restart "
                                       + ("" if args.pgbench_scale else f"--mix {args.mix} ")
                                       + f"--kinds {','.join(kinds)} "
                                       f"--scale {args.scale:g} --memory-limit-mb "
                                       f"{args.memory_limit_mb} --cycles {args.cycles} "
                                       f"--window {args.window:g} --windows {args.windows}"
                                       + (f" --pgbench-scale {args.pgbench_scale} "
                                          f"--synchronous-commit {args.synchronous_commit}"
                                          if args.pgbench_scale else "")
                                       + f" --steady {args.steady}"
                                       + (f" --warmup-windows {args.warmup_windows}"
                                          if args.warmup_windows else "")
                                       + "".join(f" --system {s}" for s in args.system)
                                       + (f" --tag {args.tag}" if args.tag else ""),
                            "cycles": []}
    t0 = time.monotonic()
    data["uptime_start"] = uptime()
    system = dict(s.split("=", 1) for s in args.system if "=" in s)
    if len(system) != len(args.system):
        parser.error(f"--system takes NAME=VALUE, got {args.system}")
    data["system"] = system
    target = open_memory_bound(cfg, args.state_dir)
    try:
        if system and target.cluster is not None:
            with psycopg.connect(target.cluster.dsn, autocommit=True) as conn:
                for name, value in system.items():
                    conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        sql.Identifier(name), sql.Literal(value)))
                conn.execute("SELECT pg_reload_conf()")
        measurer = (pgbench_measurer(cfg, target, measure, args.pgbench_scale,
                                     args.synchronous_commit)
                    if args.pgbench_scale else target_measurer(cfg, target, measure))
        run_cycles(measurer, target, measure, interleaved(kinds, args.cycles), args, data)
    finally:
        target.close()
    data["wall_s"] = time.monotonic() - t0
    data["load_average_end"] = load_average()
    data["uptime_end"] = uptime()
    data["analysis"] = analyse(data)
    write_results("evidence_restart" + (f".{args.tag}" if args.tag else ""), data,
                  markdown(data))
    return 0


KINDS = ("restart", "warm", "online")
PGBENCH_DB = "pgbench"


def uptime() -> str:
    """``uptime``'s line (the brief asks for it before and after every measurement)."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def server_counters(conn: psycopg.Connection[Any]) -> dict[str, int]:
    """The database's block hits and reads (each window's miss probability), checkpoints so
    far, buffers written by backends, and autovacuum/autoanalyze runs on the database's
    tables: what may make a window after a restart differ from later ones."""
    # this connection ran the prewarm: its block reads reach the statistics only at its next
    # flush, which would otherwise land in the first window
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    if conn.info.server_version >= 170000:
        # PostgreSQL 17 moved the checkpoint counters to pg_stat_checkpointer and the backends'
        # writes to pg_stat_io
        bg = conn.execute("SELECT num_timed + num_requested, buffers_written,"
                          " (SELECT coalesce(sum(writes), 0)::int8 FROM pg_stat_io"
                          "  WHERE backend_type = 'client backend')"
                          " FROM pg_stat_checkpointer").fetchone()
    else:
        bg = conn.execute("SELECT checkpoints_timed + checkpoints_req, buffers_checkpoint,"
                          " buffers_backend FROM pg_stat_bgwriter").fetchone()
    av = conn.execute("SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0)::int8"
                      " FROM pg_stat_user_tables").fetchone()
    io = conn.execute("SELECT blks_hit, blks_read FROM pg_stat_database"
                      " WHERE datname = current_database()").fetchone()
    wal = conn.execute("SELECT wal_fpi, wal_bytes FROM pg_stat_wal").fetchone()
    return {"blks_hit": int(io[0]) if io else 0, "blks_read": int(io[1]) if io else 0,
            "checkpoints": int(bg[0]) if bg else 0,
            "buffers_checkpoint": int(bg[1]) if bg else 0,
            "buffers_backend": int(bg[2]) if bg else 0,
            "autovacuums": int(av[0]) if av else 0,
            "wal_fpi": int(wal[0]) if wal else 0, "wal_bytes": int(wal[1]) if wal else 0}


def run_cycles(measurer: Measurer, target: Target, measure: Any, order: list[str],
               args: argparse.Namespace, data: dict[str, Any]) -> None:
    """Each cycle of ``order``: away (a restart), back by its kind, ``args.windows``
    windows; the windows' throughput and the server's counters before each window."""
    names = sorted(AWAY)
    default = measurer.current_settings(names)
    measurer.in_force = dict(default)
    auto_conf = target.controller.read_auto_conf()
    try:
        measurer.start()
        for c, kind in enumerate(order):
            measurer.config = measure  # the way out is the same (warm) in every kind
            measurer.apply(AWAY, check_budget=False, warm_up=False)
            time.sleep(5.0)  # the other configuration runs for a while
            if kind == "online":  # settle in the default first (a restart), then nudge
                measurer.apply(default, check_budget=False, warm_up=False)
                time.sleep(30.0)
                measurer.apply({"random_page_cost": "4.1"}, check_budget=False,
                               warm_up=False)
                time.sleep(5.0)
            measurer.config = replace(measure, prewarm=kind == "warm")
            outcome = measurer.apply(default, check_budget=False, warm_up=False)
            got, counters = [], []
            for _ in range(args.windows):
                counters.append(server_counters(measurer.live_conn()))
                got.append(measurer.workload.sample(seconds=args.window))
            counters.append(server_counters(measurer.live_conn()))
            qpm = [float(g.qpm) for g in got]
            progress = [g.progress_qpm for g in got]
            data["cycles"].append({"kind": kind, "qpm": qpm, "progress": progress,
                                   "counters": counters, "flushed": True,
                                   "restart_s": outcome.restart_s,
                                   "prewarm": outcome.prewarm.to_dict()
                                   if outcome.prewarm is not None else None,
                                   "load_average": load_average()})
            logger.info("cycle %d (%s): count %s, progress %s", c + 1, kind,
                        [round(q) for q in qpm], [round(p or 0) for p in progress])
    finally:
        measurer.stop()
        measurer.restore(default, auto_conf=auto_conf)
        measurer.close()


def pgbench_measurer(cfg: TunerConfig, target: Target, measure: Any, scale: int,
                     synchronous_commit: str = "on") -> Measurer:
    """A measurer on pgbench TPC-B (4 clients) in its own database of the target's cluster,
    initialised at ``scale`` unless it is already; prewarm records that database's blocks.
    ``synchronous_commit`` is set on that database (``off``: commits do not wait for the WAL
    flush, whose stalls on a shared disk spread a 4-s window by ±35 %)."""
    if target.cluster is None:
        raise HarmonyError("the pgbench restart evidence needs the embedded cluster")
    with psycopg.connect(target.cluster.dsn, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                            [PGBENCH_DB]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(PGBENCH_DB)))
        conn.execute(sql.SQL("ALTER DATABASE {} SET synchronous_commit = {}").format(
            sql.Identifier(PGBENCH_DB), sql.Literal(synchronous_commit)))
    dsn = target.cluster.dsn_for(PGBENCH_DB)
    workload = PgbenchWorkload(dsn, scale=scale, clients=4)
    workload.start()  # pgbench -i unless the tables are there at this scale
    return Measurer(ServerAccess(dsn, target.catalog, target.controller,
                                 cfg.database.restart_timeout_s), workload, measure)


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One run of every run's cycles (each run's blocks stay whole), the first run's setup,
    every run's command, wall-clock and uptime. Runs of more windows are cut to the fewest
    any run measured (the settled level is then the same seconds after the return in every
    cycle)."""
    out = dict(runs[0])
    if len(runs) > 1:
        cycles = [c for r in runs for c in r["cycles"]]
        out["cycles"] = truncated(cycles, min(len(c["qpm"]) for c in cycles))
        out["wall_s"] = sum(r["wall_s"] for r in runs)
        out["runs"] = [{k: r.get(k) for k in ("command", "wall_s", "uptime_start",
                                                "uptime_end", "load_average_end")}
                       for r in runs]
        out["command"] = " ; ".join(r["command"] for r in runs)
    return out


def truncated(cycles: list[dict[str, Any]], windows: int) -> list[dict[str, Any]]:
    """``cycles`` with their first ``windows`` windows only (and the counters read around
    them)."""
    out = []
    for c in cycles:
        cut = dict(c)
        cut["qpm"] = c["qpm"][:windows]
        cut["progress"] = (c.get("progress") or [])[:windows]
        cut["counters"] = (c.get("counters") or [])[:windows + 1]
        out.append(cut)
    return out


def interleaved(kinds: list[str], cycles: int) -> list[str]:
    """``cycles`` of each kind, in blocks that reverse their order every other time
    (A B, B A, ...), so drift hits every kind alike."""
    out: list[str] = []
    for c in range(cycles):
        out.extend(kinds if c % 2 == 0 else list(reversed(kinds)))
    return out


def analyse(data: dict[str, Any]) -> dict[str, Any]:
    """Per estimator, kind and window: throughput over the cycle's settled level (the mean of
    its last ``steady`` windows); per kind the first window's miss probability minus the
    settled windows' (the cache state itself, free of the throughput's noise)."""
    out: dict[str, Any] = {}
    steady = int(data.get("steady", 3))
    for est in ("qpm", "progress"):
        for kind in KINDS:
            rel = []
            for c in data["cycles"]:
                values = c.get(est) or []
                if c["kind"] != kind or None in values or not values:
                    continue
                settled = statistics.fmean(values[-steady:])
                if settled > 0:
                    rel.append([v / settled for v in values])
            key = kind if est == "qpm" else f"{kind}_progress"
            out[key] = ([t_interval([r[i] for r in rel]) for i in range(len(rel[0]))]
                        if rel else [])
    # paired: the first window's ratio after a warm restart minus after a cold one, in the
    # same interleaved block (the kinds run next to each other, so drift cancels)
    kinds = data.get("kinds", ["restart", "online"])
    if {"restart", "warm"} <= set(kinds):
        diffs = []
        cycles = data["cycles"]
        for b in range(0, len(cycles) - len(kinds) + 1, len(kinds)):
            first = {c["kind"]: c["qpm"][0] / statistics.fmean(c["qpm"][-steady:])
                     for c in cycles[b:b + len(kinds)]
                     if statistics.fmean(c["qpm"][-steady:]) > 0}
            if "restart" in first and "warm" in first:
                diffs.append(first["warm"] - first["restart"])
        if len(diffs) >= 2:
            out["first_window_warm_minus_cold"] = t_interval(diffs)
    out.update(miss_analysis(data["cycles"], steady))
    out.update(fpi_analysis(data["cycles"], steady))
    warm = [c["prewarm"] for c in data["cycles"] if c["kind"] == "warm" and c.get("prewarm")]
    if warm:
        out["prewarm_blocks"] = t_interval([float(w["blocks"]) for w in warm])
        out["prewarm_s"] = t_interval([float(w["seconds"]) for w in warm])
    for kind in KINDS:
        restarts = [c["restart_s"] for c in data["cycles"]
                    if c["kind"] == kind and c.get("restart_s")]
        if restarts:
            out[f"restart_s_{kind}"] = t_interval([float(r) for r in restarts])
    return out


def window_misses(cycle: dict[str, Any], flushed: bool = True) -> list[float] | None:
    """Each window's miss probability (the database's blocks read over blocks accessed),
    from the counters read before and after every window; None before they were recorded.
    Runs before the counters forced the prewarming connection's flush (``flushed`` False)
    counted the prewarm's reads (one per block loaded) in the first window: they are taken
    out again."""
    counters = cycle.get("counters") or []
    if len(counters) < 2 or "blks_hit" not in counters[0]:
        return None
    loaded = 0 if flushed or not cycle.get("prewarm") else int(cycle["prewarm"]["blocks"])
    out = []
    for i, (a, b) in enumerate(zip(counters, counters[1:], strict=False)):
        hit, read = b["blks_hit"] - a["blks_hit"], b["blks_read"] - a["blks_read"]
        if i == 0 and read >= loaded:
            read -= loaded
        out.append(read / (hit + read) if hit + read > 0 else math.nan)
    return out


def miss_analysis(cycles: list[dict[str, Any]], steady: int) -> dict[str, Any]:
    """Per kind: the mean miss probability of each window, and the first window's minus the
    cycle's settled windows' (95 % t interval over the cycles)."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        rows = [m for c in cycles if c["kind"] == kind
                for m in [window_misses(c, bool(c.get("flushed")))]
                if m and not any(math.isnan(x) for x in m)]
        if len(rows) < 2:
            continue
        out[f"miss_{kind}"] = [t_interval([r[i] for r in rows]) for i in range(len(rows[0]))]
        out[f"miss_first_minus_steady_{kind}"] = t_interval(
            [r[0] - statistics.fmean(r[-steady:]) for r in rows])
    return out


def fpi_analysis(cycles: list[dict[str, Any]], steady: int) -> dict[str, Any]:
    """Per kind: full-page images written to the WAL in each window (the first change of a
    page after a checkpoint, and a restart is one), first and settled (95 % t interval)."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        rows = [[b["wal_fpi"] - a["wal_fpi"] for a, b in zip(cn, cn[1:], strict=False)]
                for c in cycles if c["kind"] == kind
                for cn in [c.get("counters") or []] if cn and "wal_fpi" in cn[0]]
        if len(rows) >= 2:
            out[f"fpi_first_{kind}"] = t_interval([float(r[0]) for r in rows])
            out[f"fpi_settled_{kind}"] = t_interval([statistics.fmean(r[-steady:])
                                                     for r in rows])
    return out


_NAMES = {"restart": "after a cold restart", "warm": "after a warm restart (prewarm)",
          "online": "after an online change"}


def markdown(data: dict[str, Any]) -> str:
    a, w = data["analysis"], data["window_s"]
    kinds = [k for k in data.get("kinds", ["restart", "online"]) if a.get(k)]
    cycles = sum(1 for c in data["cycles"] if c["kind"] == kinds[0]) if kinds else 0
    lines = [header("Throughput after a restart, cold or warm, against an online change",
                    data["command"], data["machine"]),
             (f"pgbench TPC-B, scale {data['pgbench_scale']}, 4 clients, one pgbench run a "
              f"window, in a " if data.get("pgbench_scale") else
              f"Mix `{data['mix']}`, TPC-H SF {data['scale']:g} in a ")
             + f"{data['memory_limit_mb']} MB memory cgroup. Each cycle: PGTune-like settings "
             f"{AWAY} (a restart), then back to the default by a cold restart, a warm restart "
             f"(the buffer's blocks recorded before it with pg_buffercache, loaded back with "
             f"pg_prewarm), or (control) by an online change after 30 s in the default; kinds "
             f"interleaved A B, B A. {w:g}-s windows after the return, no warm-up; each over "
             f"the mean of its cycle's last {data.get('steady', 3)} windows (the settled "
             f"level), 95 % t interval over {cycles} "
             f"cycles of each kind. Wall {data['wall_s']:.0f} s; load at the end "
             f"{data['load_average_end']}.", "",
             f"uptime before: `{data.get('uptime_start', '?')}`; after: "
             f"`{data.get('uptime_end', '?')}`"
             + (f"; pgbench's database has synchronous_commit "
                f"{data.get('synchronous_commit', 'on')}" if data.get("pgbench_scale") else "")
             + ".", ""]

    def interval(x: Any, digits: int = 2) -> str:
        return f"{x[0]:.{digits}f} ({x[1]:.{digits}f}–{x[2]:.{digits}f})"

    if a.get("prewarm_blocks"):
        lines += [f"Warm restarts loaded {interval(a['prewarm_blocks'], 0)} blocks of 8 kB in "
                  f"{interval(a['prewarm_s'])} s (mean, 95 % t interval).", ""]
    k = int(data.get("warmup_windows") or 0)
    for kind in kinds:
        for est, key in (("count", kind), ("progress", f"{kind}_progress")):
            rows = a.get(key) or []
            if 0 < k < len(rows) and rows[k][1] == rows[k][1]:
                inside = rows[k][1] >= 0.98 and rows[k][2] <= 1.02
                lines += [f"**The first window after a {k * w:g}-s warm-up {_NAMES[kind]}** "
                          f"({k * w:g}–{(k + 1) * w:g} s after the return), by {est}: "
                          f"{interval(rows[k], 3)} of the settled level over {cycles} "
                          f"cycles: {'within' if inside else 'not within'} ±2 %.", ""]
    if a.get("first_window_warm_minus_cold"):
        lines += [f"First window, warm minus cold restart in the same block (by count): "
                  f"{interval(a['first_window_warm_minus_cold'])} of the settled level.", ""]
    for kind in kinds:
        if a.get(f"miss_first_minus_steady_{kind}"):
            lines.append(f"- miss probability {_NAMES[kind]}: first window "
                         f"{interval(a[f'miss_{kind}'][0], 4)}; first window minus the "
                         f"settled windows' mean "
                         f"{interval(a[f'miss_first_minus_steady_{kind}'], 4)}"
                         f" (absolute; the last window's miss probability "
                         f"{interval(a[f'miss_{kind}'][-1], 4)})")
    if any(a.get(f"miss_{k}") for k in kinds) and not all(
            c.get("flushed") for c in data["cycles"]):
        lines.append("- (this run read the counters before the prewarming connection had "
                     "flushed its statistics: the prewarm's reads, one per block loaded, are "
                     "taken out of the first window's reads)")
    for kind in kinds:
        if a.get(f"fpi_first_{kind}"):
            lines.append(f"- full-page images written {_NAMES[kind]}: first window "
                         f"{interval(a[f'fpi_first_{kind}'], 0)}, a settled window "
                         f"{interval(a[f'fpi_settled_{kind}'], 0)}")
    if data.get("system"):
        lines.append(f"- server settings for the whole run (ALTER SYSTEM): {data['system']}")
    for kind in kinds:
        if a.get(f"restart_s_{kind}"):
            lines.append(f"- restart {_NAMES[kind]}: {interval(a[f'restart_s_{kind}'])} s "
                         f"(stop, start and any prewarm)")
    lines += ["", "| seconds after the return | "
              + " | ".join(f"count, {_NAMES[k]}" for k in kinds) + " | "
              + " | ".join(f"progress, {_NAMES[k]}" for k in kinds) + " |",
              "|---|" + "---|" * (2 * len(kinds))]

    def cell(rows: list[Any], i: int) -> str:
        return interval(rows[i]) if i < len(rows) and rows[i][1] == rows[i][1] else (
            f"{rows[i][0]:.2f}" if i < len(rows) else "–")

    for i in range(max((len(a[k]) for k in kinds), default=0)):
        lines.append(f"| {i * w:g}–{(i + 1) * w:g} | "
                     + " | ".join(cell(a[k], i) for k in kinds) + " | "
                     + " | ".join(cell(a.get(f"{k}_progress", []), i) for k in kinds) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    raise SystemExit(main())
