"""The quiet model's A/A coverage against the number of slices (issue 27): session 11 found the
per-transaction interval covering 93.4–93.7 % at a nominal 95 % in the quiet closed-loop model
of :mod:`benchmarks.pertx_claim_rule` (1,000 runs, seeds from 0) and could not explain it.
Here the same model (30 queries per slice and arm at 20 slices, A/A) runs on more seeds, and
every run is cut into 10, 20, 40 and 80 slices, so the slice counts are compared on the same
runs.

Run: ``python -m benchmarks.pertx_aa_slices [--runs 3000]``; writes
``benchmarks/results/pertx_aa_slices.{json,md}``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

import numpy as np

from benchmarks.evidence.common import header, load_average, machine, write_results
from benchmarks.evidence.power import clopper_pearson
from benchmarks.pertx_claim_rule import MODELS
from benchmarks.simulators.per_transaction_sim import RunModel, seconds_for, simulate_run
from tuner_client.stats.per_transaction import compare

SLICES = (10, 20, 40, 80)
#: the seeds are reported in blocks of this many runs (the first is session 11's)
BLOCK = 1000


def markdown(data: dict[str, Any]) -> str:
    lines = [header("Quiet A/A coverage against the number of slices (issue 27)",
                    data["command"], data["machine"],
                    f"Simulated A/A runs of the `quiet` model of benchmarks/pertx_claim_rule.py "
                    f"({data['seconds']:.0f}-s runs: 30 queries per slice and arm at 20 "
                    f"slices), each cut into {', '.join(map(str, SLICES))} slices; coverage "
                    f"of the 95 % interval with a 95 % Clopper-Pearson interval."), "",
             "| slices | runs | coverage | median half-width (log) | sd of the log estimate |",
             "|---:|---:|---|---:|---:|"]
    for c in data["cells"]:
        low, high = c["coverage_ci"]
        lines.append(f"| {c['slices']} | {c['runs']} | {100 * c['covered'] / c['runs']:.1f} % "
                     f"({100 * low:.1f}–{100 * high:.1f}) | {c['median_half_width']:.4f} | "
                     f"{c['sd_log']:.4f} |")
    lines += ["", "At 20 slices, per block of seeds:", "",
              "| seeds | covered | coverage |", "|---|---:|---|"]
    for b in data["blocks"]:
        low, high = clopper_pearson(b["covered"], b["runs"])
        lines.append(f"| {b['first']}–{b['first'] + b['runs'] - 1} | {b['covered']} of "
                     f"{b['runs']} | {100 * b['covered'] / b['runs']:.1f} % "
                     f"({100 * low:.1f}–{100 * high:.1f}) |")
    lines += ["", f"Wall {data.get('wall_s', 0):.0f} s; load average at the end "
                  f"{data.get('load_average_end')}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3000)
    args = parser.parse_args(argv)
    quiet = MODELS["quiet"]
    seconds = seconds_for(RunModel(quiet.templates, 1.0, quiet.drift_sd, quiet.burst_p,
                                   quiet.burst), 30)
    model = RunModel(quiet.templates, seconds, quiet.drift_sd, quiet.burst_p, quiet.burst).aa()
    covered = {k: 0 for k in SLICES}
    halves: dict[int, list[float]] = {k: [] for k in SLICES}
    logs: dict[int, list[float]] = {k: [] for k in SLICES}
    blocks: list[int] = []
    t0 = time.monotonic()
    for seed in range(args.runs):
        trace = simulate_run(model, seed)
        for k in SLICES:
            result = compare(trace, seed=seed, resamples=1000,
                             slice_s=seconds / k * (1 + 1e-9))
            hit = result.interval.low <= 1.0 <= result.interval.high
            covered[k] += hit
            halves[k].append(math.log(result.interval.high / result.interval.low) / 2)
            logs[k].append(math.log(result.interval.ratio))
            if k == 20:
                if seed % BLOCK == 0:
                    blocks.append(0)
                blocks[-1] += hit
    data: dict[str, Any] = {
        "machine": machine(), "seconds": seconds,
        "command": " ".join(["python -m benchmarks.pertx_aa_slices",
                             *(sys.argv[1:] if argv is None else argv)]),
        "cells": [{"slices": k, "runs": args.runs, "covered": covered[k],
                   "coverage_ci": clopper_pearson(covered[k], args.runs),
                   "median_half_width": float(np.median(halves[k])),
                   "sd_log": float(np.std(logs[k], ddof=1))} for k in SLICES],
        "blocks": [{"first": i * BLOCK, "runs": min(BLOCK, args.runs - i * BLOCK),
                    "covered": c} for i, c in enumerate(blocks)],
        "wall_s": time.monotonic() - t0, "load_average_end": load_average()}
    write_results("pertx_aa_slices", data, markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
