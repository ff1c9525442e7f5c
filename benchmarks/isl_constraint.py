"""Time the constraint plugin on a 6-parameter PostgreSQL memory-budget polytope.

Run: ``python -m benchmarks.isl_constraint [--quick]``. Writes
``benchmarks/results/isl_constraint.json`` and ``.md``. Targets (issue 2): bounds narrowing
< 50 ms, per-point feasibility < 50 µs.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import islpy
import numpy as np

from benchmarks.machine import cpu_model
from harmony_base.space import IntParam, RealParam, Space
from plugins.base import HistoryEntry, make_plugin
from plugins.constraint import ConstraintPlugin

RESULTS = Path(__file__).resolve().parent / "results"

#: values in MB on a 4 GB machine with 1 GB kept for the OS, 20 connections
SPACE = Space((
    IntParam("work_mem", 1, 200, unit="MB"),
    IntParam("maintenance_work_mem", 1, 1024, unit="MB"),
    IntParam("temp_buffers", 1, 1024, unit="MB"),
    IntParam("effective_cache_size", 128, 2048, unit="MB"),
    RealParam("random_page_cost", 0.1, 30.0, 0.1),
    IntParam("shared_buffers", 32, 2048, unit="MB"),
))
CONSTRAINTS = [
    "work_mem * connections + maintenance_work_mem + temp_buffers + shared_buffers <= ram - os",
    "effective_cache_size >= shared_buffers",
    "effective_cache_size + shared_buffers <= ram",
    "10 * random_page_cost <= 40 + effective_cache_size / 64",
]
CONSTANTS = {"connections": 20, "ram": 4096, "os": 1024}


@dataclass
class _Session:
    space: Space
    name: str = "bench"
    seed: int = 0
    maximize: bool = True
    replaying: bool = False
    entries: list[HistoryEntry] = field(default_factory=list)

    def history(self) -> list[HistoryEntry]:
        return list(self.entries)


def launch() -> tuple[ConstraintPlugin, Space]:
    plugin = make_plugin("constraint", _Session(SPACE), constraints=CONSTRAINTS,
                         constants=CONSTANTS)
    assert isinstance(plugin, ConstraintPlugin)
    return plugin, plugin.init(SPACE)


def per_call_us(fn: Callable[[Any], Any], items: list[Any], repeats: int) -> dict[str, float]:
    """Mean time per call in µs: median and best over ``repeats`` passes, CPU and wall clock.

    CPU time (``process_time``) is the headline: the machine is shared, and wall time
    mostly measures waiting for a core.
    """
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        for item in items:
            fn(item)
        cpu.append((time.process_time() - c0) / len(items) * 1e6)
        wall.append((time.perf_counter() - w0) / len(items) * 1e6)
    return {"median_us": statistics.median(cpu), "best_us": min(cpu),
            "wall_median_us": statistics.median(wall), "wall_best_us": min(wall)}


def run(quick: bool) -> dict[str, Any]:
    repeats = 5 if quick else 10
    n_points = 2_000 if quick else 10_000

    launched: list[tuple[ConstraintPlugin, Space]] = []
    narrowing = per_call_us(lambda _: launched.append(launch()), list(range(5)), repeats)
    plugin, narrowed = launched[-1]
    region = plugin.region()
    assert region is not None

    rng = np.random.default_rng(0)
    points = [narrowed.random_point(rng) for _ in range(n_points)]
    feasible_share = sum(region.contains(p) for p in points) / len(points)
    contains = per_call_us(region.contains, points, repeats)

    # isl's own membership test per point, for comparison (isl stays the source of truth)
    poly = region.polytope
    ctx = poly.ctx
    few = points[: max(200, n_points // 20)]

    def isl_contains(point: dict[str, Any]) -> bool:
        k = region.indices(point)
        if k is None:
            return False
        coords = " , ".join(str(x) for x in k)
        return bool(islpy.Set.read_from_str(ctx, "{ [" + coords + "] }").is_subset(poly.set))

    agree = all(isl_contains(p) == region.contains(p) for p in few)
    isl_check = per_call_us(isl_contains, few, max(2, repeats // 4))

    sample_rng = np.random.default_rng(1)
    samples = per_call_us(lambda _: region.sample(sample_rng), list(range(500)),
                          max(2, repeats // 4))
    infeasible = [p for p in points if not region.contains(p)][:20 if quick else 60]
    projections = per_call_us(region.project, infeasible, 2)

    bounds = {d["name"]: [d["min"], d["max"]] for d in narrowed.to_dict()}
    return {
        "machine": {"platform": platform.platform(), "processor": cpu_model(),
                    "python": sys.version.split()[0], "islpy": islpy.__version__,
                    "cores": _cores(), "load_average": _load()},
        "command": "python -m benchmarks.isl_constraint" + (" --quick" if quick else ""),
        "polytope": {"parameters": SPACE.to_dict(), "constraints": CONSTRAINTS,
                     "constants": CONSTANTS, "narrowed_bounds": bounds,
                     "grid_points_before": SPACE.grid_size(),
                     "grid_points_after": narrowed.grid_size()},
        "narrowing_ms": {"median": narrowing["median_us"] / 1e3,
                         "best": narrowing["best_us"] / 1e3,
                         "wall_median": narrowing["wall_median_us"] / 1e3,
                         "repeats": repeats, "target": 50.0},
        "contains_us": {**contains, "points": n_points, "feasible_share": feasible_share,
                        "target": 50.0},
        "isl_contains_us": {**isl_check, "points": len(few), "agrees_with_python": agree},
        "sample_us": {**samples, "samples": 500},
        "project_us": {**projections, "points": len(infeasible)},
    }


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _cores() -> int:
    import os

    return os.cpu_count() or 1


def write_markdown(result: dict[str, Any], path: Path) -> None:
    m, n, c = result["machine"], result["narrowing_ms"], result["contains_us"]
    i, s, p = result["isl_contains_us"], result["sample_us"], result["project_us"]
    poly = result["polytope"]
    rows = [
        ("bounds narrowing (parse + isl build + emptiness + dim_min/max)",
         f"{n['median']:.2f} ms", f"{n['best']:.2f} ms", f"{n['wall_median']:.2f} ms", "< 50 ms",
         "met" if n["median"] < n["target"] else "MISSED"),
        (f"feasibility per point, in-process ({c['points']} points, "
         f"{c['feasible_share']:.0%} feasible)", f"{c['median_us']:.2f} µs",
         f"{c['best_us']:.2f} µs", f"{c['wall_median_us']:.2f} µs", "< 50 µs",
         "met" if c["median_us"] < c["target"] else "MISSED"),
        (f"feasibility per point via isl `is_subset` ({i['points']} points, agrees: "
         f"{i['agrees_with_python']})", f"{i['median_us']:.1f} µs", f"{i['best_us']:.1f} µs",
         f"{i['wall_median_us']:.1f} µs", "(comparison)", ""),
        ("sample() per feasible point", f"{s['median_us']:.1f} µs", f"{s['best_us']:.1f} µs",
         f"{s['wall_median_us']:.1f} µs", "", ""),
        (f"project() per infeasible point ({p['points']} points)",
         f"{p['median_us'] / 1e3:.1f} ms", f"{p['best_us'] / 1e3:.1f} ms",
         f"{p['wall_median_us'] / 1e3:.1f} ms", "", ""),
    ]
    lines = [
        "# isl constraint benchmark",
        "",
        f"Command: `{result['command']}` (from the repository root, in `.venv`).",
        "",
        f"Machine: {m['processor']}, {m['cores']} cores (shared with other jobs), "
        f"{m['platform']}, Python {m['python']}, islpy {m['islpy']}.",
        "",
        "Polytope: 6 parameters (" + ", ".join(poly["narrowed_bounds"]) + "), constraints:",
        "",
        *[f"- `{t}`" for t in poly["constraints"]],
        "",
        f"with {poly['constants']}. Grid points: {poly['grid_points_before']:.3e} before "
        f"narrowing, {poly['grid_points_after']:.3e} after. Narrowed bounds: "
        + ", ".join(f"{k} {v[0]}..{v[1]}" for k, v in poly["narrowed_bounds"].items()) + ".",
        "",
        "| operation | CPU median | CPU best | wall median | target | |",
        "|---|---|---|---|---|---|",
        *[f"| {' | '.join(row)} |" for row in rows],
        "",
        "Timings are means per call within a pass; median and best over passes. CPU time "
        "(process_time) is the headline because the cores are shared; wall time is shown too. "
        f"Load average when the run started: {m['load_average']} (other jobs share the cores).",
        "",
    ]
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and points")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results directory")
    args = parser.parse_args(argv)
    result = run(args.quick)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "isl_constraint.json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(result, args.out / "isl_constraint.md")
    sys.stdout.write((args.out / "isl_constraint.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
