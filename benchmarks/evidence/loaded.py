"""A/A half-width of the per-transaction design beside a second load (issue 27, Evidence): the
memory-bound TPC-H mix and pgbench TPC-B, each once with only the machine's own load and once
beside ``stress --cpu N``, interleaved (mix by mix, without then with).

Each run: both arms the same configuration (PostgreSQL's defaults), every transaction drawing
one at random (:mod:`workloads.per_transaction`), for ``seconds``; the interval after each
mark is computed on the run's prefix (:func:`benchmarks.evidence.pertx.aa_half_widths`, the
block bootstrap of :mod:`tuner_client.stats.per_transaction`, and its anytime-valid
confidence sequence). Goal: half-width ≤ 3 % (95 %) after ≤ 5 minutes. The load average is
recorded before, during (sampled every 10 s) and after every run.

Run: ``python -m benchmarks.evidence loaded [--mixes tpch,pgbench] [--seconds 300]
[--stress-cpus 2] [--tag T]``; writes ``benchmarks/results/evidence_loaded[.T].{json,md}``.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.evidence.common import header, load_average, machine, write_results
from benchmarks.evidence.endtoend import MB, open_memory_bound, tuner_dict
from benchmarks.evidence.pertx import Runner, aa_half_widths, fmt_iv, pgbench_dsn, tpch_runner
from benchmarks.evidence.power import MIX, STATE_DIR
from tuner_client.config import tuner_config_from_dict
from workloads.per_transaction import PgbenchAssignment, builtin_template

logger = logging.getLogger(__name__)

MARKS = (60.0, 120.0, 300.0)


def tpcb_runner(dsn: str, clients: int, scale: int) -> Runner:
    template = builtin_template("tpcb-like")
    return lambda configs, seconds, seed: PgbenchAssignment(
        dsn, configs, [template], clients=clients, variables={"scale": scale},
        seed=seed + 1).run(max(1, round(seconds)))


def with_load(run: Runner, seconds: float, seed: int, stress_cpus: int,
              trace_name: str | None = None) -> dict[str, Any]:
    """One A/A run, beside ``stress --cpu stress_cpus`` when that is > 0; the load sampled."""
    samples: list[list[float]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(10.0):
            samples.append(load_average())

    stress = None
    if stress_cpus > 0:
        exe = shutil.which("stress") or "/usr/bin/stress"
        # its own process group: stress forks its workers, and they go with it
        stress = subprocess.Popen([exe, "--cpu", str(stress_cpus), "--timeout",
                                   f"{int(seconds) + 120}s"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(2.0)
    before = load_average()
    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    try:
        out = aa_half_widths(run, seconds, seed, marks=MARKS, trace_name=trace_name)
    finally:
        done.set()
        if stress is not None:
            os.killpg(stress.pid, signal.SIGTERM)
            stress.wait(timeout=30)
    one_minute = [s[0] for s in samples]
    out.update({"stress_cpus": stress_cpus, "load_average_start": before,
                "load_average_end": load_average(),
                "load_1min_during": {"min": min(one_minute, default=None),
                                     "max": max(one_minute, default=None),
                                     "mean": sum(one_minute) / len(one_minute)
                                     if one_minute else None}})
    return out


def markdown(data: dict[str, Any]) -> str:
    extra = (f"TPC-H mix `{data['mix']}` at SF 0.1 (Python streams) and pgbench TPC-B "
             f"(tpcb-like, scale {data['pgbench_scale']}, {data['clients']} clients) on the "
             f"embedded cluster in a {data['memory_limit_bytes'] / MB:.0f} MB memory cgroup; "
             f"A/A per transaction, {data['seconds']:g} s per run; the second load is "
             f"`stress --cpu {data['stress_cpus']}` on top of what the other sessions ran. "
             "Interval: block bootstrap over 20 time slices of the prefix (Student multiplier), "
             "95 %; anytime: t-mixture confidence sequence over the slices.")
    lines = [header("A/A half-width per transaction beside a second load (issue 27 Evidence)",
                    data["command"], data["machine"], extra), "",
             "| mix | second load | load avg 1-min during (min–max) | after | transactions | "
             "B/A (95 % CI) | half-width | anytime (95 %) |",
             "|---|---|---|---:|---:|---|---:|---|"]
    for r in data["runs"]:
        during = r["load_1min_during"]
        load = (f"{during['min']:.1f}–{during['max']:.1f}" if during["min"] is not None
                else "–")
        second = f"stress --cpu {r['stress_cpus']}" if r["stress_cpus"] else "none"
        for mark in MARKS:
            m = r.get(f"{mark:g}s")
            if m is None:
                continue
            lines.append(f"| {r['mix']} | {second} | {load} | {mark:g} s | "
                         f"{m['transactions']:,} | {fmt_iv(m['interval'])} | "
                         f"±{100 * m['half_width']:.1f} % | {fmt_iv(m['anytime'])} |")
    lines += ["", "Where the width comes from (whole run; each template's own share of the "
              "variance of log L, its work weight and its queries per arm):", ""]
    for r in data["runs"]:
        second = f"stress --cpu {r['stress_cpus']}" if r["stress_cpus"] else "no stress"
        lines.append(f"- {r['mix']}, {second}: " + "; ".join(
            f"{name} {100 * t['variance_share']:.0f} % (weight {t['weight']:.2f}, "
            f"{t['queries'][0]}/{t['queries'][1]})"
            for name, t in sorted(r.get("templates", {}).items(),
                                  key=lambda kv: -kv[1]["variance_share"])))
    lines += ["", f"Wall {data.get('wall_s', 0):.0f} s; load average at the end "
                  f"{data.get('load_average_end')}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mixes", default="tpch,pgbench")
    parser.add_argument("--mix", default=MIX)
    parser.add_argument("--memory-limit-mb", type=int, default=320)
    parser.add_argument("--pgbench-scale", type=int, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--stress-cpus", type=int, default=2)
    parser.add_argument("--without", action="store_true",
                        help="also a run without stress before each run beside it")
    parser.add_argument("--tag", default="")
    parser.add_argument("--state-dir", type=Path, default=STATE_DIR)
    args = parser.parse_args(argv)
    limit = args.memory_limit_mb * MB
    command = " ".join(["python -m benchmarks.evidence loaded",
                        *(sys.argv[2:] if argv is None else argv)])
    data: dict[str, Any] = {
        "machine": machine(), "command": command, "mix": args.mix, "memory_limit_bytes": limit,
        "pgbench_scale": args.pgbench_scale, "clients": args.clients, "seconds": args.seconds,
        "stress_cpus": args.stress_cpus, "runs": []}
    name = "evidence_loaded" + (f".{args.tag}" if args.tag else "")
    cfg = tuner_config_from_dict(tuner_dict(
        "evidence-loaded", args.mix, scale=0.1, memory_limit=limit, offline_evals=1,
        online_evals=1, queries=1, warmup_s=1, seed=1))
    t0 = time.monotonic()
    target = open_memory_bound(cfg, args.state_dir)
    try:
        for k, mix in enumerate(m for m in args.mixes.split(",") if m):
            run = (tpch_runner(target.dsn, args.mix) if mix == "tpch" else
                   tpcb_runner(pgbench_dsn(target, args.pgbench_scale), args.clients,
                               args.pgbench_scale))
            for cpus in ((0, args.stress_cpus) if args.without else (args.stress_cpus,)):
                trace_name = f"{name}.{mix}.stress{cpus}"
                data["runs"].append({"mix": mix, "trace": trace_name,
                                     **with_load(run, args.seconds, 99 + k, cpus, trace_name)})
                data["wall_s"], data["load_average_end"] = time.monotonic() - t0, load_average()
                write_results(name, data, markdown(data))
    finally:
        target.close()
    data["wall_s"], data["load_average_end"] = time.monotonic() - t0, load_average()
    write_results(name, data, markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
