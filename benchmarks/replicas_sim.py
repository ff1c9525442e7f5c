"""The replica simulator's curve: 1–64 replicas with PRO against sequential Nelder-Mead.

For each replica count, ``--seeds`` simulated runs (:func:`benchmarks.simulators.replica_sim.
simulate`: the measured noise model: 9.4 % CV per 20-s point, drift ±15 % over 15 min,
1 % outliers, 5 % bias between replicas; paired blocks, values normalised per replica) on
Rosenbrock in 4 dimensions as a throughput surface in (0, 1], for a budget of simulated
wall-clock time. Reported per row: the simulated minutes until the search's pick first had
a true value of at least 0.9 of the best configuration (median and mean with a 95 %
bootstrap interval over seeds; a run that never got there counts as the whole budget, and
the share that got there is given with its Wilson interval), the evaluations measured, and
the true value of the final pick (after final rounds: the 3 best points re-measured 4
times, paired, the rounds spread over the replicas) with its mean, 95 % interval of the
mean, and 5–95 % spread over seeds; and the same for the search's raw pick (its best
measured point) to show the winner's curse growing with the evaluation count.

Run: ``flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.replicas_sim [--quick]``
Writes benchmarks/results/replicas_sim[.quick].json and .md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import binomtest

from benchmarks.machine import cpu_model
from benchmarks.simulators.replica_sim import SimRun, simulate

RESULTS = Path(__file__).parent / "results"
COUNTS = (1, 2, 4, 8, 16, 32, 64)


def _boot_ci(values: list[float], seed: int = 1) -> tuple[float, float]:
    """95 % percentile-bootstrap interval of the mean."""
    rng = np.random.default_rng(seed)
    arr = np.asarray(values, dtype=float)
    means = rng.choice(arr, size=(4000, len(arr)), replace=True).mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def _row(runs: list[SimRun], budget_s: float) -> dict[str, Any]:
    times = [(r.time_to_target if r.time_to_target is not None else budget_s) / 60.0
             for r in runs]
    reached = sum(r.time_to_target is not None for r in runs)
    share = binomtest(reached, len(runs)).proportion_ci(method="wilson")
    finals = [r.final_true for r in runs]
    searched = [r.search_true for r in runs]
    return {
        "replicas": runs[0].replicas, "strategy": runs[0].strategy, "seeds": len(runs),
        "reached": reached, "reached_ci": [share.low, share.high],
        "minutes_median": statistics.median(times), "minutes_mean": statistics.fmean(times),
        "minutes_mean_ci": _boot_ci(times),
        "evaluations_mean": statistics.fmean(r.evaluations for r in runs),
        "final_mean": statistics.fmean(finals), "final_mean_ci": _boot_ci(finals),
        "final_spread": [float(np.percentile(finals, 5)), float(np.percentile(finals, 95))],
        "search_mean": statistics.fmean(searched), "search_mean_ci": _boot_ci(searched),
        "search_spread": [float(np.percentile(searched, 5)),
                          float(np.percentile(searched, 95))],
    }


def _markdown(rows: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# Replica simulator: time to 90 % of the best, and the final pick's true value",
        "",
        f"Command: `{meta['command']}`; {meta['seeds']} seeds per row; budget "
        f"{meta['budget_min']:.0f} simulated minutes; Rosenbrock, 4 dimensions; 20-s points, "
        f"one evaluation = one paired block (reference + candidate = 40 s). Simulated, so "
        f"the machine's load does not enter the numbers (ran on {meta['cpu']}, load "
        f"{meta['load_before']} before, {meta['load_after']} after, {meta['wall_s']:.0f} s).",
        "",
        "| strategy | replicas | reached 0.9 (95 % CI) | minutes to 0.9: median | mean "
        "(95 % CI) | evaluations | final pick: mean (95 % CI) | 5–95 % | search pick: mean "
        "(95 % CI) | 5–95 % |",
        "|---|---:|---|---:|---|---:|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['strategy']} | {r['replicas']} | {r['reached']}/{r['seeds']} "
            f"({100 * r['reached_ci'][0]:.0f}–{100 * r['reached_ci'][1]:.0f} %) | "
            f"{r['minutes_median']:.1f} | {r['minutes_mean']:.1f} "
            f"({r['minutes_mean_ci'][0]:.1f}–{r['minutes_mean_ci'][1]:.1f}) | "
            f"{r['evaluations_mean']:.0f} | {r['final_mean']:.3f} "
            f"({r['final_mean_ci'][0]:.3f}–{r['final_mean_ci'][1]:.3f}) | "
            f"{r['final_spread'][0]:.3f}–{r['final_spread'][1]:.3f} | "
            f"{r['search_mean']:.3f} ({r['search_mean_ci'][0]:.3f}–"
            f"{r['search_mean_ci'][1]:.3f}) | "
            f"{r['search_spread'][0]:.3f}–{r['search_spread'][1]:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="5 seeds, up to 16 replicas, a 60-minute budget")
    parser.add_argument("--seeds", type=int, default=None)
    args = parser.parse_args(argv)
    seeds = args.seeds or (5 if args.quick else 10)
    counts = [c for c in COUNTS if c <= 16] if args.quick else list(COUNTS)
    budget_s = 3600.0 if args.quick else 2 * 3600.0
    load_before = os.getloadavg()
    started = time.monotonic()
    rows = []
    plans = [("nelder-mead", 1)] + [("pro", n) for n in counts]
    command = "flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.replicas_sim" + (
        " --quick" if args.quick else "") + (f" --seeds {args.seeds}" if args.seeds else "")
    stem = "replicas_sim" + (".quick" if args.quick else "")
    RESULTS.mkdir(exist_ok=True)
    for strategy, n in plans:
        runs = [simulate(n, strategy=strategy, seconds=budget_s, seed=s) for s in range(seeds)]
        rows.append(_row(runs, budget_s))
        print(f"{strategy} x{n}: median {rows[-1]['minutes_median']:.1f} min, final "
              f"{rows[-1]['final_mean']:.3f}", flush=True)
        # written after every row: a run cut short by its time limit keeps what it has
        meta = {"command": command, "seeds": seeds, "budget_min": budget_s / 60.0,
                "cpu": cpu_model(), "host": platform.node(),
                "load_before": " ".join(f"{x:.1f}" for x in load_before),
                "load_after": " ".join(f"{x:.1f}" for x in os.getloadavg()),
                "wall_s": time.monotonic() - started}
        (RESULTS / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows},
                                                         indent=2))
        (RESULTS / f"{stem}.md").write_text(_markdown(rows, meta))
    return 0 if all(math.isfinite(r["final_mean"]) for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
