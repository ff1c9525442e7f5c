"""The online search's first ten evaluations on the capture benchmark's measured surface
(issue 51, capture): how often does the search measure a point within 90 % of the space's
best gain, and how often is that point its best?

:mod:`benchmarks.capture` found the search, not the measurement, short: 3 of 5 default runs
recommended PGTune's rules (63 % of the best gain) because the search never reached work_mem
≤ 4MB with random_page_cost ≥ 1.5 (``capture.s32``). This replays the search alone, with the
strategy and options the tuner's online session uses (:data:`ONLINE_SESSION`), on the
surface that run's grid measured by pgbench: each grid point's plan class and that class's
mean log-ratio over the original (``--surface``, a ``capture.<tag>.json``). A point between
grid values reads as the nearest grid value (work_mem by log distance). Each evaluation reads
the surface plus normal noise of ``--noise`` (log sd; per-transaction evaluations here read
±1.5–3 % at 95 %, an sd of about 0.01–0.015). The search's best is the point with the best
noisy reading. Two starts, as the tuner has them: a first pass's Latin hypercube (no start
point), and a later pass's or a screened run's axis simplex around a point (here the
original). work_mem is searched on the scale the tuner resolves (log since s33,
:func:`tuner_client.config.knobspace.log_by_default`) or on the linear one before it.

    python -m benchmarks.capture_search --tag T

Pure computation (seconds); writes benchmarks/results/capture_search.<tag>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.evidence.common import RESULTS, header, machine, write_results
from harmony_base.space import IntParam, Point, RealParam, Space
from strategies import make_strategy
from tuner_client.config.knobspace import log_by_default
from tuner_client.config.model import ONLINE_SESSION

#: the user's ranges in benchmarks.default_path.user_config, as the tuner resolves them
SPACE = Space((IntParam("work_mem", 1, 128, unit="MB",
                        log=log_by_default("online", "memory", 1, 128)),
               RealParam("random_page_cost", 1.0, 8.0, step=0.5),
               IntParam("max_parallel_workers_per_gather", 0, 2)))
#: the same before s33: work_mem on a linear scale
LINEAR = Space((IntParam("work_mem", 1, 128, unit="MB"), *SPACE.params[1:]))
ORIGINAL: Point = {"work_mem": 128, "random_page_cost": 1.0, "max_parallel_workers_per_gather": 0}
CAPTURED = 0.9


class Surface:
    """The grid's measured plan classes: a point's log-ratio over the original."""

    def __init__(self, data: dict[str, Any]):
        self.table: dict[tuple[int, float, int], float] = {}
        for cls in data["classes"]:
            for p in cls["points"]:
                self.table[_grid_key(p)] = float(cls["log"])
        self.work_mem = sorted({k[0] for k in self.table})
        self.cost = sorted({k[1] for k in self.table})
        self.best = max(self.table.values())

    def log(self, point: Point) -> float:
        wm = min(self.work_mem, key=lambda v: abs(math.log(v) - math.log(point["work_mem"])))  # type: ignore[arg-type]
        cost = min(self.cost, key=lambda v: abs(v - float(point["random_page_cost"])))  # type: ignore[arg-type]
        return self.table[(wm, cost, int(point["max_parallel_workers_per_gather"]))]  # type: ignore[call-overload]


def _grid_key(p: dict[str, str]) -> tuple[int, float, int]:
    return (int(p["work_mem"].removesuffix("MB")), float(p["random_page_cost"]),
            int(p["max_parallel_workers_per_gather"]))


def old_first_simplex(size: int, radius: float = 0.3) -> list[Point]:
    """The first simplex before s33: axis steps of ``radius`` from the original, the second
    ring the other way, a step out of the unit cube taken back the way it came (at the
    original's range ends, onto the first ring's vertices)."""
    x0 = LINEAR.to_unit(ORIGINAL)
    out = [dict(ORIGINAL)]
    for j in range(1, size):
        axis, ring = (j - 1) % LINEAR.dim, (j - 1) // LINEAR.dim
        step = (1.0 if ring % 2 == 0 else -1.0) * radius * (1 + ring // 2)
        u = np.array(x0, dtype=float)
        moved = u[axis] + step
        u[axis] = min(max(moved if 0.0 <= moved <= 1.0 else u[axis] - step, 0.0), 1.0)
        out.append(LINEAR.from_unit(u))
    return out


def search(surface: Surface, space: Space, options: dict[str, Any], seed: int, noise: float,
           evals: int) -> dict[str, Any]:
    """One search: its best reading's share of the best gain, and whether it measured a point
    within :data:`CAPTURED` of it at all."""
    strategy = make_strategy("nelder-mead", space, seed=seed, **options)
    rng = np.random.default_rng(10_000 + seed)
    seen: list[tuple[float, float]] = []
    while len(seen) < evals:
        trial = strategy.ask()
        if trial is None:
            break
        true = surface.log(trial.point)
        reading = true + float(rng.normal(0.0, noise))
        strategy.tell(trial.id, -reading)
        seen.append((reading, true))
    best_true = max(seen)[1]
    return {"share": best_true / surface.best,
            "measured": any(t / surface.best >= CAPTURED for _, t in seen)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.capture_search")
    parser.add_argument("--tag", default="run")
    parser.add_argument("--surface", type=Path, default=RESULTS / "capture.s32.json")
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--evals", type=int, default=10)
    parser.add_argument("--noise", type=float, nargs="+", default=[0.015, 0.03])
    args = parser.parse_args(argv)
    surface = Surface(json.loads(args.surface.read_text()))
    default = dict(ONLINE_SESSION.strategy_options)
    at_original = {**default, "init_point": ORIGINAL}
    variants: list[tuple[str, Space, dict[str, Any]]] = [
        ("first pass (Latin hypercube), work_mem on a log scale: the default", SPACE, default),
        ("first pass (Latin hypercube), work_mem linear: before s33", LINEAR, default),
        ("from the original, log scale, combine: the default", SPACE, at_original),
        ("from the original, log scale, without combine", SPACE,
         {**at_original, "combine": False}),
        ("from the original, linear, combine", LINEAR, at_original),
        ("from the original, linear, far-end first simplex without combine", LINEAR,
         {**at_original, "combine": False}),
        ("from the original, linear, the first simplex before s33 (two vertices repeated)",
         LINEAR, {"simplex_size": default["simplex_size"],
                  "init_simplex": old_first_simplex(int(default["simplex_size"]))}),
    ]
    rows = []
    for name, space, options in variants:
        for noise in args.noise:
            runs = [search(surface, space, options, seed, noise, args.evals)
                    for seed in range(args.seeds)]
            rows.append({"variant": name, "options": {k: v for k, v in options.items()
                                                       if k != "init_simplex"},
                         "noise": noise, "captured": sum(r["share"] >= CAPTURED for r in runs),
                         "measured": sum(r["measured"] for r in runs),
                         "mean_share": float(np.mean([r["share"] for r in runs])),
                         "seeds": args.seeds})
    command = "python -m benchmarks.capture_search " + " ".join(argv or sys.argv[1:])
    data = {"machine": machine(), "args": {k: str(v) for k, v in vars(args).items()},
            "best_log": surface.best, "rows": rows}
    lines = [header("The online search on the capture benchmark's surface (issue 51)",
                    command.strip(), data["machine"]),
             f"Surface: `{args.surface.name}`'s grid by pgbench, {len(surface.table)} points; "
             f"the best reads {math.exp(surface.best):.2f}× over the original. "
             f"{args.evals} evaluations from the original, {args.seeds} seeds a row.\n",
             "| search | noise (log sd) | best reading ≥ 90 % of the best gain | a point ≥ 90 % "
             "measured | mean share |", "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['noise']} | "
                     f"{r['captured']} of {r['seeds']} | {r['measured']} of {r['seeds']} | "
                     f"{r['mean_share']:.0%} |")
    write_results(f"capture_search.{args.tag}", data, "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
