"""The demo as a new user meets it, and its A/A twin (issue 45, item 6): ``--runs`` runs of
``configs/tpch-demo.yaml`` as it ships (no ``measure.design``: the engine chooses) and as many
of its twin, interleaved (demo, twin, demo, ...), each ``harmony tune`` in its own process on
a fresh embedded cluster.

The twin is the demo with online knobs a read-only TPC-H mix cannot feel (the background
writer's delay, the checkpoint completion target, the vacuum cost delay: a read-only mix
writes no buffers, makes no checkpoints worth spreading, runs no vacuum) in place of its
own: every candidate is the original's twin, so any recommendation it makes is a false
claim. Its offline search over shared_buffers stays: at SF 0.01 the data fits in the
smallest size searched.

Per run: the wall-clock, the recommendation and the interval of the configuration shown
over the original, with the design that measured it. Goals: the demo recommends with its
interval above 1 in at least 9 of 10 runs, each within 3 minutes; the twin claims in none.

    flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.demo_runs --runs 10 --tag T

Writes benchmarks/results/demo_runs.<tag>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.machine import cpu_model
from benchmarks.pertx_search import run_one

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DEMO = ROOT / "configs" / "tpch-demo.yaml"
#: reloadable knobs a read-only mix cannot feel (benchmarks/evidence/aa.py's)
TWIN_KNOBS = {
    "bgwriter_delay": {"min": "10ms", "max": "2000ms", "step": "10ms"},
    "checkpoint_completion_target": {"min": 0.1, "max": 0.9, "step": 0.05},
    "vacuum_cost_delay": {"min": "0ms", "max": "50ms", "step": "1ms"},
}


def configs() -> dict[str, dict[str, Any]]:
    """The demo as shipped, and its A/A twin."""
    demo = yaml.safe_load(DEMO.read_text())
    twin = yaml.safe_load(DEMO.read_text())
    twin["name"] = "tpch-demo-aa"
    twin["online"]["knobs"] = TWIN_KNOBS
    twin["online"]["strategy"] = {"name": "nelder-mead", "options": {"simplex_size": 4}}
    return {"demo": demo, "twin": twin}


def claimed_above_one(row: dict[str, Any]) -> bool:
    """Whether the run recommended a configuration with its interval above 1."""
    iv = row.get("interval") or {}
    return row.get("recommendation") not in (None, "kept the original") \
        and (iv.get("low") or 0.0) > 1.0


def markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [f"# The demo and its A/A twin, {meta['runs']} runs each (issue 45, item 6)", "",
             f"Command: `{meta['command']}`  ", f"Machine: {meta['machine']}  ",
             f"Commit: {meta['commit']}; started {meta['started']}", "",
             "| # | config | wall (s) | load at start | recommendation | design | shown "
             "over the original (95 %) | restart part ± |", "|---|---|---:|---|---|---|---|---:|"]
    for i, row in enumerate(rows, 1):
        iv = row.get("interval") or {}
        shown = (f"{row.get('shown')}: {iv['ratio']:.2f}× ({iv['low']:.2f}–"
                 f"{iv['high'] if iv['high'] is not None else math.inf:.2f})"
                 if iv.get("ratio") else "–")
        lines.append(f"| {i} | {row['config']} | {row['wall_s']:.0f} | "
                     f"{row['load_start'][0]:.1f} | {row.get('recommendation', 'failed')} | "
                     f"{row.get('design') or '–'} | {shown} | {_restart_width(row)} |")
    for kind in ("demo", "twin"):
        mine = [r for r in rows if r["config"] == kind]
        if not mine:
            continue
        walls = sorted(r["wall_s"] for r in mine)
        bounded = [r for r in mine if (r.get("restart_part") or {}).get("half_width")]
        lines += ["", f"**{kind}**: {sum(claimed_above_one(r) for r in mine)} of {len(mine)} "
                  f"recommended with the interval above 1; wall-clock median "
                  f"{walls[len(walls) // 2]:.0f} s, max {walls[-1]:.0f} s; "
                  f"{sum(r['wall_s'] <= 180 for r in mine)} within 3 minutes; restart part "
                  f"within ±10 % in {sum(r['restart_part']['half_width'] <= 0.10 for r in bounded)}"
                  f" of {len(bounded)} split races"]
    return "\n".join(lines) + "\n"


def _restart_width(row: dict[str, Any]) -> str:
    """The widest half-width of the restart part's intervals (– when not split)."""
    width = (row.get("restart_part") or {}).get("half_width")
    return "–" if width is None else f"±{100 * width:.1f} %"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--only", choices=("demo", "twin"), default=None)
    parser.add_argument("--tag", default="run")
    args = parser.parse_args(argv)
    commit = os.popen(f"git -C {ROOT} rev-parse --short HEAD").read().strip()
    meta = {"command": f"python -m benchmarks.demo_runs --runs {args.runs} --tag {args.tag}"
                       + (f" --only {args.only}" if args.only else ""),
            "machine": f"{cpu_model()}, {os.cpu_count()} cores, {platform.platform()}",
            "commit": commit, "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "runs": args.runs}
    rows: list[dict[str, Any]] = []
    base = f"demo_runs.{args.tag}"
    out_root = Path("/tmp") / f"harmony-{base}"
    for i in range(args.runs):
        for kind, cfg in configs().items():
            if args.only not in (None, kind):
                continue
            row = run_one(cfg, out_root / f"{kind}-{i}")
            row["config"] = kind
            rows.append(row)
            (RESULTS / f"{base}.json").write_text(json.dumps({"meta": meta, "runs": rows},
                                                             indent=1, default=str))
            (RESULTS / f"{base}.md").write_text(markdown(meta, rows))
            print(f"{kind} {i}: {row['wall_s']:.0f} s, {row.get('recommendation')}, "
                  f"{row.get('interval')}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
