"""Shared bits of the evidence benchmarks: machine description, statistics, result files."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.machine import cpu_model
from tuner_client.config import MeasureConfig, TunerConfig
from tuner_client.measurer import Measurer, ServerAccess, Workload
from tuner_client.servers.target import Target
from workloads.factory import make_workload

RESULTS = Path(__file__).resolve().parent.parent / "results"


def machine() -> dict[str, Any]:
    """CPU, cores, RAM, OS, Python, PostgreSQL version and the load average right now."""
    cpu = cpu_model()
    ram = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) * 1024
    except OSError:
        pass
    pg = None
    try:
        from tuner_client.servers.pg_binaries import find_bin_dir

        pg = subprocess.run([str(find_bin_dir() / "postgres"), "--version"], capture_output=True,
                            text=True, timeout=10).stdout.strip()
    except Exception:  # noqa: BLE001  (descriptive only)
        pg = None
    return {"cpu": cpu, "cores": os.cpu_count(), "ram_bytes": ram,
            "platform": platform.platform(), "python": platform.python_version(),
            "postgres": pg, "load_average": [round(x, 2) for x in os.getloadavg()],
            "time": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def spread(values: Sequence[float]) -> dict[str, float | int | None]:
    """Median, quartiles, min and max of the finite values (None when there are none)."""
    xs = sorted(v for v in values if v is not None and math.isfinite(v))
    if not xs:
        return {"n": 0, "median": None, "q1": None, "q3": None, "min": None, "max": None}
    if len(xs) >= 2:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    else:
        q1 = q3 = xs[0]
    return {"n": len(xs), "median": statistics.median(xs), "q1": q1, "q3": q3,
            "min": xs[0], "max": xs[-1]}


def fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    if abs(x) >= 1000 or (abs(x) < 1e-3 and x != 0):
        return f"{x:.{digits}g}"
    return f"{x:.{digits}g}" if abs(x) < 1 else f"{x:.{max(digits - 2, 1)}f}"


def ratio(x: float | None) -> str:
    """A ratio with two decimals (``–`` for none)."""
    return "–" if x is None or not math.isfinite(x) else f"{x:.2f}"


def write_results(name: str, data: dict[str, Any], markdown: str,
                  out: Path = RESULTS) -> tuple[Path, Path]:
    """Write ``<name>.json`` and ``<name>.md`` under ``out``; return both paths."""
    out.mkdir(parents=True, exist_ok=True)
    jpath, mpath = out / f"{name}.json", out / f"{name}.md"
    jpath.write_text(json.dumps(data, indent=2, default=str) + "\n")
    mpath.write_text(markdown.rstrip() + "\n")
    return jpath, mpath


def header(title: str, command: str, mach: dict[str, Any], extra: str = "") -> str:
    """The common head of a results file: what ran, where, under which load."""
    ram = mach.get("ram_bytes")
    ram_text = f"{ram / 2**30:.1f} GiB RAM" if ram else "RAM unknown"
    la = ", ".join(str(x) for x in mach.get("load_average", []))
    return (f"# {title}\n\nCommand: `{command}`  \n"
            f"Machine: {mach.get('cpu')}, {mach.get('cores')} cores, {ram_text}, "
            f"{mach.get('platform')}, Python {mach.get('python')}, {mach.get('postgres')}; "
            f"load average at start {la} (see the README for what else ran).  \n"
            f"Run at {mach.get('time')}.\n{extra}\n")


def target_measurer(cfg: TunerConfig, target: Target, measure: MeasureConfig | None = None, *,
                    workload: Workload | None = None, **options: Any) -> Measurer:
    """A measurer on ``target`` as the benchmarks use it: ``cfg``'s workload (or
    ``workload``), ``measure`` (default ``cfg.measure``), the target's controller and the
    configured restart timeout; ``options`` go to :class:`Measurer` (e.g. ``hooks``)."""
    return Measurer(ServerAccess(target.dsn, target.catalog, target.controller,
                                 cfg.database.restart_timeout_s),
                    workload if workload is not None
                    else make_workload(cfg.workload, target.dsn, seed=cfg.seed),
                    measure if measure is not None else cfg.measure, **options)
