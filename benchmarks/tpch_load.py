"""Benchmark the TPC-H workload: load time and size, per-query runtimes, driver overhead.

``python -m benchmarks.tpch_load [--quick]`` starts its own PostgreSQL (default settings),
loads SF 0.1 and SF 1 (``--quick``: SF 0.1 only), times every query single-stream (the
spec's validation instance plus random instances), checks the SF 1 Q6 answer
(123141078.2283) and measures the driver's own CPU use while a mix runs. Results go to
``benchmarks/results/tpch.json`` and ``.md`` (``tpch_quick.*`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.machine import cpu_model
from tuner_client.servers.local_cluster import LocalCluster
from workloads.connect import connect
from workloads.driver import WorkloadDriver
from workloads.tpch.load import load_tpch
from workloads.tpch.queries import QUERY_NAMES, make_query, validation_query

logger = logging.getLogger(__name__)

RESULTS = Path(__file__).parent / "results"
Q6_SF1_REVENUE = Decimal("123141078.2283")


def _machine() -> dict[str, Any]:
    cpu = cpu_model()
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(mem_kb / 2**20, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "load_average_at_start": os.getloadavg(),
    }


def _fresh_database(cluster: LocalCluster, name: str) -> str:
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        drop = sql.SQL("drop database if exists {} with (force)")
        conn.execute(drop.format(sql.Identifier(name)))
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    return cluster.dsn_for(name)


def _time_queries(
    dsn: str, scale: float, random_runs: int, timeout_s: float
) -> tuple[dict[str, Any], Decimal | None]:
    """Single-stream runtimes per query: validation instance first, then random ones."""
    rng = random.Random(2024)
    results: dict[str, Any] = {}
    q6_answer: Decimal | None = None
    with connect(dsn) as conn:
        conn.execute(
            sql.SQL("set statement_timeout = {}").format(sql.Literal(f"{int(timeout_s)}s"))
        )
        for name in QUERY_NAMES:
            instances = [validation_query(name, scale)]
            instances += [make_query(name, rng, scale) for _ in range(random_runs)]
            times: list[float] = []
            timeouts = 0
            for index, instance in enumerate(instances):
                started = time.perf_counter()
                try:
                    rows = conn.execute(instance.statement).fetchall()
                except psycopg.errors.QueryCanceled:
                    timeouts += 1
                    continue
                times.append(time.perf_counter() - started)
                if name == "Q6" and index == 0:
                    q6_answer = rows[0][0]
            results[name] = {
                "runs": len(instances),
                "timeouts": timeouts,
                "default_params_s": times[0] if times and timeouts == 0 else None,
                "median_s": statistics.median(times) if times else None,
                "min_s": min(times) if times else None,
                "max_s": max(times) if times else None,
            }
            logger.info("SF %s %s: %s", scale, name, results[name])
    return results, q6_answer


def _driver_overhead(dsn: str, mix: str, seconds: float) -> dict[str, Any]:
    with WorkloadDriver(dsn, mix, seed=5) as driver:
        driver.sample(2.0)  # warm-up
        cpu0, wall0 = time.process_time(), time.monotonic()
        sample = driver.sample(seconds)
        cpu = time.process_time() - cpu0
        wall = time.monotonic() - wall0
    return {
        "mix": mix,
        "seconds": round(sample.seconds, 2),
        "qpm": round(sample.qpm, 1),
        "queries_per_second": round(sample.qpm / 60, 1),
        "errors": sample.errors,
        "driver_cpu_seconds": round(cpu, 3),
        "driver_cpu_fraction_of_one_core": round(cpu / wall, 4),
        "per_query_qpm": {q: round(s.qpm, 1) for q, s in sample.per_query.items()},
    }


def _fmt(value: float | None) -> str:
    return "timeout" if value is None else f"{value:.3f}"


def _markdown(report: dict[str, Any], command: str) -> str:
    m = report["machine"]
    lines = [
        "# TPC-H workload benchmark",
        "",
        f"Command: `{command}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['ram_gib']} GiB RAM, {m['os']}, "
        f"Python {m['python']}, {report['postgres']}; load average at start "
        f"{', '.join(f'{x:.2f}' for x in m['load_average_at_start'])} (the machine is shared, "
        "so timings are noisy).  ",
        "PostgreSQL runs with default settings (shared_buffers 128MB, work_mem 4MB). "
        "Data: `tpchgen-cli` CSV, COPY FREEZE, primary keys + FK indexes, ANALYZE.",
        "",
        "## Load",
        "",
        "| scale | total s | generate s | copy s | index s | analyze s | database size "
        "| lineitem rows |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scale, load in report["loads"].items():
        p = load["phase_seconds"]
        lines.append(
            f"| {scale} | {load['seconds']:.1f} | {p.get('generate', 0):.1f} | "
            f"{p.get('copy', 0):.1f} | {p.get('index', 0):.1f} | {p.get('analyze', 0):.1f} | "
            f"{load['database_bytes'] / 2**30:.2f} GiB | {load['rows']['lineitem']:,} |"
        )
    scales = list(report["queries"])
    lines += [
        "",
        "## Single-stream query runtimes (seconds)",
        "",
        "`default` = the spec's validation parameters; `median` over that plus "
        f"{report['random_runs']} random instances; statement timeout "
        f"{report['timeout_s']:.0f} s.",
        "",
        "| query | " + " | ".join(f"SF {s} default | SF {s} median" for s in scales) + " |",
        "|---|" + "---:|---:|" * len(scales),
    ]
    for name in QUERY_NAMES:
        cells = []
        for s in scales:
            q = report["queries"][s][name]
            cells += [_fmt(q["default_params_s"]), _fmt(q["median_s"])]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    for s in scales:
        total = sum(q["median_s"] or 0 for q in report["queries"][s].values())
        lines.append(f"\nSum of medians at SF {s}: {total:.1f} s.")
    if report.get("q6_sf1") is not None:
        q6 = report["q6_sf1"]
        lines += [
            "",
            "## SF 1 answer check",
            "",
            f"Q6 revenue with the validation parameters: {q6['answer']} "
            f"(spec: {q6['expected']}) — {'match' if q6['match'] else 'MISMATCH'}.",
        ]
    lines += ["", "## Driver overhead", ""]
    lines += [
        "| database | mix | window s | queries/s | driver CPU s | fraction of one core |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for where, d in report["driver"].items():
        lines.append(
            f"| {where} | {d['mix']} | {d['seconds']} | {d['queries_per_second']} | "
            f"{d['driver_cpu_seconds']} | {d['driver_cpu_fraction_of_one_core']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="SF 0.1 only, fewer runs")
    parser.add_argument("--timeout", type=float, default=300.0, help="per-query timeout (s)")
    parser.add_argument("--random-runs", type=int, default=None, help="random instances/query")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    scales = [0.1] if args.quick else [0.1, 1.0]
    random_runs = args.random_runs if args.random_runs is not None else (1 if args.quick else 2)
    command = "python -m benchmarks.tpch_load" + (" --quick" if args.quick else "")
    report: dict[str, Any] = {
        "machine": _machine(),
        "command": command,
        "random_runs": random_runs,
        "timeout_s": args.timeout,
        "loads": {},
        "queries": {},
        "driver": {},
        "q6_sf1": None,
    }
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-tpch-", dir="/tmp"))
    cluster = LocalCluster(state, sync_initdb=False)
    try:
        cluster.start()
        version = subprocess.run(
            [str(cluster.bin_dir / "postgres"), "--version"], capture_output=True, text=True
        ).stdout.strip()
        report["postgres"] = version
        small = _fresh_database(cluster, "tpch_sf001")
        load_tpch(small, 0.01)
        report["driver"]["SF 0.01"] = _driver_overhead(small, "2Q6,1Q13", 10 if args.quick else 20)
        for scale in scales:
            dsn = _fresh_database(cluster, f"tpch_sf{str(scale).replace('.', '')}")
            result = load_tpch(dsn, scale)
            report["loads"][f"{scale:g}"] = {
                "seconds": round(result.seconds, 2),
                "phase_seconds": {k: round(v, 2) for k, v in result.phase_seconds.items()},
                "database_bytes": result.database_bytes,
                "rows": result.rows,
            }
            logger.info("loaded SF %s: %s", scale, report["loads"][f"{scale:g}"])
            timings, q6 = _time_queries(dsn, scale, random_runs, args.timeout)
            report["queries"][f"{scale:g}"] = timings
            if scale == 1.0 and q6 is not None:
                answer = Decimal(q6).quantize(Decimal("0.0001"))
                report["q6_sf1"] = {
                    "answer": str(answer),
                    "expected": str(Q6_SF1_REVENUE),
                    "match": answer == Q6_SF1_REVENUE,
                }
            if scale == 0.1:
                report["driver"]["SF 0.1"] = _driver_overhead(
                    dsn, "2Q6,1Q13", 10 if args.quick else 20
                )
    finally:
        cluster.destroy()
        shutil.rmtree(state, ignore_errors=True)

    stem = "tpch_quick" if args.quick else "tpch"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    (RESULTS / f"{stem}.md").write_text(_markdown(report, command))
    sys.stdout.write(_markdown(report, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
