"""How noisy is a throughput sample? Counting completions vs Little's law, on the same data.

The tuner ranks configurations by throughput samples; if repeated samples of *one*
configuration disagree by more than two configurations differ, no search can work. Here one
configuration (``--settings``) is measured ``--points`` times on the memory-bound cluster of
the end-to-end benchmark, each time with the tuner's protocol (apply, warm-up, three
fixed-work samples). Each sample carries both estimates computed from the same completions:
the count (completions per minute in the window) and the concurrency estimate (streams /
mean latency per query, queries started under the measured configuration only). The table
shows their spread: per sample, and per point after the median of three.

Run: ``python -m benchmarks.evidence estimators [--quick]``; writes
``benchmarks/results/evidence_estimators[.quick].{json,md}``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.evidence.common import fmt, header, load_average, machine, ratio, write_results
from benchmarks.evidence.endtoend import MB, open_memory_bound, tuner_dict
from tuner_client.config import tuner_config_from_dict
from tuner_client.measure import Measurer
from tuner_client.target import make_workload, stream_count

logger = logging.getLogger(__name__)


def spread_stats(values: list[float]) -> dict[str, float | None]:
    """Coefficient of variation and max/min of positive values."""
    xs = [v for v in values if v and v > 0]
    if len(xs) < 2:
        return {"n": len(xs), "cv": None, "max_over_min": None, "median": None}
    return {"n": len(xs), "cv": statistics.stdev(xs) / statistics.fmean(xs),
            "max_over_min": max(xs) / min(xs), "median": statistics.median(xs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="4 points instead of 8")
    parser.add_argument("--mix", default="4Q6,4Q9,4Q13")
    parser.add_argument("--scale", type=float, default=0.4)
    parser.add_argument("--memory-limit-mb", type=int, default=256)
    parser.add_argument("--points", type=int, default=None)
    parser.add_argument("--queries-per-stream", type=int, default=1,
                        help="fixed work of a sample: K queries per stream (results get .qK)")
    parser.add_argument("--settings", default="shared_buffers=32MB",
                        help="the configuration measured, knob=value separated by ','")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-e2e")
    args = parser.parse_args(argv)
    points = args.points or (4 if args.quick else 8)
    limit = args.memory_limit_mb * MB
    probe = tuner_config_from_dict(tuner_dict("evidence-est", args.mix, scale=args.scale,
                                              memory_limit=limit, offline_evals=1,
                                              online_evals=1, queries=1, warmup_s=1, seed=1))
    streams = stream_count(probe)
    cfg = tuner_config_from_dict(tuner_dict(
        "evidence-est", args.mix, scale=args.scale, memory_limit=limit, offline_evals=1,
        online_evals=1, queries=streams * args.queries_per_stream, warmup_s=3, seed=5,
        estimator="concurrency"))
    settings = dict(item.split("=", 1) for item in args.settings.split(",") if item)
    data: dict[str, Any] = {"machine": machine(), "quick": args.quick, "mix": args.mix,
                            "scale": args.scale, "memory_limit_bytes": limit, "streams": streams,
                            "queries_per_sample": streams * args.queries_per_stream,
                            "settings": settings, "points": []}
    t0 = time.monotonic()
    target = open_memory_bound(cfg, args.state_dir)
    try:
        measurer = Measurer(target.dsn, target.catalog, make_workload(cfg, target.dsn),
                            cfg.measure, controller=target.controller,
                            restart_timeout_s=cfg.database.restart_timeout_s)
        default = measurer.current_settings(list(settings))
        measurer.in_force = dict(default)
        auto_conf = target.controller.read_auto_conf()
        try:
            measurer.apply(settings, check_budget=False)
            for i in range(points):
                # nudge an online knob back and forth so every point is a fresh apply
                nudge = {"random_page_cost": "4.1" if i % 2 else "4"}
                record = measurer.measure(f"point-{i}", {}, {**settings, **nudge},
                                          check_budget=False)
                data["points"].append({
                    "failure": record.failure,
                    "count": [s.count_qpm for s in record.samples],
                    "concurrency": [s.concurrency_qpm for s in record.samples],
                    "completed": [s.completed for s in record.samples],
                    "seconds": [s.seconds for s in record.samples]})
                logger.info("point %d: count %s, concurrency %s", i,
                            [fmt(s.count_qpm) for s in record.samples],
                            [fmt(s.concurrency_qpm) for s in record.samples])
        finally:
            measurer.stop()
            measurer.restore({**default, "random_page_cost": "4"}, auto_conf=auto_conf)
            measurer.close()
    finally:
        target.close()
    data["wall_s"] = time.monotonic() - t0
    data["load_average_end"] = load_average()
    data["summary"] = summary(data)
    write_results("evidence_estimators" + (".quick" if args.quick else "")
                  + (f".q{args.queries_per_stream}" if args.queries_per_stream != 1 else ""),
                  data, markdown(data))
    return 0


def summary(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ok = [p for p in data["points"] if p["failure"] is None]
    for key in ("count", "concurrency"):
        samples = [v for p in ok for v in p[key] if v]
        medians = [statistics.median([v for v in p[key] if v]) for p in ok
                   if any(v for v in p[key])]
        out[key] = {"per_sample": spread_stats(samples), "per_point": spread_stats(medians)}
    return out


def markdown(data: dict[str, Any]) -> str:
    s = data["summary"]
    extra = (f"\nMix `{data['mix']}` ({data['streams']} streams), TPC-H scale {data['scale']} "
             f"in a {data['memory_limit_bytes'] / MB:.0f} MB memory cgroup; configuration "
             f"{data['settings']} measured {len(data['points'])} times (warm-up 3 s, 3 "
             f"fixed-work samples of {data.get('queries_per_sample', data['streams'])} queries, "
             f"waiting for every query of the "
             f"mix). Wall {fmt(data['wall_s'])} s.\n")
    per_stream = data.get("queries_per_sample", data["streams"]) // data["streams"]
    cmd = ("python -m benchmarks.evidence estimators" + (" --quick" if data["quick"] else "")
           + (f" --points {len(data['points'])} --queries-per-stream {per_stream}"
              if per_stream != 1 else ""))
    lines = [header("Throughput estimators: counting vs Little's law, same samples", cmd,
                    data["machine"], extra)]
    lines.append("| estimator | per-sample CV | per-sample max/min | per-point (median of 3) CV | "
                 "per-point max/min | median qpm |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    for key, label in (("count", "count (completions / window)"),
                       ("concurrency", "concurrency (streams / mean latency)")):
        a, b = s[key]["per_sample"], s[key]["per_point"]
        lines.append(f"| {label} | {ratio(a['cv'])} | {ratio(a['max_over_min'])} | "
                     f"{ratio(b['cv'])} | {ratio(b['max_over_min'])} | {fmt(b['median'])} |")
    failed = sum(1 for p in data["points"] if p["failure"])
    lines.append(f"\nFailed points: {failed}.")
    return "\n".join(lines) + "\n"
