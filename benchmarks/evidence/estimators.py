"""How noisy is a throughput sample? Every estimator of the tuner, on the same samples.

The tuner ranks configurations by throughput samples; if repeated samples of *one*
configuration disagree by more than two configurations differ, no search can work. Here one
configuration (``--settings``) is measured ``--points`` times on the memory-bound cluster of
the end-to-end benchmark with the tuner's protocol (apply, warm-up, ``--samples`` time-window
samples of ``--sample-seconds``; ~30 s a point by default). Each sample carries every
estimate from the same completions, so the comparison is at equal time:

* ``qpm``: completed queries per minute (the count; the study's measure);
* ``concurrency``: streams / mean latency per query (Little's law);
* ``work``: each completion credited with its template's reference cost (mean latency under
  the reference: this configuration's first measurement, frozen), per wall second;
* ``work (Little)``: streams x reference cost / mean latency per query;
* ``work per CPU-s`` and ``qpm per CPU-s``: per CPU-second of the PostgreSQL server (the
  cgroup v1 cpuacct controller: the benchmark moves the server into a cpuacct cgroup of its
  own; ``--no-cpu-cgroup`` reads ``/proc`` instead).

The table gives the spread per sample, per point (median of the point's samples, as the
tuner aggregates) and over longer windows (the completions of k consecutive points pooled).

Run: ``python -m benchmarks.evidence estimators [--quick]``; writes
``benchmarks/results/evidence_estimators[.quick].{json,md}``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.evidence.common import (
    fmt,
    header,
    load_average,
    machine,
    ratio,
    target_measurer,
    write_results,
)
from benchmarks.evidence.endtoend import MB, open_memory_bound, tuner_dict
from tuner_client.config import tuner_config_from_dict
from tuner_client.measurer import Measurer
from tuner_client.measurer.server_cpu import CGROUP_ROOT, parent_pid
from workloads.mix import parse_mix

logger = logging.getLogger(__name__)

#: (key, label) of every estimator in the table, in order
ESTIMATORS = (
    ("qpm", "qpm (completions / window)"),
    ("concurrency", "concurrency (streams / mean latency)"),
    ("work", "work (completions x reference cost / window)"),
    ("work_little", "work, Little (streams x reference cost / mean latency)"),
    ("work_per_cpu", "work per server CPU-second"),
    ("qpm_per_cpu", "qpm per server CPU-second"),
    ("progress", "progress (queries credited by run time inside the window)"),
    ("progress_per_cpu", "progress per server CPU-second"),
)


def pct(x: float | None) -> str:
    """A coefficient of variation in percent (``–`` for none)."""
    return "–" if x is None or not math.isfinite(x) else f"{100 * x:.1f} %"


def spread_stats(values: list[float | None]) -> dict[str, float | None]:
    """Coefficient of variation and max/min of the positive values (n counts them)."""
    xs = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    if len(xs) < 2:
        return {"n": len(xs), "cv": None, "max_over_min": None, "median": None}
    return {"n": len(xs), "cv": statistics.stdev(xs) / statistics.fmean(xs),
            "max_over_min": max(xs) / min(xs), "median": statistics.median(xs)}


def pooled(samples: list[dict[str, Any]], costs: dict[str, float],
           streams: dict[str, int]) -> dict[str, float | None]:
    """Every estimator over ``samples`` taken as one window (their completions pooled)."""
    seconds = sum(s["seconds"] for s in samples)
    done: dict[str, int] = {}
    busy: dict[str, float] = {}
    for s in samples:
        for q, (n, mean) in s["per_query"].items():
            if n and mean is not None:
                done[q] = done.get(q, 0) + n
                busy[q] = busy.get(q, 0.0) + n * mean
    out: dict[str, float | None] = dict.fromkeys(k for k, _ in ESTIMATORS)
    if seconds <= 0:
        return out
    out["qpm"] = 60.0 * sum(done.values()) / seconds
    if all(q in done and costs.get(q) for q in done):
        out["work"] = sum(n * costs[q] for q, n in done.items()) / seconds
    if all(done.get(q) for q in streams):
        means = {q: busy[q] / done[q] for q in streams}
        out["concurrency"] = 60.0 * sum(n / means[q] for q, n in streams.items())
        if all(costs.get(q) for q in streams):
            out["work_little"] = sum(n * costs[q] / means[q] for q, n in streams.items())
    cpu = [s["server_cpu"] for s in samples]
    if all(c is not None and c > 0 for c in cpu):
        cpu_s = sum(c * s["seconds"] for c, s in zip(cpu, samples, strict=True))
        if out["work"] is not None:
            out["work_per_cpu"] = out["work"] * seconds / cpu_s
        out["qpm_per_cpu"] = out["qpm"] * seconds / cpu_s
    progress = [s.get("progress_qpm") for s in samples]
    if all(v is not None for v in progress):  # credits of adjacent windows add up
        out["progress"] = sum(v * s["seconds"] for v, s in zip(progress, samples, strict=True)
                              if v is not None) / seconds
        if all(c is not None and c > 0 for c in cpu):
            out["progress_per_cpu"] = out["progress"] * seconds / cpu_s
    return out


# -- a cpuacct cgroup of the server's own ------------------------------------------------------
def postmaster_of(measurer: Measurer) -> int:
    pid = parent_pid(int(measurer.conn().info.backend_pid))
    if pid is None:
        raise RuntimeError("the server's postmaster is not visible from here")
    return pid


def cpu_cgroup_join(postmaster: int) -> Path | None:
    """Move the postmaster and its children into a new cpuacct cgroup (root only)."""
    root = CGROUP_ROOT / "cpuacct"
    if not (root / "cpuacct.usage").exists():
        logger.warning("no cgroup v1 cpuacct controller at %s: CPU read from /proc", root)
        return None
    cg = root / f"harmony-est-{os.getpid()}"
    try:
        cg.mkdir(exist_ok=True)
        (cg / "cgroup.procs").write_text(str(postmaster))  # children forked later follow
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and parent_pid(int(entry.name)) == postmaster:
                with contextlib.suppress(OSError):  # a child may exit meanwhile
                    (cg / "cgroup.procs").write_text(entry.name)
    except OSError as exc:
        logger.warning("cannot use a cpuacct cgroup (%s): CPU read from /proc", exc)
        return None
    logger.info("PostgreSQL moved into cpuacct cgroup %s", cg)
    return cg


def cpu_cgroup_leave(cg: Path | None) -> None:
    if cg is None:
        return
    with contextlib.suppress(OSError):
        for pid in (cg / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (cg.parent / "cgroup.procs").write_text(pid)
        cg.rmdir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="8 points instead of 32")
    parser.add_argument("--mix", default="4Q6,4Q9,4Q13")
    parser.add_argument("--scale", type=float, default=0.4)
    parser.add_argument("--memory-limit-mb", type=int, default=256)
    parser.add_argument("--points", type=int, default=None)
    parser.add_argument("--samples", type=int, default=3, help="samples per point")
    parser.add_argument("--sample-seconds", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--reference-samples", type=int, default=6,
                        help="samples of the reference measurement that fixes the costs")
    parser.add_argument("--windows", default="1,2,4",
                        help="pooled windows, in points (consecutive points pooled)")
    parser.add_argument("--no-cpu-cgroup", action="store_true",
                        help="read the server's CPU from /proc, not from a cpuacct cgroup")
    parser.add_argument("--settings", default="shared_buffers=32MB",
                        help="the configuration measured, knob=value separated by ','")
    parser.add_argument("--contrast", default="",
                        help="online knob=value,... of a second configuration measured in "
                             "alternation (A B B A) to see each estimator's effect over its "
                             "noise (results get .contrast)")
    parser.add_argument("--tag", default="", help="suffix of the result files")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-e2e")
    args = parser.parse_args(argv)
    points = args.points or (8 if args.quick else 32)
    windows = [int(w) for w in args.windows.split(",") if w]
    limit = args.memory_limit_mb * MB
    cfg = tuner_config_from_dict(tuner_dict(
        "evidence-est", args.mix, scale=args.scale, memory_limit=limit, offline_evals=1,
        online_evals=1, queries=1, warmup_s=args.warmup_s, seed=5))
    measure = replace(cfg.measure, queries=None, seconds=args.sample_seconds,
                      samples=args.samples, estimator="count")
    streams = dict(parse_mix(args.mix).streams)
    settings = dict(item.split("=", 1) for item in args.settings.split(",") if item)
    contrast = dict(item.split("=", 1) for item in args.contrast.split(",") if item)
    data: dict[str, Any] = {
        "machine": machine(), "quick": args.quick, "mix": args.mix, "scale": args.scale,
        "memory_limit_bytes": limit, "streams": streams, "samples": args.samples,
        "sample_seconds": args.sample_seconds, "warmup_s": args.warmup_s,
        "settings": settings, "contrast": contrast, "points": [], "windows": windows,
        "argv": argv}
    t0 = time.monotonic()
    target = open_memory_bound(cfg, args.state_dir)
    cg: Path | None = None
    try:
        measurer = target_measurer(cfg, target, measure)
        default = measurer.current_settings(list(settings) + list(contrast))
        measurer.in_force = dict(default)
        auto_conf = target.controller.read_auto_conf()
        try:
            measurer.apply(settings, check_budget=False)  # a restart: a new postmaster
            if not args.no_cpu_cgroup:
                cg = cpu_cgroup_join(postmaster_of(measurer))
            # the reference: this configuration's first measurement, costs frozen
            measurer.config = replace(measure, estimator="work")
            costs = measurer.learn_reference(args.reference_samples)
            data["reference_costs"] = costs
            for i in range(points):
                # nudge an online knob back and forth so every point is a fresh apply
                nudge = {"random_page_cost": "4.1" if i % 2 else "4"}
                # with a contrast: A B B A ..., each configuration's points a fresh apply
                label = "B" if contrast and i % 4 in (1, 2) else "A"
                wanted = {**settings, **nudge}
                if contrast:
                    wanted = {**wanted, **(contrast if label == "B" else
                                           {k: default[k] for k in contrast})}
                record = measurer.measure(f"point-{i}", {}, wanted, check_budget=False)
                samples: list[dict[str, Any]] = [{"seconds": s.seconds, "count_qpm": s.count_qpm,
                            "concurrency_qpm": s.concurrency_qpm, "work_per_s": s.work_per_s,
                            "server_cpu": s.server_cpu, "cpu_source": s.cpu_source,
                            "work_per_cpu": s.work_per_cpu, "per_query": s.per_query,
                            "progress_qpm": s.progress_qpm}
                           for s in record.samples]
                data["points"].append({"failure": record.failure, "samples": samples,
                                       "config": label,
                                       "load_average": load_average()})
                logger.info("point %d/%d: qpm %s, work %s, server cpu %s, load %s", i + 1,
                            points, [fmt(s["count_qpm"]) for s in samples],
                            [fmt(s["work_per_s"]) for s in samples],
                            [fmt(s["server_cpu"]) for s in samples], load_average())
        finally:
            measurer.stop()
            cpu_cgroup_leave(cg)
            measurer.restore({**default, "random_page_cost": "4"}, auto_conf=auto_conf)
            measurer.close()
    finally:
        target.close()
    data["wall_s"] = time.monotonic() - t0
    data["load_average_end"] = load_average()
    data["summary"] = summary(data)
    write_results("evidence_estimators" + (".quick" if args.quick else "")
                  + (".contrast" if contrast else "")
                  + (f".{args.tag}" if args.tag else ""), data, markdown(data))
    return 0


def summary(data: dict[str, Any]) -> dict[str, Any]:
    """The spread of every estimator (of configuration A); with a contrast, also B's and
    each estimator's B/A ratio with Welch's t over the points (pooled 1-point windows)."""
    ok = [p for p in data["points"] if p["failure"] is None]
    out = spreads(data, [p for p in ok if p.get("config", "A") == "A"])
    if data.get("contrast"):
        costs, streams = data["reference_costs"], data["streams"]
        out["B"] = spreads(data, [p for p in ok if p.get("config") == "B"])
        out["effect"] = {}
        for key, _ in ESTIMATORS:
            by = {c: [pooled(p["samples"], costs, streams)[key] for p in ok
                      if p.get("config", "A") == c] for c in ("A", "B")}
            a = [v for v in by["A"] if v is not None]
            b = [v for v in by["B"] if v is not None]
            if len(a) < 2 or len(b) < 2:
                out["effect"][key] = {"ratio": None, "t": None}
                continue
            se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
            diff = statistics.fmean(b) - statistics.fmean(a)
            out["effect"][key] = {"ratio": statistics.fmean(b) / statistics.fmean(a),
                                  "t": diff / se if se > 0 else None}
    return out


def spreads(data: dict[str, Any], ok: list[dict[str, Any]]) -> dict[str, Any]:
    costs, streams = data["reference_costs"], data["streams"]
    per_sample = [pooled([s], costs, streams) for p in ok for s in p["samples"]]
    out: dict[str, Any] = {"estimators": {}}
    for key, _ in ESTIMATORS:
        row: dict[str, Any] = {"per_sample": spread_stats([v[key] for v in per_sample])}
        medians = []
        for p in ok:
            vals = [pooled([s], costs, streams)[key] for s in p["samples"]]
            got = [v for v in vals if v is not None]
            # the tuner's median of the point's samples; None when a sample lacks the value
            medians.append(statistics.median(got) if len(got) == len(vals) else None)
        row["per_point_median"] = spread_stats(medians)
        for k in data["windows"]:
            groups = [ok[i:i + k] for i in range(0, len(ok) - k + 1, k)]
            vals2 = [pooled([s for p in g for s in p["samples"]], costs, streams)[key]
                     for g in groups]
            row[f"pooled_{k}"] = spread_stats(vals2)
        out["estimators"][key] = row
    secs = [sum(s["seconds"] for s in p["samples"]) for p in ok]
    out["point_seconds"] = statistics.fmean(secs) if secs else None
    loads = [p["load_average"][0] for p in data["points"]]
    out["load_1min"] = {"min": min(loads), "median": statistics.median(loads),
                        "max": max(loads)} if loads else None
    cpus = [s["server_cpu"] for p in ok for s in p["samples"] if s["server_cpu"]]
    out["server_cpu"] = spread_stats(cpus)
    out["cpu_source"] = sorted({s["cpu_source"] for p in ok for s in p["samples"]
                                if s["cpu_source"]})
    return out


def markdown(data: dict[str, Any]) -> str:
    s = data["summary"]
    point_s = s["point_seconds"] or 0.0
    loads = s["load_1min"] or {}
    extra = (f"\nMix `{data['mix']}` ({sum(data['streams'].values())} streams), TPC-H scale "
             f"{data['scale']} in a {data['memory_limit_bytes'] / MB:.0f} MB memory cgroup; "
             f"configuration {data['settings']} measured {len(data['points'])} times (warm-up "
             f"{data['warmup_s']} s, {data['samples']} time-window samples of "
             f"{data['sample_seconds']} s: {point_s:.0f} s of samples a point). Reference "
             f"costs (mean latency s, this configuration's first measurement): "
             f"{ {q: round(c, 2) for q, c in data['reference_costs'].items()} }. Server CPU "
             f"from {', '.join(s['cpu_source']) or 'nowhere'}: median "
             f"{fmt(s['server_cpu']['median'])} cores. 1-min load average over the points: "
             f"{loads.get('min')}–{loads.get('max')} (median {loads.get('median')}), at the "
             f"end {data['load_average_end']}. Wall {fmt(data['wall_s'])} s.\n")
    argv = " ".join(data.get("argv") or [])
    cmd = "python -m benchmarks.evidence estimators" + (f" {argv}" if argv else "")
    lines = [header("Throughput estimators at equal time: count, Little's law, work, per "
                    "CPU-second", cmd, data["machine"], extra)]
    wins = data["windows"]
    head = ["estimator", f"per-sample CV ({data['sample_seconds']:.0f} s)",
            f"per-point CV (median of {data['samples']})"] + [
        f"pooled {k * point_s:.0f} s CV (n)" for k in wins] + ["per-point max/min"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|---|" + "---:|" * (len(head) - 1))
    for key, label in ESTIMATORS:
        row = s["estimators"][key]
        cells = [label, pct(row["per_sample"]["cv"]), pct(row["per_point_median"]["cv"])]
        cells += [f"{pct(row[f'pooled_{k}']['cv'])} ({row[f'pooled_{k}']['n']})"
                  for k in wins]
        cells.append(ratio(row["per_point_median"]["max_over_min"]))
        lines.append("| " + " | ".join(cells) + " |")
    if data.get("contrast"):
        lines[-len(ESTIMATORS) - 2] = (f"Configuration A (points A B B A ...; B adds "
                                       f"{data['contrast']}):\n\n" + lines[-len(ESTIMATORS) - 2])
        lines.append(f"\nContrast: B/A per estimator (mean of the points' pooled "
                     f"{point_s:.0f}-s values) and Welch's t; B's own per-point CV.\n")
        lines.append("| estimator | B/A | t | B per-point CV (median of samples) |")
        lines.append("|---|---:|---:|---:|")
        for key, label in ESTIMATORS:
            eff = s["effect"][key]
            t = eff["t"]
            lines.append(f"| {label} | {ratio(eff['ratio'])} | "
                         f"{'–' if t is None else f'{t:.1f}'} | "
                         f"{pct(s['B']['estimators'][key]['per_point_median']['cv'])} |")
    failed = sum(1 for p in data["points"] if p["failure"])
    lines.append(f"\nn: windows with a value (Little's-law "
                 f"estimators need a completion of every query in the window). Failed points: "
                 f"{failed}.")
    return "\n".join(lines) + "\n"
