"""How long throughput takes to recover after a restart, against an online change.

The 320 MB headroom rounds measured the label that followed PGTune's configuration (a
restart from shared_buffers 80MB back to 128MB) 15.7 % below its round's mean with the 3-s
warm-up. This measures the recovery directly, in the headroom setup (TPC-H SF 0.4 in a
320 MB memory cgroup): each cycle puts PGTune-like settings in force with a restart, then
returns to the default either by a restart (``restart``) or, as a control, first restarts
into the default, runs 30 s, changes one online knob back and forth (``online``). After the
return, consecutive ``--window``-s windows are counted without a warm-up. Cycles alternate
the two kinds; the result is each window's throughput over the mean of the same cycle's last
three windows (the settled level), with a 95 % t interval over the cycles.

Both estimators are recorded per window: ``count`` (completions) and ``progress`` (queries
credited by their run time inside the window), to see which one a restart biases.

Run: ``python -m benchmarks.evidence restart [--mix M] [--cycles 4] [--window 3] [--windows 10]
[--tag T]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.evidence.common import (
    header,
    load_average,
    machine,
    target_measurer,
    write_results,
)
from benchmarks.evidence.endtoend import MB, open_memory_bound
from benchmarks.evidence.headroom import headroom_config
from benchmarks.evidence.live import t_interval

logger = logging.getLogger(__name__)

AWAY = {"shared_buffers": "80MB", "work_mem": "3413kB", "random_page_cost": "1.1"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mix", default="4Q1,4Q16")
    parser.add_argument("--scale", type=float, default=0.4)
    parser.add_argument("--memory-limit-mb", type=int, default=320)
    parser.add_argument("--cycles", type=int, default=4, help="cycles of each kind")
    parser.add_argument("--window", type=float, default=3.0, help="seconds a window")
    parser.add_argument("--windows", type=int, default=10, help="windows after the return")
    parser.add_argument("--tag", default="", help="suffix of the result files")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-e2e")
    args = parser.parse_args(argv)
    cfg = headroom_config(args.mix, scale=args.scale, limit=args.memory_limit_mb * MB,
                          quick=False, estimator="count")
    measure = replace(cfg.measure, samples=1, seconds=args.window, warmup_s=0.0)
    data: dict[str, Any] = {"machine": machine(), "mix": args.mix, "scale": args.scale,
                            "memory_limit_mb": args.memory_limit_mb, "window_s": args.window,
                            "command": "python -m benchmarks.evidence restart "
                                       f"--mix {args.mix} --cycles {args.cycles} "
                                       f"--window {args.window:g} --windows {args.windows}"
                                       + (f" --tag {args.tag}" if args.tag else ""),
                            "cycles": []}
    t0 = time.monotonic()
    target = open_memory_bound(cfg, args.state_dir)
    try:
        measurer = target_measurer(cfg, target, measure)
        names = sorted(AWAY)
        default = measurer.current_settings(names)
        measurer.in_force = dict(default)
        auto_conf = target.controller.read_auto_conf()
        try:
            measurer.start()
            for c in range(2 * args.cycles):
                kind = "restart" if c % 2 == 0 else "online"
                measurer.apply(AWAY, check_budget=False, warm_up=False)
                time.sleep(5.0)  # the other configuration runs for a while
                if kind == "online":  # settle in the default first (a restart), then nudge
                    measurer.apply(default, check_budget=False, warm_up=False)
                    time.sleep(30.0)
                    measurer.apply({"random_page_cost": "4.1"}, check_budget=False,
                                   warm_up=False)
                    time.sleep(5.0)
                measurer.apply(default, check_budget=False, warm_up=False)
                got = [measurer.workload.sample(seconds=args.window)
                       for _ in range(args.windows)]
                qpm = [float(g.qpm) for g in got]
                progress = [g.progress_qpm for g in got]
                data["cycles"].append({"kind": kind, "qpm": qpm, "progress": progress,
                                       "load_average": load_average()})
                logger.info("cycle %d (%s): count %s, progress %s", c + 1, kind,
                            [round(q) for q in qpm], [round(p or 0) for p in progress])
        finally:
            measurer.stop()
            measurer.restore(default, auto_conf=auto_conf)
            measurer.close()
    finally:
        target.close()
    data["wall_s"] = time.monotonic() - t0
    data["load_average_end"] = load_average()
    data["analysis"] = analyse(data)
    write_results("evidence_restart" + (f".{args.tag}" if args.tag else ""), data,
                  markdown(data))
    return 0


def analyse(data: dict[str, Any]) -> dict[str, Any]:
    """Per estimator, kind and window: throughput over the cycle's settled level (the mean of
    its last three windows)."""
    out: dict[str, Any] = {}
    for est in ("qpm", "progress"):
        for kind in ("restart", "online"):
            rel = []
            for c in data["cycles"]:
                values = c.get(est) or []
                if c["kind"] != kind or None in values or not values:
                    continue
                settled = statistics.fmean(values[-3:])
                if settled > 0:
                    rel.append([v / settled for v in values])
            key = kind if est == "qpm" else f"{kind}_progress"
            out[key] = ([t_interval([r[i] for r in rel]) for i in range(len(rel[0]))]
                        if rel else [])
    return out


def markdown(data: dict[str, Any]) -> str:
    a, w = data["analysis"], data["window_s"]
    lines = [header("Throughput after a restart against an online change", data["command"],
                    data["machine"]),
             f"Mix `{data['mix']}`, TPC-H SF {data['scale']:g} in a "
             f"{data['memory_limit_mb']} MB memory cgroup. Each cycle: PGTune-like settings "
             f"{AWAY} (a restart), then back to the default by a restart, or (control) by an "
             f"online change after 30 s in the default. {w:g}-s windows after the return, no "
             f"warm-up; each over the mean of its cycle's last three windows, 95 % t interval "
             f"over {len(data['cycles']) // 2} cycles of each kind. Wall {data['wall_s']:.0f} s; "
             f"load at the end {data['load_average_end']}.", "",
             "| seconds after the return | count, after a restart | count, after an online "
             "change | progress, after a restart | progress, after an online change |",
             "|---|---|---|---|---|"]

    def cell(rows: list[Any], i: int) -> str:
        return f"{rows[i][0]:.2f} ({rows[i][1]:.2f}–{rows[i][2]:.2f})" if i < len(rows) \
            else "–"

    for i in range(len(a["restart"])):
        lines.append(f"| {i * w:g}–{(i + 1) * w:g} | {cell(a['restart'], i)} | "
                     f"{cell(a['online'], i)} | {cell(a.get('restart_progress', []), i)} | "
                     f"{cell(a.get('online_progress', []), i)} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    raise SystemExit(main())
