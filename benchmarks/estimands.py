"""Why switchback read max_parallel_workers_per_gather 2 → 0 at ~1.15× where the search's
window block read ~1.3× on the demo mix (session 12): two objectives, not two biases?

The windows the tuner measures by default count queries (``progress``: queries per minute),
so each template weighs by its share of the *completions*, and the demo's fast Q6 completes
most. Per-transaction runs and switchback weigh each template by its share of the reference's
*time* (work weights), where the slow ones count most. When a knob speeds the templates up
by different amounts, the two read different ratios of the same two configurations.

This measures both from the same whole-server windows: ``--rounds`` interleaved rounds (AB,
BA, ...) of ``--window`` seconds on the demo's TPC-H mix (SF 0.01, embedded cluster, no
cgroup), A = 2 workers, B = 0. Per round: the count ratio (B's completions per second over
A's), the work-weighted speedup (per-template mean latencies, A's time shares), and each
template's speedup; a 95 % t interval over rounds for each.

    flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.estimands [--rounds 12]

Writes ``benchmarks/results/estimands[.<tag>].{json,md}``.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from benchmarks.evidence.common import header, machine, write_results
from benchmarks.evidence.endtoend import tuner_dict
from benchmarks.evidence.pertx import _window_speedup, window_rounds
from benchmarks.evidence.restart import uptime
from tuner_client.config import tuner_config_from_dict
from tuner_client.servers.target import open_target
from tuner_client.stats.paired import interval_from_logs
from workloads.per_transaction.from_config import make_assignment
from workloads.per_transaction.trace import Trace

MIX = "2Q1,2Q6,1Q13"
KNOB = "max_parallel_workers_per_gather"


def _rate(trace: Trace, name: str | None = None) -> float:
    """Finished queries (of template ``name``, or all) per second of the window."""
    keep = trace.ok if name is None else trace.ok & (trace.template
                                                     == trace.templates.index(name))
    return float(keep.sum()) / trace.seconds


def _interval(values: list[float]) -> list[float] | None:
    iv = interval_from_logs([math.log(v) for v in values if v and v > 0], level=0.95,
                            method="t")
    return None if iv is None else [iv.ratio, iv.low, iv.high]


def run(args: argparse.Namespace) -> dict[str, Any]:
    config = tuner_dict("estimands", MIX, scale=args.scale, memory_limit=0, offline_evals=1,
                        online_evals=1, queries=1, warmup_s=1, seed=1)
    config["database"] = {"restart_timeout_s": 120}  # no memory cgroup
    cfg = tuner_config_from_dict(config)
    target = open_target(cfg, args.state_dir)
    per_round: list[dict[str, Any]] = []

    def speedup(a: Trace, b: Trace) -> float | None:
        names = sorted(set(a.templates) & set(b.templates))
        per_round.append({
            "count": _rate(b) / _rate(a),
            "work": _window_speedup(a, b),
            "templates": {n: _rate(b, n) / _rate(a, n) for n in names if _rate(a, n)},
            "completions_a": {n: int(_rate(a, n) * a.seconds) for n in names}})
        return per_round[-1]["work"]

    def runner(configs: list[dict[str, str]], seconds: float, seed: int) -> Trace:
        return make_assignment(cfg.workload, target.dsn, configs, seed=seed).run(int(seconds))

    try:
        start = uptime()
        window_rounds(runner, target.dsn, {KNOB: "2"}, {KNOB: "0"}, rounds=args.rounds,
                      window_s=args.window, seed=7, speedup=speedup)
    finally:
        target.close()
    names = sorted({n for r in per_round for n in r["templates"]})
    return {"machine": machine(), "mix": MIX, "scale": args.scale, "rounds": per_round,
            "window_s": args.window, "uptime_start": start, "uptime_end": uptime(),
            "count": _interval([r["count"] for r in per_round]),
            "work": _interval([r["work"] for r in per_round]),
            "templates": {n: _interval([r["templates"][n] for r in per_round
                                        if n in r["templates"]]) for n in names},
            "completion_share": {n: sum(r["completions_a"].get(n, 0) for r in per_round)
                                 / sum(sum(r["completions_a"].values()) for r in per_round)
                                 for n in names}}


def markdown(data: dict[str, Any], command: str) -> str:
    def iv(v: list[float] | None) -> str:
        return "—" if v is None else f"{v[0]:.3f}× ({v[1]:.3f}–{v[2]:.3f})"

    extra = (f"\nTPC-H SF {data['scale']} mix `{data['mix']}` (one stream per query), embedded "
             f"cluster, no cgroup; {len(data['rounds'])} interleaved rounds of "
             f"{data['window_s']:g}-s whole-server windows, {KNOB} 2 (A) against 0 (B).\n\n"
             f"uptime before: `{data['uptime_start']}`; after: `{data['uptime_end']}`.\n")
    lines = [header("One pair of configurations, two objectives", command, data["machine"],
                    extra),
             "| objective | B/A (95 % t over rounds) |", "|---|---|",
             f"| queries per second (what windows count) | {iv(data['count'])} |",
             f"| work-weighted (per-transaction, switchback) | {iv(data['work'])} |", "",
             "| template | share of A's completions | B/A completions (95 %) |", "|---|---:|---|"]
    for name, v in data["templates"].items():
        lines.append(f"| {name} | {100 * data['completion_share'][name]:.1f} % | {iv(v)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.estimands",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--scale", type=float, default=0.01)
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp/harmony-bench-estimands"))
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    command = ("flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.estimands "
               + " ".join(argv or []))
    data = run(args)
    text = markdown(data, command)
    write_results("estimands" + (f".{args.tag}" if args.tag else ""), data, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
