"""Evaluations to within 1 % of the optimum for nelder-mead, pro (4 clients) and random on the
synthetic suite: the baseline later strategies have to beat.

"Within 1 %" means ``best - optimum <= 0.01 * typical gap``, the typical gap being the mean of
``f - optimum`` over 4,096 uniformly random points of the same space (a relative 1 % of an
optimum that is 0 would be meaningless). Each cell is the median over seeds of the evaluation
count at which a run first got there, out of a budget of ``200 * dim`` evaluations; a run that
never got there counts as infinite, so a median of "-" means fewer than half the seeds did.
The simplex strategies restart from a new initial simplex whenever they converge, so every run
may use its whole budget. Writes benchmarks/results/strategies.json and .md
(``--quick``: 5 seeds instead of 20, strategies.quick.*).

Run: ``.venv/bin/python -m benchmarks.strategies_table [--quick]``
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

from benchmarks.machine import cpu_model
from harmony.synth import FUNCTIONS, trace_synthetic

RESULTS = Path(__file__).resolve().parent / "results"
DIMS = (2, 5, 10)
GRIDS = ("real", "int")
#: (label, strategy, emulated clients, strategy options)
STRATEGIES: tuple[tuple[str, str, int, dict[str, Any]], ...] = (
    ("nelder-mead", "nelder-mead", 1, {"init_method": "lhs"}),
    ("pro (4 clients)", "pro", 4, {"init_method": "random-point", "init_radius": 0.2}),
    ("random", "random", 1, {}),
)
WITHIN = 0.01
BUDGET_PER_DIM = 200


def _machine() -> dict[str, Any]:
    cpu = cpu_model()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "platform": platform.platform(),
            "load_average": list(os.getloadavg())}


def measure(seeds: int) -> list[dict[str, Any]]:
    """One row per (function, dim, grid, strategy): per-seed evaluations and their median."""
    rows = []
    for function in FUNCTIONS:
        for dim in DIMS:
            for grid in GRIDS:
                budget = BUDGET_PER_DIM * dim
                for label, strategy, parallel, options in STRATEGIES:
                    start = time.process_time()
                    reached: list[int | None] = []
                    for seed in range(seeds):
                        trace = trace_synthetic(
                            strategy, function, dim, grid=grid, evals=budget, seed=seed,
                            parallel=parallel, strategy_options=options,
                            restart_on_converge=strategy != "random", stop_within=WITHIN)
                        reached.append(trace.evals_to_within(WITHIN))
                    median = statistics.median(math.inf if r is None else r for r in reached)
                    rows.append({
                        "function": function, "dim": dim, "grid": grid, "strategy": label,
                        "budget": budget, "seeds": seeds,
                        "median_evals": None if math.isinf(median) else median,
                        "reached": sum(r is not None for r in reached),
                        "per_seed": reached, "cpu_seconds": round(time.process_time() - start, 2),
                    })
    return rows


def markdown(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    m = info["machine"]
    labels = [label for label, *_ in STRATEGIES]
    lines = [
        "# Strategies: evaluations to within 1% of the optimum",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, numpy {m['numpy']}; "
        f"load average at start {m['load_average'][0]:.2f} (the machine is shared).",
        f"Command: `{info['command']}` ({info['seeds']} seeds; {info['wall_seconds']:.0f} s wall, "
        f"{info['cpu_seconds']:.0f} s CPU).",
        "",
        "Cell: median over seeds of the evaluations a run needed to get within 1% of the optimum "
        "(1% of the mean gap of a random point), and how many seeds got there within the budget "
        f"of {BUDGET_PER_DIM}·dim evaluations; `-` = fewer than half did. nelder-mead: 1 client, "
        "Latin-hypercube initial simplex; pro: 4 clients, axis simplex (radius 0.2) around a "
        "random point; both restart when they converge. random: 1 client. Real grid = "
        "continuous box; int grid = 101 (Ackley 129) integer levels per axis, optimum on the grid.",
        "",
        "| function | dim | grid | budget | " + " | ".join(labels) + " |",
        "|---|---:|---|---:|" + "---:|" * len(labels),
    ]
    by_key: dict[tuple[str, int, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_key.setdefault((row["function"], row["dim"], row["grid"]), {})[row["strategy"]] = row
    for (function, dim, grid), cells in by_key.items():
        budget = next(iter(cells.values()))["budget"]
        shown = []
        for label in labels:
            row = cells[label]
            median = row["median_evals"]
            text = "-" if median is None else f"{median:g}"
            shown.append(f"{text} ({row['reached']}/{row['seeds']})")
        lines.append(f"| {function} | {dim} | {grid} | {budget} | " + " | ".join(shown) + " |")
    totals = {label: sum(r["reached"] for r in rows if r["strategy"] == label) for label in labels}
    runs = sum(1 for r in rows if r["strategy"] == labels[0]) * info["seeds"]
    lines += ["", "Runs that got within 1%: " + ", ".join(f"{k} {v}/{runs}"
                                                       for k, v in totals.items()) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="5 seeds instead of 20")
    args = parser.parse_args(argv)
    seeds = 5 if args.quick else 20
    machine = _machine()
    start, start_cpu = time.perf_counter(), time.process_time()
    rows = measure(seeds)
    info = {
        "command": "python -m benchmarks.strategies_table" + (" --quick" if args.quick else ""),
        "seeds": seeds, "within": WITHIN, "budget_per_dim": BUDGET_PER_DIM, "machine": machine,
        "wall_seconds": round(time.perf_counter() - start, 1),
        "cpu_seconds": round(time.process_time() - start_cpu, 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = "strategies.quick" if args.quick else "strategies"
    (RESULTS / f"{stem}.json").write_text(json.dumps({**info, "rows": rows}, indent=2) + "\n")
    text = markdown(rows, info)
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
