"""The per-transaction claim rule with few queries per slice (issue 27): coverage, false claims
and power of the slice bootstrap's two intervals on simulated runs with a known truth
(:mod:`benchmarks.simulators.per_transaction_sim`: closed-loop TPC-H-like streams, a fast
template and a slow heavy-tailed one that carries the effect, a drifting machine with bursts).

Per cell: a model (``loaded``: log-normal sigma 0.6 and 1.0, drift 0.02/s, a 1.6x burst in 5 %
of seconds; ``quiet``: the sigmas the power runs measured at load ~5-20, 0.27 and 0.12, drift
0.01/s, no bursts), 10, 30 or 100 queries per slice and arm at 20 slices, a truth (A/A, 1.05x,
1.10x), and both intervals of :func:`tuner_client.stats.per_transaction.compare`:
``student-t`` (the bootstrap's standard error times Student's quantile on slices − 1 degrees
of freedom, the rule up to session 10) and ``kurtosis-df`` (the same standard error, Student's
quantile on the degrees of freedom the slices' kurtosis leaves,
:func:`tuner_client.stats.per_transaction.effective_df`).

Run: ``python -m benchmarks.pertx_claim_rule [--runs 300] [--models loaded,quiet]
[--per-slice 10,30,100]``; writes ``benchmarks/results/pertx_claim_rule.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from typing import Any

from benchmarks.evidence.common import header, load_average, machine, write_results
from benchmarks.evidence.power import clopper_pearson
from benchmarks.simulators.per_transaction_sim import (
    RunModel,
    Template,
    rates,
    seconds_for,
    with_truth,
)
from tuner_client.stats.per_transaction import INTERVALS

MODELS: dict[str, RunModel] = {
    "loaded": RunModel({"Q6": Template(6, 0.8, 1.0, 0.6), "Q13": Template(2, 3.0, 1.0, 1.0)},
                       drift_sd=0.02, burst_p=0.05, burst=1.6),
    "quiet": RunModel({"Q6": Template(6, 0.27, 1.0, 0.27), "Q13": Template(2, 1.0, 1.0, 0.12)},
                      drift_sd=0.01, burst_p=0.0, burst=1.0),
}
TRUTHS = (1.0, 1.05, 1.10)


def cell(model: RunModel, per_slice: float, truth: float, interval: str, runs: int,
         seed: int) -> dict[str, Any]:
    sized = RunModel(model.templates, 1.0, model.drift_sd, model.burst_p, model.burst)
    sized = RunModel(model.templates, seconds_for(sized, per_slice), model.drift_sd,
                     model.burst_p, model.burst)
    sim = sized.aa() if truth == 1.0 else with_truth(sized, truth, "Q13")
    r = rates(sim, range(seed, seed + runs), interval)  # type: ignore[arg-type]
    return {"truth": sim.truth(), "seconds": sim.seconds, "interval": interval, **asdict(r),
            "coverage_ci": clopper_pearson(r.covered, r.runs),
            "claims_ci": clopper_pearson(r.claims, r.runs)}


def markdown(data: dict[str, Any]) -> str:
    lines = [header("Per-transaction claim rule with few queries per slice (issue 27)",
                    data["command"], data["machine"],
                    "Simulated runs (benchmarks/simulators/per_transaction_sim.py); models in "
                    "benchmarks/pertx_claim_rule.py. Coverage and claims with 95 % "
                    "Clopper-Pearson intervals; a claim is the 95 % interval above 1 (a false "
                    "claim when the truth is 1)."), "",
             "| model | queries / slice / arm | truth | interval | coverage | claims | "
             "median half-width |", "|---|---:|---:|---|---|---|---:|"]
    for c in data["cells"]:
        cov, cl = c["coverage_ci"], c["claims_ci"]
        lines.append(f"| {c['model']} | {c['queries_per_slice_and_arm']:.0f} | "
                     f"{c['truth']:.3f} | {c['interval']} | "
                     f"{100 * c['covered'] / c['runs']:.1f} % ({100 * cov[0]:.1f}–"
                     f"{100 * cov[1]:.1f}) | {100 * c['claims'] / c['runs']:.1f} % "
                     f"({100 * cl[0]:.1f}–{100 * cl[1]:.1f}) | "
                     f"±{100 * c['median_half_width']:.1f} % |")
    lines += ["", f"Wall {data.get('wall_s', 0):.0f} s; load average at the end "
                  f"{data.get('load_average_end')}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--models", default="loaded,quiet")
    parser.add_argument("--per-slice", default="10,30,100")
    parser.add_argument("--tag", default="")
    args = parser.parse_args(argv)
    command = " ".join(["python -m benchmarks.pertx_claim_rule",
                        *(sys.argv[1:] if argv is None else argv)])
    data: dict[str, Any] = {"machine": machine(), "command": command, "cells": []}
    name = "pertx_claim_rule" + (f".{args.tag}" if args.tag else "")
    t0 = time.monotonic()
    for model in args.models.split(","):
        for per_slice in (float(q) for q in args.per_slice.split(",")):
            for k, truth in enumerate(TRUTHS):
                for interval in INTERVALS:
                    data["cells"].append({"model": model, **cell(
                        MODELS[model], per_slice, truth, interval, args.runs, 1000 * k)})
                    data["wall_s"] = time.monotonic() - t0
                    data["load_average_end"] = load_average()
                    write_results(name, data, markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
