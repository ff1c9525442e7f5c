"""Process memory: what one PostgreSQL process holds besides work_mem, and how many work_mem
a TPC-H process really takes at once (the budget's ``process_memory`` P and ``operations``).

For each study mix and each work_mem the mix runs on the embedded cluster *without* a memory
limit (so the demand is seen, not the OOM killer), and every 0.2 s the anonymous memory
(``RssAnon`` of ``/proc/<pid>/status``: private heap, not shared_buffers) of every client
backend and parallel worker is read. Reported per row: processes seen, the peak per process,
the peak of the sum over processes, and P = peak sum ÷ processes at the smallest work_mem.
From two work_mem values, the effective number of work_mem one process holds at the peak:
(peak sum(w) − peak sum(w₀)) ÷ (n · (w − w₀)).

Run: ``python -m benchmarks.evidence procmem [--quick]`` (TPC-H SF 0.4, no cgroup; the same
data as ``endtoend``).
"""

from __future__ import annotations

import argparse
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from benchmarks.evidence.common import fmt, header, load_average, machine, write_results
from benchmarks.evidence.endtoend import MIXES, open_memory_bound, tuner_dict
from tuner_client.config import tuner_config_from_dict
from workloads.factory import make_workload

logger = logging.getLogger(__name__)

MB = 1024**2
WORK_MEMS = ("64kB", "4MB", "32MB")


def rss_anon_bytes(pid: int) -> int | None:
    """RssAnon of ``pid`` in bytes (None when the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class Sampler(threading.Thread):
    """Reads RssAnon of the workload's processes every ``period_s`` until stopped."""

    def __init__(self, dsn: str, period_s: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.dsn, self.period_s = dsn, period_s
        self.stop_event = threading.Event()
        self.peak_per_process: dict[int, int] = {}
        self.peak_sum = 0
        self.peak_count = 0
        self.samples = 0

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            own = conn.info.backend_pid
            while not self.stop_event.wait(self.period_s):
                pids = [r[0] for r in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE backend_type IN "
                    "('client backend', 'parallel worker') AND pid <> %s", [own])]
                values = {p: v for p in pids if (v := rss_anon_bytes(p)) is not None}
                for p, v in values.items():
                    self.peak_per_process[p] = max(v, self.peak_per_process.get(p, 0))
                total = sum(values.values())
                if total > self.peak_sum:
                    self.peak_sum, self.peak_count = total, len(values)
                self.samples += 1

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=10)


def measure(dsn: str, cfg: Any, work_mem: str, seconds: float) -> dict[str, Any]:
    """Run the mix for ``seconds`` with ``work_mem`` in force; the memory peaks seen."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET work_mem = '{work_mem}'")
        conn.execute("SELECT pg_reload_conf()")
    workload = make_workload(cfg.workload, dsn, seed=cfg.seed)
    sampler = Sampler(dsn)
    workload.start()
    try:
        time.sleep(2.0)  # the streams connect and start their first queries
        sampler.start()
        time.sleep(seconds)
        sampler.stop()
        done = workload.sample(seconds=1.0)
    finally:
        workload.stop()
    per = sorted(sampler.peak_per_process.values())
    return {"work_mem": work_mem, "processes_seen": len(per), "samples": sampler.samples,
            "peak_sum_bytes": sampler.peak_sum, "processes_at_peak": sampler.peak_count,
            "peak_per_process_max_bytes": per[-1] if per else None,
            "peak_per_process_median_bytes": per[len(per) // 2] if per else None,
            "qpm_last_second": done.qpm}


def markdown(data: dict[str, Any]) -> str:
    cmd = "python -m benchmarks.evidence procmem" + (" --quick" if data["quick"] else "")
    extra = (f"\nTPC-H SF {data['scale']}, embedded cluster without a memory limit, "
             f"shared_buffers 128MB (PostgreSQL's default), {data['seconds']:.0f} s per row, "
             f"RssAnon of client backends and parallel workers read every 0.2 s.\n")
    lines = [header("Process memory besides work_mem, and work_mem held at once", cmd,
                    data["machine"], extra)]
    lines.append("| mix | work_mem | processes seen | at peak | peak sum MB | per process at "
                 "peak MB | max per process MB | median per process MB | work_mem held per "
                 "process at peak |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in data["rows"]:
        n = row["processes_at_peak"] or 1
        lines.append(
            f"| {row['mix']} | {row['work_mem']} | {row['processes_seen']} | "
            f"{row['processes_at_peak']} | {fmt(row['peak_sum_bytes'] / MB)} | "
            f"{fmt(row['peak_sum_bytes'] / n / MB)} | "
            f"{fmt((row['peak_per_process_max_bytes'] or 0) / MB)} | "
            f"{fmt((row['peak_per_process_median_bytes'] or 0) / MB)} | "
            f"{fmt(row.get('work_mem_held'))} |")
    return "\n".join(lines)


def unlimited_config(mix: str, scale: float) -> Any:
    """The end-to-end benchmark's config for ``mix`` without the memory cgroup."""
    d = tuner_dict("evidence-procmem", mix, scale=scale, memory_limit=0, offline_evals=1,
                   online_evals=1, queries=1, warmup_s=0, seed=1)
    del d["database"]["memory_limit"]
    return tuner_config_from_dict(d)


def _bytes(text: str) -> int:
    return int(text[:-2]) * (1024 if text.endswith("kB") else MB)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="one mix, 20 s per row")
    parser.add_argument("--scale", type=float, default=0.4)
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-e2e")
    args = parser.parse_args(argv)
    mixes = MIXES[:1] if args.quick else MIXES
    seconds = 20.0 if args.quick else 45.0
    data: dict[str, Any] = {"machine": machine(), "quick": args.quick, "scale": args.scale,
                            "seconds": seconds, "rows": []}
    name = "evidence_procmem" + (".quick" if args.quick else "")
    target = open_memory_bound(unlimited_config(mixes[0], args.scale), args.state_dir)
    try:
        for mix in mixes:
            cfg = unlimited_config(mix, args.scale)
            rows = []
            for wm in WORK_MEMS:
                row = {"mix": mix, **measure(target.dsn, cfg, wm, seconds),
                       "load_average_end": load_average()}
                logger.info("procmem %s work_mem %s: %s", mix, wm, row)
                rows.append(row)
            base = rows[0]
            for row in rows[1:]:
                n = max(1, row["processes_at_peak"])
                grow = row["peak_sum_bytes"] - base["peak_sum_bytes"]
                row["work_mem_held"] = grow / (n * (_bytes(row["work_mem"])
                                                    - _bytes(base["work_mem"])))
            data["rows"].extend(rows)
            write_results(name, data, markdown(data))
    finally:
        with psycopg.connect(target.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET work_mem")
            conn.execute("SELECT pg_reload_conf()")
        target.close()
    return 0
