"""End to end on PostgreSQL: default vs PGTune's rules vs the tuner's best, memory-bound.

The embedded cluster runs in a memory cgroup sized so that the TPC-H database is at least
2.5x the memory PostgreSQL may use (the study: 4 GB of RAM for a 10 GB database). For each
mix the one-pass tuner runs a fixed evaluation budget; then the three configurations are
re-measured with the tuner's own protocol (warm-up, three fixed-work samples, their median
by default), interleaved A/B/C/A/B/C so that drift hits all three alike; the table shows each
configuration's median over rounds and how many of its rounds failed (a failed round: the
server stopped serving the workload, e.g. backends OOM-killed in a crash loop). The cgroup's memory
counters are read around every final measurement to show the limit really holds.

Run: ``python -m benchmarks.evidence endtoend [--quick]``; writes
``benchmarks/results/evidence_endtoend[.quick].{json,md}`` (rewritten after every mix).
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.evidence.common import (
    fmt,
    header,
    load_average,
    machine,
    ratio,
    target_measurer,
    write_results,
)
from harmony_base.errors import HarmonyError
from tuner_client.api.client import connect
from tuner_client.config import TunerConfig, tuner_config_from_dict
from tuner_client.flows import Tuner
from tuner_client.knobs.pgtune import Machine, pgtune_settings
from tuner_client.servers.target import Target, open_target
from workloads.factory import make_workload

logger = logging.getLogger(__name__)

MIXES = ("4Q6,4Q9,4Q13", "3Q6,3Q7,3Q8,3Q13", "4Q1,4Q16")
MB = 1024**2


def tuner_dict(name: str, mix: str, *, scale: float, memory_limit: int, offline_evals: int,
               online_evals: int, queries: int, warmup_s: float, seed: int,
               flow: str = "one-pass", aggregate: str = "median", final_rounds: int = 0,
               candidates: int = 1, estimator: str = "count") -> dict[str, Any]:
    """A one-pass tuner config for ``mix`` on the memory-limited embedded cluster."""
    return {
        "name": name, "seed": seed,
        "database": {"memory_limit": memory_limit, "restart_timeout_s": 120},
        "workload": {"tpch": {"scale": scale, "mix": mix}, "statement_timeout_s": 300},
        "measure": {"warmup_s": warmup_s, "samples": 3, "aggregate": aggregate,
                    "queries": queries, "estimator": estimator},
        # shared_buffers up to 25 % of the cgroup (PGTune's rule), not the study's 50 %: at
        # 120MB of 256MB, 12 streams + 8 parallel workers got backends OOM-killed
        # work_mem held once per process at the peak (measured at most 0.71: procmem, oomgrid)
        "budget": {"ram": "auto", "os_reserved": "32MB", "connections": "auto",
                   "shared_buffers_fraction": 0.25, "work_mem_held": 1.0},
        "offline": {"knobs": {"shared_buffers": {"min": "16MB", "max": "128MB", "step": "8MB"}},
                    "strategy": {"name": "nelder-mead", "options": {"simplex_size": 2}},
                    "evaluations": offline_evals, "prior": {"enabled": True, "min_r2": 0.9}},
        "online": {"knobs": {
            "work_mem": {"min": "1MB", "max": "64MB", "step": "1MB"},
            "maintenance_work_mem": {"min": "1MB", "max": "64MB", "step": "1MB"},
            "effective_cache_size": {"min": "32MB", "max": "1GB", "step": "8MB"},
            "random_page_cost": {"min": 0.5, "max": 10, "step": 0.1},
            "temp_buffers": {"min": "1MB", "max": "32MB", "step": "1MB"},
            # not one of the study's knobs, but the sensitivity benchmark found it among the
            # largest single effects here (JIT compilation costs CPU on a 2-core machine)
            "jit": {"values": ["on", "off"]}},
            "strategy": {"name": "nelder-mead", "options": {"simplex_size": 7}},
            "evaluations": online_evals},
        "flow": {"kind": flow},
        "final": {"rounds": final_rounds, "candidates": candidates},
    }


# -- the cgroup ------------------------------------------------------------------------------
def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def cgroup_snapshot(target: Target) -> dict[str, Any]:
    """The cgroup's limit, usage, peak, OOM kills; and whether the postmaster is inside it."""
    cluster = target.cluster
    cg = cluster.cgroup_path() if cluster is not None else None
    if cg is None:
        return {"cgroup": None}
    out: dict[str, Any] = {"cgroup": str(cg)}
    v2 = (cg / "memory.max").exists()
    names = ({"limit": "memory.max", "usage": "memory.current", "peak": "memory.peak"} if v2 else
             {"limit": "memory.limit_in_bytes", "usage": "memory.usage_in_bytes",
              "peak": "memory.max_usage_in_bytes", "failcnt": "memory.failcnt"})
    for key, fname in names.items():
        text = _read(cg / fname)
        out[key] = int(text) if text and text.isdigit() else text
    stat = _read(cg / "memory.stat") or ""
    for line in stat.splitlines():
        k, _, v = line.partition(" ")
        if k in ("cache", "rss", "shmem", "file", "anon", "total_cache", "total_rss"):
            out[f"stat_{k}"] = int(v)
    oom = _read(cg / ("memory.events" if v2 else "memory.oom_control")) or ""
    for line in oom.splitlines():
        k, _, v = line.partition(" ")
        if k == "oom_kill":
            out["oom_kills"] = int(v)
    procs = set((_read(cg / "cgroup.procs") or "").split())
    pid_text = _read(cluster.data_dir / "postmaster.pid") if cluster is not None else None
    pid = pid_text.splitlines()[0] if pid_text else None
    out["postmaster_pid"] = pid
    out["postmaster_in_cgroup"] = pid in procs if pid else False
    out["processes_in_cgroup"] = len(procs)
    return out


def reset_peak(target: Target) -> None:
    cluster = target.cluster
    cg = cluster.cgroup_path() if cluster is not None else None
    if cg is not None and (cg / "memory.max_usage_in_bytes").exists():
        try:
            (cg / "memory.max_usage_in_bytes").write_text("0")
        except OSError:
            pass


def database_bytes(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0


def oom_lines(target: Target) -> int:
    """PostgreSQL log lines reporting a backend killed by signal 9 (the OOM killer)."""
    cluster = target.cluster
    if cluster is None:
        return 0
    text = _read(cluster.log_path) or ""
    return sum(1 for line in text.splitlines() if "terminated by signal 9" in line)


def open_memory_bound(cfg: TunerConfig, state_dir: Path,
                      fill: Callable[[str], None] | None = None) -> Target:
    """The embedded cluster of ``cfg`` inside its memory cgroup, TPC-H loaded (or reused);
    ``fill``, given the unlimited cluster's DSN, loads any other data first.

    The data is loaded *without* the limit first (COPY and index builds under a small cgroup
    v1 limit get the backend OOM-killed: dirty page cache is not reclaimed fast enough), then
    the cluster restarts inside the cgroup on the same data.
    """
    unlimited = replace(cfg, database=replace(cfg.database, memory_limit_bytes=None))
    loader = open_target(unlimited, state_dir)
    try:
        if fill is not None:
            fill(loader.dsn)
        # "the default" must be PostgreSQL's: forget what an earlier (interrupted) run set
        with psycopg.connect(loader.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET ALL")
    finally:
        loader.close()
    return open_target(cfg, state_dir)


# -- one mix ---------------------------------------------------------------------------------
def run_tuner(cfg: TunerConfig, target: Target) -> dict[str, Any]:
    """The tuner's one-pass run on ``target``; its trajectory, failures and restarts."""
    started = time.monotonic()
    times: list[float] = []
    tuner = Tuner(cfg, target=target, client=connect(None),
                  on_record=lambda record: times.append(time.monotonic() - started))
    result = tuner.run()
    summary = result.to_dict()
    wall = time.monotonic() - started
    records = [r for r in tuner.records if not r.session.startswith("final")]
    values = [r.value for r in records]
    best = max((v for v in values if v is not None), default=None)
    reach_eval = reach_s = None
    if best is not None:
        for i, (v, t) in enumerate(zip(values, times, strict=False)):
            if v is not None and v >= 0.9 * best:
                reach_eval, reach_s = i + 1, t
                break
    return {
        "best_settings": summary["best_settings"], "default_settings": summary["default_settings"],
        "evaluations": len(records), "best_qpm_during_search": best,
        "evals_to_90pct": reach_eval, "seconds_to_90pct": reach_s, "wall_s": wall,
        "restarts": sum(1 for r in records if r.restart_s),
        "restart_seconds": sum(r.restart_s or 0.0 for r in records),
        "failures": [{"settings": r.settings, "failure": r.failure} for r in records
                     if r.failure],
        "decisions": summary["decisions"], "passes": summary["passes"],
        "final_rounds": summary["ab_rounds"],
        "trajectory": [{"session": r.session, "settings": r.settings, "qpm": r.value,
                        "samples": [s.qpm for s in r.samples], "failure": r.failure}
                       for r in records],
    }


def as_postgres_accepts(target: Target, settings: dict[str, str]) -> dict[str, str]:
    """Memory values rounded down to the knob's unit, as PostgreSQL itself does.

    PGTune prints e.g. ``wal_buffers = 1966kB``; PostgreSQL takes it (245 blocks of 8kB), the
    tuner's knob check refuses a value that is not a whole number of units.
    """
    out = {}
    for name, value in settings.items():
        if name not in target.catalog:
            continue
        knob = target.catalog[name]
        m = re.fullmatch(r"(\d+)(kB|MB|GB)", value)
        if m and knob.quantity == "memory":
            size = int(m.group(1)) * {"kB": 1024, "MB": 1024**2, "GB": 1024**3}[m.group(2)]
            unit = int(knob.unit_size)
            out[name] = f"{size // unit * unit // 1024}kB"
        else:
            out[name] = value
    return out


def compare(cfg: TunerConfig, target: Target, configs: dict[str, dict[str, str]],
            rounds: int) -> dict[str, Any]:
    """Measure each configuration ``rounds`` times, interleaved, with the tuner's protocol."""
    names = sorted({k for c in configs.values() for k in c if k in target.catalog})
    workload = make_workload(cfg.workload, target.dsn, seed=cfg.seed + 1000)
    measurer = target_measurer(cfg, target, workload=workload)
    auto_conf = target.controller.read_auto_conf()
    default = measurer.current_settings(names)
    measurer.in_force = dict(default)
    full = {label: {**default, **as_postgres_accepts(target, c)} for label, c in configs.items()}
    rows: list[dict[str, Any]] = []
    measurer.start()
    try:
        for r in range(rounds):
            for label, settings in full.items():
                reset_peak(target)
                before_oom = oom_lines(target)
                record = measurer.measure(f"final-{label}", {}, settings, check_budget=False)
                snap = cgroup_snapshot(target)
                rows.append({"round": r + 1, "config": label, "qpm": record.value,
                             "samples": [s.qpm for s in record.samples],
                             "failure": record.failure, "cgroup": snap,
                             "backend_oom_kills": oom_lines(target) - before_oom,
                             "load_average": load_average()})
                logger.info("[compare] round %d %s: %s qpm; cgroup usage %s peak %s", r + 1,
                            label, record.value, snap.get("usage"), snap.get("peak"))
    finally:
        measurer.stop()
        try:
            measurer.restore(default, auto_conf=auto_conf)
        except (HarmonyError, OSError) as exc:
            logger.error("could not restore the default configuration: %s", exc)
        measurer.close()
    out: dict[str, Any] = {"settings": full, "rounds": rows}
    for label in full:
        mine = [row for row in rows if row["config"] == label]
        vals = [row["qpm"] for row in mine if row["qpm"] is not None]
        out[f"{label}_qpm"] = statistics.median(vals) if vals else None
        out[f"{label}_failed_rounds"] = sum(1 for row in mine if row["qpm"] is None)
    return out


def run(quick: bool, scale: float, memory_limit: int, offline_evals: int, online_evals: int,
        rounds: int, mixes: tuple[str, ...], state_dir: Path, name: str,
        aggregate: str = "median", estimator: str = "count") -> dict[str, Any]:
    mach = machine()
    data: dict[str, Any] = {"machine": mach, "scale": scale, "memory_limit_bytes": memory_limit,
                            "offline_evals": offline_evals, "online_evals": online_evals,
                            "rounds": rounds, "mixes": {}, "quick": quick,
                            "aggregate": aggregate, "estimator": estimator}
    first = tuner_config_from_dict(tuner_dict("evidence-e2e", mixes[0], scale=scale,
                                              memory_limit=memory_limit, offline_evals=1,
                                              online_evals=1, queries=6, warmup_s=3, seed=1))
    t0 = time.monotonic()
    target = open_memory_bound(first, state_dir)
    data["open_target_s"] = time.monotonic() - t0
    try:
        size = database_bytes(target.dsn)
        data["database_bytes"] = size
        data["db_over_limit"] = size / memory_limit
        data["cgroup_at_start"] = cgroup_snapshot(target)
        logger.info("database %.0f MB, limit %.0f MB (%.2fx); cgroup %s", size / MB,
                    memory_limit / MB, size / memory_limit, data["cgroup_at_start"])
        for i, mix in enumerate(mixes):
            streams = tuner_config_from_dict(tuner_dict(
                "x", mix, scale=scale, memory_limit=memory_limit, offline_evals=1,
                online_evals=1, queries=1, warmup_s=1, seed=1)).workload.streams
            queries = streams
            cfg = tuner_config_from_dict(tuner_dict(
                f"evidence-e2e-{i}", mix, scale=scale, memory_limit=memory_limit,
                offline_evals=offline_evals, online_evals=online_evals, queries=queries,
                warmup_s=3 if quick else 5, seed=1 + i, aggregate=aggregate,
                final_rounds=1 if quick else 2, candidates=2 if quick else 3,
                estimator=estimator))
            entry: dict[str, Any] = {"streams": streams, "queries_per_sample": queries,
                                     "load_average_start": load_average()}
            data["mixes"][mix] = entry
            rules = pgtune_settings(Machine(ram_bytes=memory_limit, cpus=os.cpu_count() or 1,
                                            connections=streams, storage="ssd", db_type="dw"))
            entry["pgtune"] = rules
            try:
                t0 = time.monotonic()
                entry["tuner"] = run_tuner(cfg, target)
                entry["compare"] = compare(cfg, target, {
                    "default": {}, "pgtune": rules,
                    "tuned": entry["tuner"]["best_settings"]}, rounds)
                entry["wall_s"] = time.monotonic() - t0
            except HarmonyError as exc:
                logger.exception("mix %s failed", mix)
                entry["error"] = str(exc)
            entry["load_average_end"] = load_average()
            write_results(name, data, markdown(data, quick))
    finally:
        target.close()
    return data


def markdown(data: dict[str, Any], quick: bool) -> str:
    lim = data["memory_limit_bytes"]
    size = data.get("database_bytes") or 0
    cg = data.get("cgroup_at_start") or {}
    agg = data.get("aggregate", "best")
    extra = (f"\nTPC-H scale {data['scale']} ({size / MB:.0f} MB on disk) on the embedded cluster "
             f"in a memory cgroup of {lim / MB:.0f} MB: database / limit = "
             f"{data.get('db_over_limit', 0):.2f}. cgroup {cg.get('cgroup')} "
             f"limit {cg.get('limit')} bytes; postmaster inside: "
             f"{cg.get('postmaster_in_cgroup')}.\nTuner budget: {data['offline_evals']} offline "
             f"(+1 after the BME prior) + {data['online_evals']} online evaluations, one-pass; "
             f"then the tuner re-measures its best candidates interleaved with the default "
             f"(final.candidates) and keeps the best mean. "
             f"Final comparison: {data['rounds']} interleaved rounds of default/pgtune/tuned, each "
             f"warm-up + 3 fixed-work samples, {agg} of 3 (qpm = completed queries per minute, "
             f"estimator {data.get('estimator', 'count')}); "
             f"the table shows the median over rounds; failed rounds (the server stopped "
             f"serving, e.g. OOM-killed backends) are counted, not averaged in.\n")
    cmd = "python -m benchmarks.evidence endtoend" + (" --quick" if quick else "")
    lines = [header("End to end: default vs PGTune vs tuned (memory-bound)", cmd,
                    data["machine"], extra)]
    lines.append("| mix | default qpm | PGTune qpm | tuned qpm | tuned/default | tuned/PGTune | "
                 "failed rounds d/P/t | evals | evals to 90% | s to 90% | restarts | "
                 "failed evals | peak cgroup MB | OOM kills | load avg |")
    lines.append("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    ratios_d: list[float] = []
    ratios_r: list[float] = []
    for mix, e in data["mixes"].items():
        if "error" in e:
            lines.append(f"| {mix} | error: {e['error']} |" + " |" * 13)
            continue
        if "compare" not in e:
            continue
        c, t = e["compare"], e["tuner"]
        d, p, b = c.get("default_qpm"), c.get("pgtune_qpm"), c.get("tuned_qpm")
        rd = b / d if b and d else None
        rr = b / p if b and p else None
        if rd:
            ratios_d.append(rd)
        if rr:
            ratios_r.append(rr)
        peaks = [row["cgroup"].get("peak") for row in c["rounds"]
                 if isinstance(row["cgroup"].get("peak"), int)]
        kills = sum(row["backend_oom_kills"] for row in c["rounds"])
        failed = "/".join(str(c.get(f"{k}_failed_rounds", 0))
                          for k in ("default", "pgtune", "tuned"))
        fails = len(t["failures"])
        lines.append(f"| {mix} | {fmt(d)} | {fmt(p)} | {fmt(b)} | {ratio(rd)} | {ratio(rr)} | "
                     f"{failed} | {t['evaluations']} | {t['evals_to_90pct']} | "
                     f"{fmt(t['seconds_to_90pct'])} | {t['restarts']} | {fails} | "
                     f"{_mb(max(peaks) if peaks else None)} | {kills} | "
                     f"{e.get('load_average_end')} |")
    if ratios_d:
        gm = math.exp(sum(math.log(x) for x in ratios_d) / len(ratios_d))
        lines.append(f"\nGeometric mean tuned/default: {gm:.2f}")
    if ratios_r:
        gm = math.exp(sum(math.log(x) for x in ratios_r) / len(ratios_r))
        ahead = sum(1 for x in ratios_r if x > 1)
        lines.append(f"Geometric mean tuned/PGTune: {gm:.2f}; tuned ahead on {ahead} of "
                     f"{len(ratios_r)} mixes.")
    lines.append("\n## Per-round measurements (qpm, samples)\n")
    for mix, e in data["mixes"].items():
        if "compare" not in e:
            continue
        lines.append(f"**{mix}** (streams {e['streams']}, {e['queries_per_sample']} queries per "
                     f"sample)\n")
        lines.append(f"| round | config | qpm ({agg} of 3) | samples | cgroup usage MB | peak MB | "
                     "failure |")
        lines.append("|---:|---|---:|---|---:|---:|---|")
        for row in e["compare"]["rounds"]:
            cgs = row["cgroup"]
            u, pk = cgs.get("usage"), cgs.get("peak")
            lines.append(f"| {row['round']} | {row['config']} | {fmt(row['qpm'])} | "
                         f"{', '.join(fmt(s) for s in row['samples'])} | "
                         f"{_mb(u)} | {_mb(pk)} | "
                         f"{row['failure'] or ''} |")
        lines.append("\nSettings compared:\n")
        lines.append("| knob | default | PGTune | tuned |")
        lines.append("|---|---|---|---|")
        s = e["compare"]["settings"]
        for k in sorted(s["default"]):
            lines.append(f"| {k} | {s['default'][k]} | {s['pgtune'].get(k)} | "
                         f"{s['tuned'].get(k)} |")
        lines.append("\nTuner decisions: " + ("; ".join(e["tuner"]["decisions"]) or "none") +
                     "\n")
    return "\n".join(lines)


def _mb(x: Any) -> str:
    return f"{x / MB:.0f}" if isinstance(x, int) else "–"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="3 offline + 7 online evaluations, 3-s warm-up (full: 6 + 30, 10 s)")
    parser.add_argument("--scale", type=float, default=0.4, help="TPC-H scale factor")
    parser.add_argument("--memory-limit-mb", type=int, default=256,
                        help="memory cgroup limit of the embedded cluster (MB)")
    parser.add_argument("--mixes", default=";".join(MIXES), help="mixes separated by ';'")
    parser.add_argument("--offline-evals", type=int, default=None)
    parser.add_argument("--online-evals", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--aggregate", default="median", choices=["best", "median", "mean"],
                        help="aggregate of the 3 samples, in the search and the comparison")
    parser.add_argument("--estimator", default="count", choices=["count", "concurrency"],
                        help="throughput of a sample: completions counted, or Little's law")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-e2e")
    parser.add_argument("--tag", default="",
                        help="results go to evidence_endtoend[.quick].<tag> (a repeated run)")
    args = parser.parse_args(argv)
    quick = args.quick
    name = "evidence_endtoend" + (".quick" if quick else "") + (f".{args.tag}" if args.tag else "")
    run(quick, args.scale, args.memory_limit_mb * MB,
        args.offline_evals or (3 if quick else 6), args.online_evals or (7 if quick else 30),
        args.rounds or 3, tuple(m for m in args.mixes.split(";") if m),
        args.state_dir, name, args.aggregate, args.estimator)
    return 0
