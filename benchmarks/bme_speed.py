"""Speed of the BME library: Mattson stack (target >= 1 M references/s) and partitioning
3 pools × 10,000 pages (target <= 1 s); also one curve fit. Writes
benchmarks/results/bme_speed.json and .md (``--quick``: bme_speed.quick.*).

Run: ``.venv/bin/python -m benchmarks.bme_speed [--quick]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.machine import cpu_model
from bme import BMEParams, fit_bme, miss_probability, partition, stack_histogram

RESULTS = Path(__file__).resolve().parent / "results"


def _best_of(repeats: int, func: Callable[[], Any]) -> tuple[float, float]:
    """Best wall-clock and best CPU seconds over ``repeats`` runs (the machine is shared, so
    CPU time is the steadier of the two)."""
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        func()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return min(wall), min(cpu)


def _machine() -> dict[str, Any]:
    cpu = cpu_model()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "platform": platform.platform(),
            "load_average": list(os.getloadavg())}


def bench_mattson(n_refs: int, repeats: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(0)
    traces = {
        "zipf(1.2) over 100k pages": rng.zipf(1.2, n_refs) % 100_000,
        "uniform over 50k pages": rng.integers(0, 50_000, n_refs),
        "hot 1k + scan 200k pages": np.where(rng.random(n_refs) < 0.7,
                                             rng.integers(0, 1000, n_refs),
                                             1000 + np.arange(n_refs) % 200_000),
    }
    rows = []
    for name, trace in traces.items():
        def run(t: np.ndarray = trace) -> None:
            stack_histogram(t)

        seconds, cpu = _best_of(repeats, run)
        rows.append({"trace": name, "refs": n_refs, "distinct": int(np.unique(trace).size),
                     "seconds": seconds, "cpu_seconds": cpu,
                     "refs_per_second": n_refs / seconds, "refs_per_cpu_second": n_refs / cpu})
    return rows


def bench_partition(total: int, repeats: int) -> list[dict[str, Any]]:
    # M* beyond the total for every pool: the DP's worst case (no pool capped by its knee)
    curves = [BMEParams(0.02, 0.01, 100, 20000), BMEParams(0.05, 0.02, 50, 30000),
              BMEParams(0.01, 0.005, 200, 50000)]
    rows = []
    for method in ("exact", "greedy"):
        result = partition(curves, total, weights=[0.5, 0.3, 0.2], method=method)
        def run(m: str = method) -> None:
            partition(curves, total, weights=[0.5, 0.3, 0.2], method=m)

        seconds, cpu = _best_of(repeats, run)
        rows.append({"method": method, "pools": 3, "total_pages": total, "seconds": seconds,
                     "cpu_seconds": cpu,
                     "sizes": result.sizes, "aggregate_miss": result.aggregate_miss})
    return rows


def bench_fit(repeats: int) -> dict[str, Any]:
    true = BMEParams(0.02, 0.01, 100.0, 5000.0)
    sizes = np.geomspace(100, 8000, 20)
    rng = np.random.default_rng(0)
    p = miss_probability(true, sizes) * (1 + 0.02 * rng.standard_normal(sizes.size))
    seconds, cpu = _best_of(repeats, lambda: fit_bme(sizes, p))
    return {"points": int(sizes.size), "p_star": "searched", "seconds": seconds,
            "cpu_seconds": cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, 200k refs")
    args = parser.parse_args()
    repeats = 1 if args.quick else 3
    n_refs = 200_000 if args.quick else 1_000_000
    report: dict[str, Any] = {"machine": _machine(), "command": "python -m benchmarks.bme_speed"
              + (" --quick" if args.quick else ""),
              "mattson": bench_mattson(n_refs, repeats),
              "partition": bench_partition(10_000, repeats), "fit": bench_fit(repeats)}
    report["targets"] = {
        "mattson_refs_per_second": {"target": 1e6, "met_wall": all(
            r["refs_per_second"] >= 1e6 for r in report["mattson"]), "met_cpu": all(
            r["refs_per_cpu_second"] >= 1e6 for r in report["mattson"])},
        "partition_3x10000_seconds": {"target": 1.0, "met_wall": all(
            r["seconds"] <= 1.0 for r in report["partition"] if r["method"] == "exact"),
            "met_cpu": all(r["cpu_seconds"] <= 1.0 for r in report["partition"]
                           if r["method"] == "exact")},
    }
    RESULTS.mkdir(exist_ok=True)
    stem = "bme_speed.quick" if args.quick else "bme_speed"   # --quick keeps the full record
    (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{stem}.md").write_text(_markdown(report))
    print(_markdown(report))
    return 0


def _markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = ["# BME speed", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, "
             f"numpy {m['numpy']}; load average at start {m['load_average'][0]:.2f} "
             f"(the machine is shared).", f"Command: `{report['command']}` (best of repeats).",
             "CPU s is the process's own CPU time; on a loaded machine wall time also counts "
             "waiting for a core, so CPU s is the figure that compares across runs.",
             "", "## Mattson stack (target >= 1,000,000 references/s)", "",
             "| trace | refs | distinct | wall s | CPU s | refs/s (wall) | refs/s (CPU) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in report["mattson"]:
        lines.append(f"| {r['trace']} | {r['refs']:,} | {r['distinct']:,} | "
                     f"{r['seconds']:.3f} | {r['cpu_seconds']:.3f} | "
                     f"{r['refs_per_second']:,.0f} | {r['refs_per_cpu_second']:,.0f} |")
    lines += ["", "## Partition, 3 pools (target <= 1 s at 10,000 pages)", "",
              "| method | total pages | wall s | CPU s | sizes | aggregate miss |",
              "|---|---:|---:|---:|---|---:|"]
    for r in report["partition"]:
        lines.append(f"| {r['method']} | {r['total_pages']:,} | {r['seconds']:.3f} | "
                     f"{r['cpu_seconds']:.3f} | {r['sizes']} | {r['aggregate_miss']:.6f} |")
    f = report["fit"]
    lines += ["", f"Fit of {f['points']} points, P* searched: {f['seconds'] * 1000:.1f} ms wall, "
              f"{f['cpu_seconds'] * 1000:.1f} ms CPU.", "", "Targets:"]
    for key, value in report["targets"].items():
        lines.append(f"- {key} (target {value['target']:g}): wall "
                     f"{'met' if value['met_wall'] else 'NOT met'}, CPU "
                     f"{'met' if value['met_cpu'] else 'NOT met'}")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
