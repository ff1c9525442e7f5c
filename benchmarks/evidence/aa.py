"""A/A: tune knobs that cannot change a read-only TPC-H mix, several times; count the runs that
claim a significant gain.

The online knobs are the background writer's delay, the checkpoint completion target and the
vacuum cost delay: a read-only mix writes no buffers, makes no checkpoints worth spreading and
runs no vacuum, so every configuration of them is the default's twin and any gain the tuner
claims is noise it failed to see through. Each run is a full one-pass run (paired blocks
during the search, then the final rounds and the decision rule with its interval) with its
own seed. The goal: a significant gain claimed in at most 1 run of 10.

Run: ``python -m benchmarks.evidence aa [--runs 10] [--quick] [--tag T]``; writes
``benchmarks/results/evidence_aa[.quick][.T].{json,md}`` (rewritten after every run).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from benchmarks.evidence.common import header, load_average, machine, write_results
from benchmarks.evidence.flowrun import open_small_target, small_config
from tuner_client.api.client import connect
from tuner_client.config import tuner_config_from_dict
from tuner_client.flows import Tuner
from tuner_client.servers.target import Target

MIX = "2Q6,2Q13,1Q9"
#: reloadable knobs a read-only mix cannot feel
AA_KNOBS = {
    "bgwriter_delay": {"min": "10ms", "max": "2000ms", "step": "10ms"},
    "checkpoint_completion_target": {"min": 0.1, "max": 0.9, "step": 0.05},
    "vacuum_cost_delay": {"min": "0ms", "max": "50ms", "step": "1ms"},
}


def aa_config(seed: int, *, quick: bool, screening: bool = False) -> dict[str, Any]:
    cfg = small_config(f"evidence-aa-{seed}", flow="one-pass", mix=MIX, scale=0.1,
                       offline_evals=1, online_evals=4 if quick else 8,
                       queries=10 if quick else 15, warmup_s=1.0 if quick else 2.0, seed=seed)
    # shared_buffers stays where it is: one offline point (the current size) measured once
    cfg["offline"]["knobs"] = {"shared_buffers": {"min": "128MB", "max": "128MB",
                                                  "step": "8MB"}}
    cfg["online"]["knobs"] = AA_KNOBS
    cfg["online"]["strategy"] = {"name": "nelder-mead", "options": {"simplex_size": 4}}
    cfg["final"] = {"rounds": 3, "max_rounds": 4 if quick else 6, "candidates": 2}
    if screening:  # a knob cleared on noise makes the design's predicted best a candidate
        cfg["screening"] = {"enabled": True, "design": "pb", "replicates": 1, "samples": 1}
    return cfg


def one_run(target: Target, seed: int, *, quick: bool, screening: bool = False
            ) -> dict[str, Any]:
    cfg = tuner_config_from_dict(aa_config(seed, quick=quick, screening=screening))
    started = time.monotonic()
    result = Tuner(cfg, target=target, client=connect(None)).run()
    summary = result.to_dict()
    decision = summary["decision"] or {}
    best = decision.get("best")
    interval = (decision.get("intervals") or {}).get(best) if best else None
    return {"seed": seed, "wall_s": time.monotonic() - started,
            "claimed": decision.get("winner") is not None,
            "winner": decision.get("winner"), "best": best,
            "best_interval": interval, "rounds": decision.get("rounds"),
            "improvement": result.improvement, "improvement_ci": summary["improvement_ci"],
            "best_settings": summary["best_settings"], "decision_text": decision.get("text"),
            "evaluations": summary["evaluations"], "load_average": load_average(),
            "screened": any(d.startswith("screening: the design predicts")
                            for d in summary["decisions"])}


def markdown(data: dict[str, Any]) -> str:
    runs = data["runs"]
    claimed = sum(1 for r in runs if r["claimed"])
    lines = [header("A/A: knobs a read-only mix cannot feel", data["command"], data["machine"],
                    f"Mix `{MIX}`, TPC-H SF 0.1 (no cgroup), online knobs "
                    f"{', '.join(AA_KNOBS)}; one-pass runs, paired search blocks, final rounds "
                    f"3 to {4 if data['quick'] else 6} (12 on a close call) with the interval "
                    f"rule; estimator "
                    f"{data.get('estimator', 'count')}"
                    + ("; screening on (PB once): a knob cleared on noise adds the design's "
                       "predicted best as a candidate" if data.get("screening") else "")
                    + "."),
             "",
             f"**Significant gains claimed: {claimed} of {len(runs)} runs** (goal: at most 1 "
             "of 10).", "",
             "| seed | claimed | best candidate / default (95 % CI) | rounds | wall s | "
             "load avg | a knob cleared screening |",
             "|---:|---|---|---:|---:|---|---|"]
    for r in runs:
        iv = r["best_interval"]
        shown = (f"{iv['ratio']:.3f}× ({iv['low']:.3f}–{iv['high']:.3f})" if iv
                 else "– (the search's best was the original)")
        lines.append(f"| {r['seed']} | {'**yes**' if r['claimed'] else 'no'} | {shown} | "
                     f"{r['rounds'] or 0} | {r['wall_s']:.0f} | "
                     f"{', '.join(str(x) for x in r['load_average'])} | "
                     f"{'yes' if r.get('screened') else 'no'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer evaluations and rounds")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--tag", default="", help="suffix of the results' file names")
    parser.add_argument("--screening", action="store_true",
                        help="screen the knobs first (PB once), as the tuner can")
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-small")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.evidence aa" + (" --quick" if args.quick else "") + \
        f" --runs {args.runs}" + \
        (f" --first-seed {args.first_seed}" if args.first_seed != 1 else "") + \
        (" --screening" if args.screening else "") + \
        (f" --tag {args.tag}" if args.tag else "")
    data: dict[str, Any] = {"machine": machine(), "command": command, "quick": args.quick,
                            "screening": args.screening,
                            "estimator": tuner_config_from_dict(aa_config(
                                args.first_seed, quick=args.quick)).measure.estimator,
                            "runs": []}
    name = "evidence_aa" + (".quick" if args.quick else "") + (f".{args.tag}" if args.tag else "")
    target = open_small_target(args.state_dir)
    try:
        for seed in range(args.first_seed, args.first_seed + args.runs):
            data["runs"].append(one_run(target, seed, quick=args.quick,
                                        screening=args.screening))
            write_results(name, data, markdown(data))
    finally:
        target.close()
    return 0
