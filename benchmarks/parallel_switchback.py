"""max_parallel_workers_per_gather 2 → 0 on the demo's TPC-H mix, measured the three ways the
tuner now measures a parallel-query knob (issue 27 item 2, session 12): per transaction
(every arm carrying the value: an A/A), the search's paired whole-server window block, and
the final race's switchback design (whole-server slices, ``choose_for`` and ``race_in``).

    PYTHONPATH=. python -m benchmarks.parallel_switchback [RACE_SECONDS]

Runs the tuner on ``configs/tpch-demo.yaml`` with only that knob searched (values 0 and 2,
shared_buffers fixed, no probes, no final rounds), then races the original against 0 by
``choose_for`` and ``race_in``. Writes ``benchmarks/results/parallel_switchback.json``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.evidence.common import load_average, machine
from benchmarks.evidence.endtoend import open_memory_bound
from tuner_client.api.client import connect
from tuner_client.config import tuner_config_from_dict
from tuner_client.flows import Tuner
from tuner_client.phases.design_choice import choose_for, race_in

ROOT = Path(__file__).resolve().parent.parent
KNOB = "max_parallel_workers_per_gather"


def main(argv: list[str]) -> int:
    seconds = float(argv[0]) if argv else 120.0
    cfg = yaml.safe_load((ROOT / "configs" / "tpch-demo.yaml").read_text())
    cfg["offline"] = {"knobs": {"shared_buffers": {"min": "128MB", "max": "128MB"}},
                      "evaluations": 1}
    cfg["online"] = {"knobs": {KNOB: {"values": ["0", "2"]}},
                     "strategy": {"name": "exhaustive"}, "evaluations": 2}
    cfg["bme"] = {"probes": 0}
    cfg["final"] = {"rounds": 0, "max_seconds": seconds}
    config = tuner_config_from_dict(cfg)
    target = open_memory_bound(config, Path("/var/tmp/s12-sbcheck"))
    out: dict[str, Any] = {"machine": machine(), "load_average_start": load_average(),
                           "race_seconds": seconds}
    try:
        tuner = Tuner(config, target=target, client=connect(None))
        tuner.run()
        ctx, state = tuner.context, tuner.state
        assert ctx is not None
        original = dict(ctx.original)
        candidates = {"default": original, "mpwg0": {**original, KNOB: "0"}}
        started = time.monotonic()
        labels = ["default", "mpwg0"]
        choice = choose_for(ctx, [candidates[label] for label in labels])
        out["design"] = choice.text()
        race = race_in(choice.design, ctx, state, candidates, labels) \
            if choice.design != "windows" else None
        out["race"] = race.to_final_decision().to_dict() if race is not None else None
        out["race_s"] = time.monotonic() - started
        out["decisions"] = [d for d in state.decisions if "system-wide" in d
                            or "per transaction" in d]
    finally:
        target.close()
    out["load_average_end"] = load_average()
    path = ROOT / "benchmarks" / "results" / "parallel_switchback.json"
    path.write_text(json.dumps(out, indent=1, default=str) + "\n")
    print(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
