"""Optimizer comparison on the synthetic suite: Harmony's strategies vs Optuna's TPE.

Every optimizer sees the same objective interface: a point in, one value out, a budget of
*measured* evaluations. Harmony's strategies (nelder-mead, pro with 2 and 4 emulated parallel
clients, random) run inside the real session core (:class:`harmony_core.session.SessionCore`), so
the constrained runs go through the ``constraint`` plugin (isl bounding box, rejection of
infeasible points with a penalty); Optuna's TPE runs through its ask/tell API on the same
(narrowed) box, and an infeasible point it proposes is told a penalty worse than every
measurement. Infeasible proposals are never "measured": they cost no evaluation (like a
configuration the tuner refuses to apply), for every optimizer alike.

The constraint is memory-budget shaped: ``2·x0 + x1 + ... + x_{d-1} <= K`` on the integer
grid (index k of 0..levels per axis), with K just above the optimum's left-hand side, so the
optimum stays feasible but the constraint is nearly active there and cuts off about half of
the box. Score: the gap ``(best − optimum) / typical gap`` (typical gap = mean of f − optimum
over random points), so 0 is the optimum and 1 is a random point; median and quartiles over
seeds at several evaluation budgets.

Run: ``python -m benchmarks.evidence optimizers [--quick]``.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import numpy as np

from benchmarks.evidence.common import fmt, header, machine, spread, write_results
from harmony_base.space import EnumParam, IntParam, Point, RealParam, Space
from harmony_core.definition import PluginSpec, SessionDefinition
from harmony_core.session import SessionCore
from harmony_core.synth import Problem, make_problem

logger = logging.getLogger(__name__)

FUNCTIONS = ("sphere", "rosenbrock", "rastrigin")
DIMS = (2, 4, 6)
#: (label, strategy or "optuna-tpe", emulated parallel clients, options)
OPTIMIZERS: tuple[tuple[str, str, int, dict[str, Any]], ...] = (
    ("nelder-mead", "nelder-mead", 1, {"init_method": "lhs"}),
    ("pro x2", "pro", 2, {"init_method": "random-point", "init_radius": 0.2}),
    ("pro x4", "pro", 4, {"init_method": "random-point", "init_radius": 0.2}),
    ("random", "random", 1, {}),
    ("optuna-tpe", "optuna-tpe", 1, {}),
)
class Objective(Protocol):
    """What an optimizer sees: a space and a value to minimise per point."""

    @property
    def space(self) -> Space: ...

    def __call__(self, point: Mapping[str, Any]) -> float: ...


#: cap on Optuna proposals (feasible or not) per measured evaluation
MAX_PROPOSALS_PER_EVAL = 50


def budget_constraint(problem: Problem) -> tuple[str, int]:
    """``2·x0 + x1 + ... <= K`` with K 5 % of one axis above the optimum's left-hand side."""
    f = problem.function
    assert f.argmin is not None  # the suite's functions have a closed-form argmin
    k_opt = round((f.argmin - f.lower) / (f.upper - f.lower) * f.levels)
    lhs = 2 * k_opt + k_opt * (problem.dim - 1)
    limit = lhs + max(1, f.levels // 20)
    terms = " + ".join(["2 * x0"] + [f"x{i}" for i in range(1, problem.dim)])
    return f"{terms} <= {limit}", limit


def _gap(problem: Problem, value: float) -> float:
    return (value - problem.optimum) / problem.typical_gap()


def _constraints(problem: Objective, constrained: bool | list[str]) -> list[str]:
    """The constraint strings: given, the synthetic budget shape (True), or none (False)."""
    if isinstance(constrained, list):
        return constrained
    return [budget_constraint(problem)[0]] if constrained else []  # type: ignore[arg-type]


def run_harmony(strategy: str, options: dict[str, Any], problem: Objective,
                constrained: bool | list[str], budget: int, seed: int,
                parallel: int) -> tuple[list[float], list[int]]:
    """Best true value after each measured evaluation, and the round it was measured in.

    ``parallel`` clients work in synchronous rounds: each round fetches up to ``parallel``
    points (what the session can hand out now), measures them, reports them all.
    ``constrained``: the synthetic budget constraint (True) or the constraint strings.
    """
    plugins: tuple[PluginSpec, ...] = ()
    texts = _constraints(problem, constrained)
    if texts:
        plugins = (PluginSpec("constraint", {"constraints": texts}),)
    core = SessionCore(SessionDefinition(name="bench", space=problem.space, strategy=strategy,
                                         strategy_options=dict(options), plugins=plugins,
                                         seed=seed))
    best: list[float] = []
    rounds: list[int] = []
    current = math.inf
    restarts = 0
    round_no = 0
    while len(best) < budget:
        batch: list[int] = []
        while len(batch) < parallel and len(best) + len(batch) < budget:
            got = core.fetch("c")
            if got is None:
                break
            batch.append(got.trial_id)
        if not batch:
            if restarts > 10 * budget:
                break
            core.restart()  # converged (or waiting on nothing): a fresh start
            restarts += 1
            continue
        round_no += 1
        for tid in batch:
            value = problem(core.trial(tid).point)
            core.report(tid, value)
            current = min(current, value)
            best.append(current)
            rounds.append(round_no)
    return best, rounds


def run_optuna(problem: Objective, constrained: bool | list[str], budget: int,
               seed: int) -> list[float]:
    """Optuna TPE (default settings) by ask/tell on the same box; infeasible = failed."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = problem.space
    check: Callable[[Point], bool] = space.contains
    texts = _constraints(problem, constrained)
    if texts:
        core = SessionCore(SessionDefinition(name="box", space=space, strategy="random",
                                             plugins=(PluginSpec("constraint",
                                                                 {"constraints": texts}),)))
        space = core.space  # the isl-narrowed box, as the Harmony strategies get
        region = core.region
        assert region is not None
        check = region.contains
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    best: list[float] = []
    current = math.inf
    worst = -math.inf
    proposals = 0
    while len(best) < budget and proposals < MAX_PROPOSALS_PER_EVAL * budget:
        trial = study.ask()
        proposals += 1
        point: Point = {}
        for p in space.params:
            if isinstance(p, EnumParam):
                point[p.name] = trial.suggest_categorical(p.name, list(p.values))  # type: ignore[assignment]
            elif isinstance(p, IntParam) or (isinstance(p, RealParam) and p.discrete):
                # grid parameters by index, as Harmony's strategies see them: every
                # proposal is a grid point (a step of 8MB or 0.1 stays a step)
                point[p.name] = p.value_at(trial.suggest_int(p.name, 0, p.size - 1))
            else:
                point[p.name] = trial.suggest_float(p.name, float(p.min),  # type: ignore[union-attr]
                                                    float(p.max))  # type: ignore[union-attr]
        if not check(point):
            # not measured: ranked worse than every measurement (TPE is rank-based), the
            # same penalty the simplex strategies give a rejected point
            study.tell(trial, worst + 1.0 if math.isfinite(worst) else 1e12)
            continue
        value = problem(point)
        worst = max(worst, value) if math.isfinite(worst) else value
        study.tell(trial, value)
        current = min(current, value)
        best.append(current)
    return best


def _cell(label: str, strategy: str, parallel: int, options: dict[str, Any], function: str,
          dim: int, constrained: bool, budget: int, seeds: int) -> dict[str, Any]:
    """One (optimizer, function, dim, constraint) cell over seeds.

    ``at``: gaps after b measured evaluations. ``at_rounds``: gaps after b rounds of
    measurement (wall-clock with ``parallel`` evaluators; the run gets ``parallel``·budget
    evaluations so that it can use them).
    """
    problem = make_problem(function, dim, "int")
    runs: list[tuple[list[float], list[int]]] = []
    started = time.process_time()
    for seed in range(seeds):
        if strategy == "optuna-tpe":
            best = run_optuna(problem, constrained, budget, seed)
            runs.append((best, list(range(1, len(best) + 1))))
        else:
            runs.append(run_harmony(strategy, options, problem, constrained, budget * parallel,
                                    seed, parallel))
    cpu = time.process_time() - started
    checkpoints = sorted({b for b in (10 * dim, 25 * dim, 50 * dim, budget) if b <= budget})
    at: dict[str, Any] = {}
    at_rounds: dict[str, Any] = {}
    for b in checkpoints:
        gaps = [_gap(problem, r[0][b - 1]) if len(r[0]) >= b else math.nan for r in runs]
        at[str(b)] = {"gaps": gaps, **spread(gaps)}
        by_round = []
        for best, rounds in runs:
            idx = [i for i, rn in enumerate(rounds) if rn <= b]
            by_round.append(_gap(problem, best[idx[-1]]) if idx else math.nan)
        at_rounds[str(b)] = {"gaps": by_round, **spread(by_round)}
    return {"optimizer": label, "function": function, "dim": dim, "constrained": constrained,
            "budget": budget, "parallel": parallel, "seeds": seeds, "cpu_s": cpu, "at": at,
            "at_rounds": at_rounds, "evaluations_done": [len(r[0]) for r in runs],
            "rounds_done": [r[1][-1] if r[1] else 0 for r in runs]}


def measure(seeds: int, budget_per_dim: int, dims: tuple[int, ...] = DIMS,
            functions: tuple[str, ...] = FUNCTIONS,
            optimizers: tuple[tuple[str, str, int, dict[str, Any]], ...] = OPTIMIZERS,
            constrained_options: tuple[bool, ...] = (False, True)) -> list[dict[str, Any]]:
    rows = []
    for constrained in constrained_options:
        for function in functions:
            for dim in dims:
                for label, strategy, parallel, options in optimizers:
                    row = _cell(label, strategy, parallel, options, function, dim, constrained,
                                budget_per_dim * dim, seeds)
                    logger.info("%s %s d=%d %s: median gap at %d = %s (%.1f s CPU)", label,
                                function, dim, "constrained" if constrained else "box",
                                row["budget"], row["at"][str(row["budget"])]["median"],
                                row["cpu_s"])
                    rows.append(row)
    return rows


def markdown(data: dict[str, Any]) -> str:
    rows = data["rows"]
    cmd = "python -m benchmarks.evidence optimizers" + (" --quick" if data["quick"] else "")
    extra = (f"\n{data['seeds']} seeds per cell; budget {data['budget_per_dim']}·d measured "
             f"evaluations; integer grid (101 levels per axis; sphere/rastrigin optimum at the "
             f"box centre, rosenbrock at 3/4). Cell = median normalised gap "
             f"(best − optimum)/(typical gap) [q1–q3]; 0 = optimum found, 1 = a random point. "
             f"Constrained: `2·x0 + x1 + … ≤ K` through the constraint plugin (isl).\n")
    lines = [header("Optimizer comparison on the synthetic suite", cmd, data["machine"], extra)]
    labels = [o[0] for o in OPTIMIZERS if any(r["optimizer"] == o[0] for r in rows)]
    for constrained in (False, True):
        sub = [r for r in rows if r["constrained"] == constrained]
        if not sub:
            continue
        checkpoints = sorted({int(b) for r in sub for b in r["at"]})
        for which in ("small", "full", "rounds"):
            title = {"small": "10·d evaluations", "full": "full budget of evaluations",
                     "rounds": "same wall-clock: 10·d rounds of parallel measurement"}[which]
            lines.append(f"\n## {'With' if constrained else 'Without'} the memory-budget "
                         f"constraint — {title}\n")
            lines.append("| function | d | " + " | ".join(labels) + " |")
            lines.append("|---|---:|" + "---:|" * len(labels))
            for function in FUNCTIONS:
                for dim in DIMS:
                    cells = []
                    for label in labels:
                        r = next((x for x in sub if x["function"] == function and x["dim"] == dim
                                  and x["optimizer"] == label), None)
                        if r is None:
                            cells.append("")
                            continue
                        key = str(r["budget"]) if which == "full" else str(10 * dim)
                        s = r["at_rounds" if which == "rounds" else "at"].get(key)
                        cells.append("" if s is None else
                                     f"{fmt(s['median'])} [{fmt(s['q1'])}–{fmt(s['q3'])}]")
                    if any(cells):
                        lines.append(f"| {function} | {dim} | " + " | ".join(cells) + " |")
        del checkpoints
    # wins summary: how often each optimizer has the lowest median at the full budget
    lines.append("\n## Summary\n")
    lines.append("| optimizer | best median (full budget), cells | best median (10·d), cells | "
                 "CPU s per run (mean) |")
    lines.append("|---|---:|---:|---:|")
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["function"], r["dim"], r["constrained"]), []).append(r)
    for label in labels:
        wins_full = wins_small = 0
        for cell in groups.values():
            for key, counter in (("full", 0), ("small", 1)):
                def med(x: dict[str, Any], key: str = key) -> float:
                    k = str(x["budget"]) if key == "full" else str(10 * x["dim"])
                    m = x["at"].get(k, {}).get("median")
                    return m if m is not None else math.inf
                best = min(med(x) for x in cell)
                if any(x["optimizer"] == label and med(x) <= best + 1e-12 for x in cell):
                    if counter == 0:
                        wins_full += 1
                    else:
                        wins_small += 1
        cpu = [r["cpu_s"] / r["seeds"] for r in rows if r["optimizer"] == label]
        lines.append(f"| {label} | {wins_full} of {len(groups)} | {wins_small} of {len(groups)} "
                     f"| {np.mean(cpu):.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="3 seeds, budget 25·d")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--budget-per-dim", type=int, default=None)
    args = parser.parse_args(argv)
    seeds = args.seeds or (3 if args.quick else 10)
    per_dim = args.budget_per_dim or (25 if args.quick else 50)
    mach = machine()
    started = time.monotonic()
    rows = measure(seeds, per_dim)
    data = {"machine": mach, "quick": args.quick, "seeds": seeds, "budget_per_dim": per_dim,
            "wall_s": time.monotonic() - started, "rows": rows}
    name = "evidence_optimizers" + (".quick" if args.quick else "")
    write_results(name, data, markdown(data))
    return 0
