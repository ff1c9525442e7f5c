"""Which knobs move throughput at all? One knob at a time against a base, memory-bound.

Before trusting (or blaming) a search, a skeptic asks how large the effects it looks for
are, next to the noise. On the same memory-limited embedded cluster as the end-to-end
benchmark, each candidate below changes one knob from a base configuration (``--base``,
default ``shared_buffers=32MB``: with PostgreSQL's 128MB in a 256 MB cgroup, backends get
OOM-killed and every other knob's effect drowns in crashes); PostgreSQL's plain default is
measured too. All are measured with the tuner's protocol, interleaved (A/B/C/.../A/B/C), for
several rounds. The table shows each candidate's median over rounds relative to the base's
median, failed rounds, and the base's own round-to-round spread (the noise floor an effect
has to clear).

Run: ``python -m benchmarks.evidence sensitivity [--quick]``; writes
``benchmarks/results/evidence_sensitivity[.quick].{json,md}``.
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
from benchmarks.evidence.endtoend import MB, compare, database_bytes, open_memory_bound, tuner_dict
from tuner_client.config import tuner_config_from_dict

logger = logging.getLogger(__name__)

#: one knob away from the base
CANDIDATES: dict[str, dict[str, str]] = {
    "shared_buffers 16MB": {"shared_buffers": "16MB"},
    "shared_buffers 64MB": {"shared_buffers": "64MB"},
    "work_mem 16MB": {"work_mem": "16MB"},
    "work_mem 48MB": {"work_mem": "48MB"},
    "random_page_cost 1.1": {"random_page_cost": "1.1"},
    "random_page_cost 20": {"random_page_cost": "20"},
    "effective_cache_size 64MB": {"effective_cache_size": "64MB"},
    "effective_cache_size 1GB": {"effective_cache_size": "1GB"},
    "jit off": {"jit": "off"},
    "no parallel workers": {"max_parallel_workers_per_gather": "0"},
}
QUICK = ("shared_buffers 16MB", "work_mem 48MB", "random_page_cost 1.1", "jit off",
         "no parallel workers")


def run(mix: str, scale: float, memory_limit: int, rounds: int, names: tuple[str, ...],
        aggregate: str, state_dir: Path, result_name: str, quick: bool,
        base: dict[str, str]) -> dict[str, Any]:
    probe = tuner_config_from_dict(tuner_dict("evidence-e2e", mix, scale=scale,
                                              memory_limit=memory_limit, offline_evals=1,
                                              online_evals=1, queries=1, warmup_s=1, seed=1))
    streams = probe.workload.streams
    cfg = tuner_config_from_dict(tuner_dict(
        "evidence-e2e", mix, scale=scale, memory_limit=memory_limit, offline_evals=1,
        online_evals=1, queries=streams, warmup_s=3, seed=7, aggregate=aggregate))
    target = open_memory_bound(cfg, state_dir)
    data: dict[str, Any] = {"machine": machine(), "mix": mix, "scale": scale,
                            "memory_limit_bytes": memory_limit, "rounds": rounds,
                            "aggregate": aggregate, "streams": streams, "quick": quick,
                            "base": base}
    try:
        data["database_bytes"] = database_bytes(target.dsn)
        configs = {"default": {}, "base": base,
                   **{n: {**base, **CANDIDATES[n]} for n in names}}
        t0 = time.monotonic()
        data["compare"] = compare(cfg, target, configs, rounds)
        data["wall_s"] = time.monotonic() - t0
        data["load_average_end"] = load_average()
    finally:
        target.close()
    write_results(result_name, data, markdown(data))
    return data


def per_config(data: dict[str, Any]) -> dict[str, tuple[list[float], int]]:
    """Each configuration's measured values and its number of failed rounds."""
    out: dict[str, tuple[list[float], int]] = {}
    for row in data["compare"]["rounds"]:
        vals, failed = out.get(row["config"], ([], 0))
        if row["qpm"] is not None:
            vals.append(row["qpm"])
        else:
            failed += 1
        out[row["config"]] = (vals, failed)
    return out


def markdown(data: dict[str, Any]) -> str:
    size = data.get("database_bytes") or 0
    lim = data["memory_limit_bytes"]
    extra = (f"\nMix `{data['mix']}` ({data['streams']} streams), TPC-H scale {data['scale']} "
             f"({size / MB:.0f} MB) in a {lim / MB:.0f} MB memory cgroup. Base: "
             f"{data.get('base')}; default: PostgreSQL's own. Each configuration: "
             f"warm-up 3 s, 3 samples of {data['streams']} queries, {data['aggregate']} of 3; "
             f"{data['rounds']} interleaved rounds; wall {fmt(data.get('wall_s'))} s.\n")
    cmd = "python -m benchmarks.evidence sensitivity" + (" --quick" if data["quick"] else "")
    lines = [header("Knob sensitivity: one knob at a time vs the default (memory-bound)", cmd,
                    data["machine"], extra)]
    vals = per_config(data)
    d = vals.get("base", ([], 0))[0]
    dmed = statistics.median(d) if d else None
    lines.append("| configuration | median qpm | / base | min..max over rounds | failed rounds | "
                 "OOM kills |")
    lines.append("|---|---:|---:|---|---:|---:|")
    for name, (xs, failed) in vals.items():
        med = statistics.median(xs) if xs else None
        rel = med / dmed if med and dmed else None
        kills = sum(r["backend_oom_kills"] for r in data["compare"]["rounds"]
                    if r["config"] == name)
        span = f"{fmt(min(xs))}..{fmt(max(xs))}" if xs else "–"
        lines.append(f"| {name} | {fmt(med)} | {ratio(rel)} | {span} | {failed} | {kills} |")
    if d:
        lines.append(f"\nNoise floor: the base's rounds span {fmt(min(d))}..{fmt(max(d))} qpm "
                     f"(max/min {fmt(max(d) / min(d))}).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="5 candidates, 2 rounds")
    parser.add_argument("--mix", default="4Q6,4Q9,4Q13")
    parser.add_argument("--scale", type=float, default=0.4)
    parser.add_argument("--memory-limit-mb", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--aggregate", default="median", choices=["best", "median", "mean"])
    parser.add_argument("--only", default=None, help="candidate names separated by ';'")
    parser.add_argument("--base", default="shared_buffers=32MB",
                        help="the base configuration, knob=value separated by ','")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-e2e")
    args = parser.parse_args(argv)
    names = (tuple(args.only.split(";")) if args.only else
             QUICK if args.quick else tuple(CANDIDATES))
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        parser.error(f"--only: unknown candidates {unknown}; known: {list(CANDIDATES)}")
    slug = args.mix.replace(",", "-")
    result_name = f"evidence_sensitivity_{slug}" + (".quick" if args.quick else "")
    run(args.mix, args.scale, args.memory_limit_mb * MB, args.rounds or (2 if args.quick else 3),
        names, args.aggregate, args.state_dir, result_name, args.quick,
        dict(item.split("=", 1) for item in args.base.split(",") if item))
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    raise SystemExit(main())
