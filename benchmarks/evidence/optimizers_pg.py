"""Optimizer comparison on the real PostgreSQL objective (memory-bound TPC-H), small budget.

The synthetic suite (``optimizers``) knows its optimum; a database does not. Here every
optimizer tunes the same six online knobs of the end-to-end benchmark (work_mem,
maintenance_work_mem, effective_cache_size, random_page_cost, temp_buffers, jit) on the same
memory-limited cluster, under the same online memory budget (isl constraint; Optuna's
infeasible proposals are never applied and are told a penalty), with shared_buffers held at
``--shared-buffers``. An evaluation is the tuner's protocol (three fixed-work samples, their
median). Each run's best configuration is then **re-measured** interleaved with the base
configuration, because a run's own best value is the luckiest of its noisy measurements;
the score is re-measured best / re-measured base, median and range over seeds.

Run: ``python -m benchmarks.evidence optimizers_pg [--quick]``; writes
``benchmarks/results/evidence_optimizers_pg[.quick].{json,md}``.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.evidence.common import (
    fmt,
    header,
    load_average,
    machine,
    ratio,
    spread,
    target_measurer,
    write_results,
)
from benchmarks.evidence.endtoend import MB, compare, open_memory_bound, tuner_dict
from benchmarks.evidence.optimizers import run_harmony, run_optuna
from harmony_base.space import Space
from tuner_client.budget import make_budget_view
from tuner_client.config import KnobSpace, TunerConfig, resolve_knob_space, tuner_config_from_dict
from tuner_client.measurer import ApplyHooks, Measurer
from tuner_client.servers.target import Target

logger = logging.getLogger(__name__)

#: (label, strategy or "optuna-tpe", parallel clients emulated in rounds, options)
OPTIMIZERS: tuple[tuple[str, str, int, dict[str, Any]], ...] = (
    ("nelder-mead", "nelder-mead", 1, {"simplex_size": 7}),
    ("pro x2", "pro", 2, {"simplex_size": 7}),
    ("random", "random", 1, {}),
    ("optuna-tpe", "optuna-tpe", 1, {}),
)


class PgObjective:
    """``-qpm`` of a point of the online space, measured on the server (minimised)."""

    def __init__(self, knobs: KnobSpace, measurer: Measurer, label: str) -> None:
        self.knobs = knobs
        self.measurer = measurer
        self.label = label
        self.log: list[dict[str, Any]] = []

    @property
    def space(self) -> Space:
        return self.knobs.space

    def __call__(self, point: Mapping[str, Any]) -> float:
        settings = self.knobs.settings(point)
        record = self.measurer.measure(self.label, point, settings)
        value = record.value if record.value is not None else 0.0  # failed: no throughput
        self.log.append({"settings": settings, "qpm": record.value, "failure": record.failure,
                         "samples": [s.qpm for s in record.samples]})
        logger.info("[%s] eval %d: %s -> %s qpm%s", self.label, len(self.log), settings,
                    fmt(record.value), f" ({record.failure})" if record.failure else "")
        return -value

    def best(self) -> dict[str, Any] | None:
        done = [e for e in self.log if e["qpm"] is not None]
        return max(done, key=lambda e: e["qpm"]) if done else None


def run_one(label: str, strategy: str, parallel: int, options: dict[str, Any], seed: int,
            objective: PgObjective, constraints: list[str], budget: int) -> None:
    if strategy == "optuna-tpe":
        run_optuna(objective, constraints, budget, seed)
    else:
        run_harmony(strategy, options, objective, constraints, budget, seed, parallel)


def run(cfg: TunerConfig, target: Target, base: dict[str, str], seeds: int, budget: int,
        rounds: int) -> dict[str, Any]:
    knobs = resolve_knob_space(cfg.online.knobs, target.catalog, kind="online")
    offline = resolve_knob_space(cfg.offline.knobs, target.catalog, kind="offline")
    view = make_budget_view(cfg, target.catalog, offline, knobs,
                            known_ram_bytes=target.ram_bytes)
    measurer = target_measurer(cfg, target, hooks=ApplyHooks(view.violation))
    auto_conf = target.controller.read_auto_conf()
    tracked = list(dict.fromkeys([*knobs.names, "shared_buffers", "work_mem",
                                  "maintenance_work_mem", "temp_buffers"]))
    default = measurer.current_settings(tracked)
    measurer.in_force = dict(default)
    runs: list[dict[str, Any]] = []
    try:
        outcome = measurer.apply(base, check_budget=False)
        if outcome.failure:
            raise RuntimeError(f"the base configuration {base} failed: {outcome.failure}")
        constraints = view.online_constraints(measurer.in_force)
        measurer.start()
        for label, strategy, parallel, options in OPTIMIZERS:
            for seed in range(seeds):
                objective = PgObjective(knobs, measurer, f"{label}/{seed}")
                t0 = time.monotonic()
                run_one(label, strategy, parallel, options, seed, objective, constraints, budget)
                best = objective.best()
                runs.append({"optimizer": label, "seed": seed, "wall_s": time.monotonic() - t0,
                             "evaluations": objective.log, "best": best,
                             "load_average": load_average()})
    finally:
        measurer.stop()
        measurer.restore(default, auto_conf=auto_conf)
        measurer.close()
    configs: dict[str, dict[str, str]] = {"base": {}}
    for i, r in enumerate(runs):
        if r["best"] is not None:
            configs[f"run{i}"] = r["best"]["settings"]
    comparison = compare(cfg, target, {k: {**base, **v} for k, v in configs.items()}, rounds)
    for i, r in enumerate(runs):
        b, d = comparison.get(f"run{i}_qpm"), comparison.get("base_qpm")
        r["remeasured_qpm"] = b
        r["remeasured_ratio"] = b / d if b and d else None
    return {"constraints": constraints, "base": base, "runs": runs, "compare": comparison}


def markdown(data: dict[str, Any]) -> str:
    extra = (f"\nMix `{data['mix']}`, TPC-H scale {data['scale']} in a "
             f"{data['memory_limit_bytes'] / MB:.0f} MB memory cgroup; base configuration "
             f"{data['result']['base']} (the rest PostgreSQL's defaults); online budget "
             f"`{'; '.join(data['result']['constraints'])}` (MB). {data['budget']} measured "
             f"evaluations per run, {data['seeds']} seeds; each run's best re-measured in "
             f"{data['rounds']} interleaved rounds with the base (median of 3 fixed-work samples "
             f"per measurement, estimator {data.get('estimator', 'count')}). "
             f"Wall {fmt(data.get('wall_s'))} s.\n")
    cmd = "python -m benchmarks.evidence optimizers_pg" + (" --quick" if data["quick"] else "")
    lines = [header("Optimizers on the real PostgreSQL objective (memory-bound)", cmd,
                    data["machine"], extra)]
    lines.append("| optimizer | re-measured best / base: median | min..max | best during "
                 "search (qpm): median | failed evals |")
    lines.append("|---|---:|---|---:|---:|")
    runs = data["result"]["runs"]
    for label, *_ in OPTIMIZERS:
        mine = [r for r in runs if r["optimizer"] == label]
        ratios = [r["remeasured_ratio"] for r in mine if r["remeasured_ratio"] is not None]
        during = [r["best"]["qpm"] for r in mine if r["best"] is not None]
        failed = sum(1 for r in mine for e in r["evaluations"] if e["qpm"] is None)
        sp = spread(ratios)
        span = f"{ratio(sp['min'])}..{ratio(sp['max'])}"
        lines.append(f"| {label} | {ratio(sp['median'])} | {span} | "
                     f"{fmt(statistics.median(during) if during else None)} | {failed} |")
    base = data["result"]["compare"].get("base_qpm")
    lines.append(f"\nBase configuration re-measured: {fmt(base)} qpm (median over rounds).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="1 seed, 5 evaluations per run")
    parser.add_argument("--mix", default="4Q6,4Q9,4Q13")
    parser.add_argument("--scale", type=float, default=0.4)
    parser.add_argument("--memory-limit-mb", type=int, default=256)
    parser.add_argument("--shared-buffers", default="32MB")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--budget", type=int, default=None, help="measured evaluations per run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--estimator", default="count", choices=["count", "concurrency"])
    parser.add_argument("--state-dir", type=Path,
                        default=Path("/var/tmp") / f"harmony-{os.geteuid()}" / "evidence-e2e")
    args = parser.parse_args(argv)
    seeds = args.seeds or (1 if args.quick else 2)
    budget = args.budget or (5 if args.quick else 8)
    limit = args.memory_limit_mb * MB
    probe = tuner_config_from_dict(tuner_dict("evidence-opt", args.mix, scale=args.scale,
                                              memory_limit=limit, offline_evals=1,
                                              online_evals=1, queries=1, warmup_s=1, seed=1))
    cfg = tuner_config_from_dict(tuner_dict(
        "evidence-opt", args.mix, scale=args.scale, memory_limit=limit, offline_evals=1,
        online_evals=1, queries=probe.workload.streams, warmup_s=3, seed=11,
        estimator=args.estimator))
    data: dict[str, Any] = {"machine": machine(), "quick": args.quick, "mix": args.mix,
                            "scale": args.scale, "memory_limit_bytes": limit, "seeds": seeds,
                            "budget": budget, "rounds": args.rounds,
                            "estimator": args.estimator}
    t0 = time.monotonic()
    target = open_memory_bound(cfg, args.state_dir)
    try:
        data["result"] = run(cfg, target, {"shared_buffers": args.shared_buffers}, seeds,
                             budget, args.rounds)
    finally:
        target.close()
    data["wall_s"] = time.monotonic() - t0
    write_results("evidence_optimizers_pg" + (".quick" if args.quick else ""), data,
                  markdown(data))
    return 0
