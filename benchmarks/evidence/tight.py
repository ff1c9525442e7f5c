"""Tight online budgets: the online memory budget swept from generous to 64MB, one- vs multi-pass.

The online budget ``work_mem·m + maintenance_work_mem + temp_buffers <= B`` is fixed to B
(``budget.online``) instead of RAM − S − O. The study saw single-pass Nelder-Mead fall below the
default under a 64MB budget and multi-pass recover. For each B and each flow the tuner runs a
short budget of evaluations and its own interleaved default-vs-best rounds give the outcome.

Run: ``python -m benchmarks.evidence tight [--quick]`` (small cluster, SF 0.1, no cgroup).
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any

from benchmarks.evidence.common import fmt, header, load_average, machine, ratio, write_results
from benchmarks.evidence.flowrun import open_small_target, run_flow, small_config
from harmony_base.errors import HarmonyError

logger = logging.getLogger(__name__)

MIX = "2Q1,2Q9,2Q13"


def markdown(data: dict[str, Any]) -> str:
    cmd = ("python -m benchmarks.evidence tight" + (" --quick" if data["quick"] else "")
           + f" --online-evals {data['online_evals']}"
           + (f" --budgets {data['budgets']}" if data.get("budgets") else ""))
    extra = (f"\nMix `{MIX}` (6 streams + up to 8 parallel workers: m = 14 processes × "
             f"hash_mem_multiplier 2 = 28), TPC-H SF 0.1, "
             f"embedded cluster without a memory cgroup. Online budget B fixed per row "
             f"('generous' = RAM − shared_buffers − OS reserve with RAM declared 1GB). "
             f"Evaluations: 2 offline + {data['online_evals']} online per pass; multi-pass at "
             f"most 2 passes. best/default = the tuner's own interleaved final rounds.\n")
    lines = [header("Tight online budgets: one-pass vs multi-pass", cmd, data["machine"], extra)]
    lines.append("| online budget | flow | passes | evaluations | failures | default qpm | "
                 "best qpm | best/default | best work_mem | wall s | load avg |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|")
    for row in data["rows"]:
        r = row.get("result")
        if r is None:
            lines.append(f"| {row['budget']} | {row['flow']} | error: {row.get('error')} |"
                         + " |" * 8)
            continue
        fails = sum(1 for e in r["timeline"] if e.get("failure"))
        lines.append(f"| {row['budget']} | {row['flow']} | {r['passes']} | {r['evaluations']} | "
                     f"{fails} | {fmt(r['default_qpm'])} | {fmt(r['best_qpm'])} | "
                     f"{ratio(r['tuned_over_default'])} | "
                     f"{r['best_settings'].get('work_mem')} | {fmt(r['wall_s'])} | "
                     f"{row['load_average_end']} |")
    lines.append("\nDecisions per run:\n")
    for row in data["rows"]:
        r = row.get("result")
        if r is not None:
            lines.append(f"- {row['budget']} {row['flow']}: " +
                         ("; ".join(r["decisions"]) or "none"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="generous and 64MB only")
    parser.add_argument("--online-evals", type=int, default=None,
                        help="online evaluations per pass (quick 6, full 12)")
    parser.add_argument("--budgets", default=None,
                        help="comma-separated rows to run, e.g. 128MB,64MB ('generous' for RAM "
                             "− S − O); results go to evidence_tight.part-<rows>")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-small")
    args = parser.parse_args(argv)
    budgets: list[str | None] = [None, "64MB"] if args.quick else [None, "256MB", "128MB",
                                                                     "64MB"]
    if args.budgets:
        budgets = [None if b.strip() == "generous" else b.strip()
                   for b in args.budgets.split(",") if b.strip()]
    online_evals = args.online_evals or (6 if args.quick else 12)
    mach = machine()
    data: dict[str, Any] = {"machine": mach, "quick": args.quick, "online_evals": online_evals,
                            "budgets": args.budgets, "rows": []}
    name = "evidence_tight" + (".quick" if args.quick else "")
    if args.budgets:
        name += ".part-" + "-".join(b or "generous" for b in budgets)
    target = open_small_target(args.state_dir)
    try:
        for budget in budgets:
            for flow in ("one-pass", "multi-pass"):
                row: dict[str, Any] = {"budget": budget or "generous", "flow": flow}
                cfg = small_config(f"evidence-tight-{budget or 'generous'}-{flow}", flow=flow,
                                   mix=MIX, online_budget=budget, offline_evals=2,
                                   online_evals=online_evals, queries=12, monitor=0,
                                   max_passes=2)
                try:
                    row["result"] = run_flow(cfg, target)
                except HarmonyError as exc:
                    logger.exception("tight %s %s failed", budget, flow)
                    row["error"] = str(exc)
                row["load_average_end"] = load_average()
                data["rows"].append(row)
                write_results(name, data, markdown(data))
    finally:
        target.close()
    return 0
