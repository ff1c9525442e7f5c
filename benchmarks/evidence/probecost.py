"""What a BME probe set costs, before and after the cuts of session 11 (issue 31), and whether
it still decides the same.

``old``: the probes in increasing size, each settling until its buffer is full, holds every
touched page, or the settle budget (``bme.settle_s``) runs out. ``new``: the smallest and the
largest size first, the ones between only when those two do not already decide "no knee found
in range" (:func:`tuner_client.probes.runner.ends_flat_unfilled`), and a settle that gives up
early once its buffer cannot fill in the budget
(:func:`tuner_client.probes.settle.cannot_fill`). Probe sets of the two arms alternate (A B,
B A, ...) on one cluster (the setups of :mod:`benchmarks.bme_probes`); per set its wall-clock,
its probes and the tuner's decision (:func:`tuner_client.phases.offline_probes.decide_set`);
per arm the mean wall-clock with a 95 % t interval, and new over old paired by block (a
geometric mean with its t interval).

Run: ``flock /tmp/harmony-bench.lock python -m benchmarks.evidence probecost --setup tpcb
--pgbench-scale 55 --memory-limit-mb 512 --sets 2 [--tag T]``, or ``--setup tpch --scale 0.1
--mix 2Q21,1Q5,1Q20,1Q2``; ``--from-json`` re-analyses.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from benchmarks.bme_probes import MB, STEP_MB, make_workload, open_cluster
from benchmarks.evidence.common import header, load_average, machine, write_results
from benchmarks.evidence.live import t_interval
from benchmarks.evidence.restart import uptime
from bme.probe_decision import probe_sizes, search_window
from tuner_client.config import MeasureConfig
from tuner_client.config.model import ProbeConfig
from tuner_client.measurer import Measurer, ServerAccess
from tuner_client.phases.offline_probes import decide_set
from tuner_client.probes.runner import BufferFill, ends_flat_unfilled, probe_order, run_probes
from tuner_client.servers.controllers.local import LocalController

logger = logging.getLogger(__name__)

ARMS = ("old", "new")


def run_set(measurer: Measurer, arm: str, sizes: list[int], args: argparse.Namespace,
            ) -> dict[str, Any]:
    """One probe set of ``arm``, timed, with the tuner's decision on it."""
    fills: dict[int, BufferFill] = {}
    started = time.monotonic()
    if arm == "new":
        probes, failures = run_probes(measurer, sizes, args.probe_seconds, fills,
                                      settle_s=args.settle_s, order=probe_order,
                                      stop=lambda got: ends_flat_unfilled(got, fills))
    else:
        probes, failures = run_probes(measurer, sizes, args.probe_seconds, fills,
                                      settle_s=args.settle_s, give_up=False)
    wall = time.monotonic() - started
    low, high = sizes[0], sizes[-1]
    decision = decide_set(probes, fills, len(sizes) - len(probes) - len(failures),
                          low=low, high=high)
    window = search_window(decision, low, high, STEP_MB * MB)
    return {"arm": arm, "wall_s": wall, "failures": failures,
            "probes": [p.to_dict() for p in probes],
            "fills": {str(s): [f.used, f.capacity] for s, f in fills.items()},
            "kind": decision.kind, "reason": decision.reason,
            "m_star": decision.fit.params.m_star if decision.fit is not None else None,
            "window": list(window) if window else None,
            "load_average": load_average()}


def measure(args: argparse.Namespace) -> dict[str, Any]:
    cluster, opened = open_cluster(args)
    sizes = probe_sizes(args.low_mb * MB, args.high_mb * MB, args.probes, step=STEP_MB * MB)
    sets: list[dict[str, Any]] = []
    try:
        cfg = MeasureConfig(warmup_s=0.0, samples=1, queries=None, seconds=args.probe_seconds,
                            aggregate="mean", estimator="count")
        measurer = Measurer(ServerAccess(opened["dsn"], opened["catalog"],
                                         LocalController(cluster, precheck_memory=False)),
                            make_workload(args, opened["dsn"]), cfg)
        measurer.in_force = {"shared_buffers": opened["original"]}
        try:
            for b in range(args.sets):
                for arm in (ARMS if b % 2 == 0 else tuple(reversed(ARMS))):
                    sets.append(run_set(measurer, arm, sizes, args) | {"block": b})
                    logger.info("block %d %s: %.1f s, %s", b, arm, sets[-1]["wall_s"],
                                sets[-1]["kind"])
            measurer.apply({"shared_buffers": opened["original"]}, warm_up=False)
        finally:
            measurer.close()
    finally:
        cluster.stop()
    return {"sizes": sizes, "sets": sets, "database_bytes": opened["database_bytes"],
            "version": opened["version"]}


def analyse(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in ARMS:
        walls = [s["wall_s"] for s in data["sets"] if s["arm"] == arm]
        out[arm] = t_interval(walls) if walls else None
    blocks: dict[int, dict[str, float]] = {}
    for s in data["sets"]:
        blocks.setdefault(s["block"], {})[s["arm"]] = s["wall_s"]
    logs = [math.log(b["new"] / b["old"]) for b in blocks.values() if len(b) == 2]
    if logs:
        mean, low, high = t_interval(logs)
        out["new_over_old"] = [math.exp(mean), math.exp(low) if low == low else math.nan,
                               math.exp(high) if high == high else math.nan]
    return out


def markdown(data: dict[str, Any]) -> str:
    a = data["analysis"]

    def iv(x: Any, digits: int = 1) -> str:
        return f"{x[0]:.{digits}f} ({x[1]:.{digits}f}–{x[2]:.{digits}f})"

    lines = [header("BME probe set cost, before and after the cuts (issue 31)", data["command"],
                    data["machine"], f"\nuptime before: `{data['uptime_start']}`; after: "
                    f"`{data['uptime_end']}`. Wall {data['wall_s']:.0f} s.\n"),
             f"{data['setup_text']}; probes at "
             + ", ".join(f"{s // MB} MB" for s in data["sizes"])
             + f", {data['probe_seconds']:g}-s window, settle budget {data['settle_s']:g} s; "
             "arms alternate by block (A B, B A).", "",
             "| arm | probe set wall-clock, s (mean, 95 % t) |", "|---|---|"]
    for arm in ARMS:
        if a.get(arm):
            lines.append(f"| {arm} | {iv(a[arm])} |")
    if a.get("new_over_old"):
        lines += ["", f"New over old, paired by block (geometric mean, 95 % t): "
                  f"{iv(a['new_over_old'], 2)}."]
    lines += ["", "| block | arm | wall s | probes (size MB: P, how settled, settle s) "
              "| decision | window MB |", "|---|---|---|---|---|---|"]
    for s in data["sets"]:
        probes = "; ".join(f"{p['size'] // MB}: {p['reads'] / max(1, p['hits'] + p['reads']):.3f}"
                           f" {p['settled'] or 'cold'} {p['settle_s']:.0f}"
                           for p in sorted(s["probes"], key=lambda p: p["size"]))
        window = ("whole range" if s["window"] is None
                  else f"{s['window'][1] // MB}..{s['window'][2] // MB}")
        lines.append(f"| {s['block']} | {s['arm']} | {s['wall_s']:.1f} | {probes} | "
                     f"{s['kind']} | {window} |")
    lines += ["", "Reasons:", ""] + [f"- block {s['block']} {s['arm']}: {s['reason']}"
                                     for s in data["sets"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--setup", choices=["tpch", "tpcb"], required=True)
    parser.add_argument("--pgbench-scale", type=int, default=55)
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--mix", default="2Q21,1Q5,1Q20,1Q2")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--memory-limit-mb", type=int, default=512)
    parser.add_argument("--low-mb", type=int, default=16)
    parser.add_argument("--high-mb", type=int, default=256)
    parser.add_argument("--probes", type=int, default=ProbeConfig.probes)
    parser.add_argument("--probe-seconds", type=float, default=ProbeConfig.probe_seconds)
    parser.add_argument("--settle-s", type=float, default=ProbeConfig.settle_s)
    parser.add_argument("--sets", type=int, default=2, help="blocks (one set of each arm)")
    parser.add_argument("--state-dir", default=None)
    parser.add_argument("--tag", default="")
    parser.add_argument("--from-json", type=Path)
    args = parser.parse_args(argv)
    name = f"evidence_probecost.{args.setup}" + (f".{args.tag}" if args.tag else "")
    if args.from_json is not None:
        data = json.loads(args.from_json.read_text())
    else:
        args.state_dir = args.state_dir or f"/var/tmp/harmony-bench-bme-probes-{args.setup}"
        data = {"machine": machine(), "uptime_start": uptime(),
                "command": "flock /tmp/harmony-bench.lock python -m benchmarks.evidence "
                           "probecost " + " ".join(argv if argv is not None else []),
                "setup_text": (f"pgbench TPC-B scale {args.pgbench_scale}, 4 clients"
                               if args.setup == "tpcb" else
                               f"TPC-H SF {args.scale:g} mix `{args.mix}`")
                + f", {args.memory_limit_mb} MB memory cgroup",
                "probe_seconds": args.probe_seconds, "settle_s": args.settle_s}
        started = time.monotonic()
        data |= measure(args)
        data["wall_s"] = time.monotonic() - started
        data["uptime_end"] = uptime()
    data["analysis"] = analyse(data)
    write_results(name, data, markdown(data))
    return 0
