"""Paired blocks against unpaired comparisons on the memory-bound setup: how much does
measuring a candidate between two measurements of the reference shrink the noise of a
comparison?

A chain ``A B A B … A`` of two fixed configurations (A: PostgreSQL's defaults; B: A with one
online knob changed) is measured with the tuner's own block protocol (the candidate with
``samples`` samples, the reference with one sample, as :mod:`tuner_client.phases.blocks`
does). For each estimator the benchmark reports the spread (sd of the log) of

* an **unpaired** comparison: one B point over one A point measured at another time (every
  B point against every A point at least two blocks away), and
* a **paired** comparison: one B point over the geometric mean of the two A measurements
  around it (its block),

their variance ratio (how many times fewer blocks a paired comparison needs for the same
precision), and B/A with its 95 % interval from the paired blocks.

Run: ``python -m benchmarks.evidence paired [--blocks 8] [--quick] [--tag T]``; writes
``benchmarks/results/evidence_paired[.quick][.T].{json,md}``.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.evidence.common import (
    fmt,
    header,
    load_average,
    machine,
    target_measurer,
    write_results,
)
from benchmarks.evidence.endtoend import MB, open_memory_bound, tuner_dict
from tuner_client.config import tuner_config_from_dict
from tuner_client.stats.paired import interval_from_logs

logger = logging.getLogger(__name__)

#: estimator name -> how a sample's value is read
ESTIMATORS = {"count": lambda s: s.count_qpm,
              "count_per_cpu": lambda s: (s.count_qpm / s.server_cpu
                                          if s.count_qpm and s.server_cpu else None),
              "progress": lambda s: s.progress_qpm}


def _value(samples: list[Any], estimator: str) -> float | None:
    """A point's value: the geometric mean of its samples' values."""
    values = [v for s in samples if (v := ESTIMATORS[estimator](s)) and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def _spreads(a: list[tuple[int, float]], b: list[tuple[int, float]]
             ) -> tuple[list[float], list[float]]:
    """log(B/A) unpaired (every B point against every A point two blocks away or more) and
    paired (every B point against the two A measurements around it)."""
    unpaired = [math.log(vb / va) for ib, vb in b for ia, va in a if abs(ib - ia) >= 3]
    by_index = dict(a)
    paired = [math.log(vb) - 0.5 * (math.log(by_index[ib - 1]) + math.log(by_index[ib + 1]))
              for ib, vb in b if ib - 1 in by_index and ib + 1 in by_index]
    return unpaired, paired


def _variance_ratio_ci(a: list[tuple[int, float]], b: list[tuple[int, float]], *,
                       resamples: int = 2000, seed: int = 0) -> tuple[float, float] | None:
    """A 95 % bootstrap interval of the variance ratio, resampling the blocks (each B point
    with the A measurements around it) with replacement."""
    rng = np.random.default_rng(seed)
    ratios = []
    for _ in range(resamples):
        picked = [b[int(k)] for k in rng.integers(0, len(b), len(b))]
        unpaired, paired = _spreads(a, picked)
        if len(unpaired) >= 2 and len(paired) >= 2 and statistics.stdev(paired) > 0:
            ratios.append((statistics.stdev(unpaired) / statistics.stdev(paired)) ** 2)
    if len(ratios) < resamples // 2:
        return None
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(low), float(high)


def analyse(chain: list[dict[str, Any]], estimator: str) -> dict[str, Any]:
    """Unpaired and paired spreads of log(B/A) from the chain's values."""
    a = [(i, p[estimator]) for i, p in enumerate(chain) if p["config"] == "A" and p[estimator]]
    b = [(i, p[estimator]) for i, p in enumerate(chain) if p["config"] == "B" and p[estimator]]
    unpaired, paired = _spreads(a, b)
    sd_u = statistics.stdev(unpaired) if len(unpaired) >= 2 else None
    sd_p = statistics.stdev(paired) if len(paired) >= 2 else None
    iv = interval_from_logs(paired, level=0.95) if len(paired) >= 2 else None
    a_logs = [math.log(v) for _, v in a]
    return {"unpaired_sd": sd_u, "paired_sd": sd_p, "blocks": len(paired),
            "variance_ratio": (sd_u / sd_p) ** 2 if sd_u and sd_p else None,
            "variance_ratio_ci": _variance_ratio_ci(a, b) if len(b) >= 3 else None,
            "a_level_sd": statistics.stdev(a_logs) if len(a_logs) >= 2 else None,
            "ratio": iv.ratio if iv else None, "low": iv.low if iv else None,
            "high": iv.high if iv else None}


def markdown(data: dict[str, Any]) -> str:
    extra = (f"Mix `{data['mix']}`, TPC-H SF {data['scale']} in a "
             f"{data['memory_limit_bytes'] / MB:.0f} MB memory cgroup. A = {data['settings']}, "
             f"B = A with "
             f"{data['contrast']}. Chain A B A … A of {data['blocks']} blocks; B points "
             f"{data['samples']} samples of {data['sample_seconds']:g} s, A points 1 sample, "
             f"warm-up {data['warmup_s']:g} s. Wall {data['wall_s']:.0f} s; load average at the "
             f"end {data['load_average_end']}.")
    lines = [header("Paired blocks vs unpaired comparisons (memory-bound)", data["command"],
                    data["machine"], extra), "",
             "| estimator | unpaired sd of log(B/A) | paired sd (block) | variance ratio (95 % "
             "bootstrap CI over blocks) | "
             "A's own level sd | B/A (95 % CI, paired) |",
             "|---|---:|---:|---:|---:|---|"]
    for name, r in data["analysis"].items():
        ci = (f"{r['ratio']:.3f}× ({r['low']:.3f}–{r['high']:.3f}), {r['blocks']} blocks"
              if r["ratio"] else "–")
        vr = r.get("variance_ratio_ci")
        vr_ci = f" ({vr[0]:.1f}–{vr[1]:.1f})" if vr else ""
        lines.append(f"| {name} | {fmt(r['unpaired_sd'])} | {fmt(r['paired_sd'])} | "
                     f"{fmt(r['variance_ratio'])}{vr_ci} | {fmt(r['a_level_sd'])} | {ci} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="3 blocks, short samples")
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--mix", default="4Q6,4Q9,4Q13")
    parser.add_argument("--scale", type=float, default=0.4)
    parser.add_argument("--memory-limit-mb", type=int, default=256)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--sample-seconds", type=float, default=10.0)
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--settings", default="shared_buffers=32MB",
                        help="the base configuration A (knob=value,...); 128MB of "
                             "shared_buffers with 12 streams got backends OOM-killed in the "
                             "256 MB cgroup")
    parser.add_argument("--contrast", default="random_page_cost=20",
                        help="B: A with these online knobs changed")
    parser.add_argument("--tag", default="", help="suffix of the results' file names")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-e2e")
    args = parser.parse_args(argv)
    blocks = 3 if args.quick else args.blocks
    sample_s = 3.0 if args.quick else args.sample_seconds
    limit = args.memory_limit_mb * MB
    cfg = tuner_config_from_dict(tuner_dict(
        "evidence-paired", args.mix, scale=args.scale, memory_limit=limit, offline_evals=1,
        online_evals=1, queries=1, warmup_s=args.warmup_s, seed=5))
    measure = replace(cfg.measure, queries=None, seconds=sample_s, samples=args.samples,
                      estimator="count")
    contrast = dict(item.split("=", 1) for item in args.contrast.split(",") if item)
    base = dict(item.split("=", 1) for item in args.settings.split(",") if item)
    command = "python -m benchmarks.evidence paired" + (" --quick" if args.quick else
                                                        f" --blocks {blocks}")
    command += f" --tag {args.tag}" if args.tag else ""
    data: dict[str, Any] = {"machine": machine(), "command": command, "mix": args.mix,
                            "scale": args.scale, "memory_limit_bytes": limit,
                            "blocks": blocks, "samples": args.samples,
                            "sample_seconds": sample_s, "warmup_s": args.warmup_s,
                            "settings": base, "contrast": contrast, "chain": []}
    t0 = time.monotonic()
    target = open_memory_bound(cfg, args.state_dir)
    try:
        measurer = target_measurer(cfg, target, measure)
        default = measurer.current_settings(list(contrast) + list(base))
        measurer.in_force = dict(default)
        auto_conf = target.controller.read_auto_conf()
        a_settings = {**{k: default[k] for k in contrast}, **base}
        b_settings = {**base, **contrast}
        try:
            for i in range(2 * blocks + 1):
                label = "B" if i % 2 else "A"
                record = measurer.measure(f"{label}-{i}", {},
                                          b_settings if label == "B" else a_settings,
                                          samples=args.samples if label == "B" else 1,
                                          check_budget=False)
                point: dict[str, Any] = {"config": label, "failure": record.failure,
                                         "load_average": load_average(),
                                         "samples": [{"count_qpm": s.count_qpm,
                                                      "server_cpu": s.server_cpu,
                                                      "progress_qpm": s.progress_qpm}
                                                     for s in record.samples]}
                for name in ESTIMATORS:
                    point[name] = _value(record.samples, name)
                data["chain"].append(point)
                logger.info("chain %d/%d %s: %s", i + 1, 2 * blocks + 1, label,
                            {n: fmt(point[n]) for n in ESTIMATORS})
        finally:
            measurer.stop()
            measurer.restore(default, auto_conf=auto_conf)
            measurer.close()
    finally:
        target.close()
    data["wall_s"] = time.monotonic() - t0
    data["load_average_end"] = load_average()
    data["analysis"] = {name: analyse(data["chain"], name) for name in ESTIMATORS}
    write_results("evidence_paired" + (".quick" if args.quick else "")
                  + (f".{args.tag}" if args.tag else ""), data, markdown(data))
    return 0
