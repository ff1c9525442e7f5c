"""Short slices for the search's per-transaction ranking (issue 27 Time): coverage and width
of :func:`tuner_client.stats.per_transaction.compare` when a run of millisecond queries is cut
into slices of :func:`~tuner_client.stats.per_transaction.ranking_slice_s` (10 mean latencies,
at least 0.25 s) against the 1-s slices every claim keeps, on simulated runs with a known truth
(:mod:`benchmarks.simulators.per_transaction_sim`: closed-loop streams; the machine's level drifts
from second to second and bursts for a whole second, so slices shorter than a second share it).

Models: ``demo`` (the demo's SF 0.01 mix: 2 streams of 40 ms, 2 of 10 ms, 1 of 30 ms) and
``pgbench`` (4 clients of 2-ms transactions), both with the simulator's default noise (drift
0.05/s, a 1.6x burst in 5 % of seconds). Runs of 2, 4 and 8 s: the search's first looks.

Run: ``python -m benchmarks.pertx_short_slices [--runs 1000]``; writes
``benchmarks/results/pertx_short_slices.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from benchmarks.evidence.common import header, load_average, machine, write_results
from benchmarks.evidence.power import clopper_pearson
from benchmarks.simulators.per_transaction_sim import RunModel, Template, simulate_run, with_truth
from harmony_base.errors import ConfigError
from tuner_client.stats.per_transaction import MIN_SLICE_S, MIN_SLICES, compare, ranking_slice_s

MODELS: dict[str, dict[str, Template]] = {
    "demo": {"Q1": Template(2, 0.040, 1.0, 0.3), "Q6": Template(2, 0.010, 1.0, 0.3),
             "Q13": Template(1, 0.030, 1.0, 0.4)},
    "pgbench": {"tpcb": Template(4, 0.002, 1.0, 0.6)},
}
TRUTHS = (1.0, 1.05, 1.10)
SECONDS = (2.0, 4.0, 8.0)


def cell(templates: dict[str, Template], truth: float, seconds: float, short: bool, runs: int
         ) -> dict[str, Any]:
    base = RunModel(templates, seconds=seconds)
    model = base if truth == 1.0 else with_truth(base, truth, next(iter(templates)))
    covered, too_few, widths, slices = 0, 0, [], []
    for seed in range(runs):
        trace = simulate_run(model, seed)
        try:
            result = compare(trace, level=0.95, seed=seed, resamples=1000,
                             min_slice_s=ranking_slice_s(trace) if short else MIN_SLICE_S)
        except ConfigError:  # fewer than MIN_SLICES slices: the search would look again
            too_few += 1
            continue
        covered += result.interval.low <= model.truth() <= result.interval.high
        widths.append(result.half_width)
        slices.append(result.slice_s)
    return {"truth": model.truth(), "seconds": seconds, "slices": "short" if short else "1 s",
            "slice_s": float(np.median(slices)), "runs": runs - too_few, "too_few": too_few,
            "covered": covered, "coverage_ci": clopper_pearson(covered, runs - too_few),
            "median_half_width": float(np.median(widths))}


def markdown(data: dict[str, Any]) -> str:
    lines = [header("Short slices for the search's per-transaction ranking (issue 27)",
                    data["command"], data["machine"],
                    "Simulated runs (benchmarks/simulators/per_transaction_sim.py); models in "
                    "benchmarks/pertx_short_slices.py. Coverage of the 95 % interval with a "
                    "95 % Clopper-Pearson interval, over the runs that had 8 slices (the "
                    "others the search would look at again 2 s later)."), "",
             "| model | truth | run (s) | slices | slice (s, median) | runs with 8 slices | "
             "coverage | median half-width |", "|---|---:|---:|---|---:|---:|---|---:|"]
    for c in data["cells"]:
        low, high = c["coverage_ci"]
        lines.append(f"| {c['model']} | {c['truth']:.3f} | {c['seconds']:.0f} | {c['slices']} "
                     f"| {c['slice_s']:.2f} | {c['runs']} | {100 * c['covered'] / c['runs']:.1f} % "
                     f"({100 * low:.1f}–{100 * high:.1f}) | ±{100 * c['median_half_width']:.1f} "
                     f"% |")
    lines += ["", f"Wall {data.get('wall_s', 0):.0f} s; load average at the end "
                  f"{data.get('load_average_end')}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=1000)
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.pertx_short_slices",
                        *(sys.argv[1:] if argv is None else argv)])
    data: dict[str, Any] = {"machine": machine(), "command": command, "cells": []}
    t0 = time.monotonic()
    for name, templates in MODELS.items():
        for truth in TRUTHS:
            for seconds in SECONDS:
                # 1-s slices need MIN_SLICES seconds; the short ones are what the search uses
                for short in (True, False) if seconds >= MIN_SLICES * MIN_SLICE_S else (True,):
                    data["cells"].append({"model": name, **cell(templates, truth, seconds,
                                                                short, args.runs)})
                    data["wall_s"] = time.monotonic() - t0
                    data["load_average_end"] = load_average()
                    write_results("pertx_short_slices", data, markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
