"""The strategies' benchmark tables: the synthetic suite and the noisy integer grid.

**Synthetic suite** (``--suite synthetic``): evaluations to within 1 % of the optimum for
nelder-mead, pro (4 clients) and random on sphere, Rosenbrock, Ackley, Rastrigin and
Michalewicz. "Within 1 %" means ``best - optimum <= 0.01 * typical gap``, the typical gap being
the mean of ``f - optimum`` over 4,096 uniformly random points of the same space. Each cell is
the median over seeds of the evaluation count at which a run first got there, out of a budget
of ``200 * dim`` evaluations; a run that never got there counts as infinite, so a median of "-"
means fewer than half the seeds did. The harness restarts a converged strategy. Writes
benchmarks/results/strategies.json and .md (``--quick``: 5 seeds instead of 20).

**Noisy integer grid** (``--suite noisy-grid``): fourteen Moré–Garbow–Hillstrom least-squares
problems (2–8 dimensions, standard starts) on a 201-level integer grid per axis, each
measurement multiplied by ``1 + noise * N(0, 1)`` (noise 0, 5 % and 15 %). Every strategy runs
as shipped through ask/tell from the standard start with a budget of ``200 * (n + 1)``
evaluations and is never restarted by the harness. A data profile (Moré & Wild, SIAM J. Optim.
20, 2009) gives the share of (problem, seed) runs solved within 10, 50 and 200·(n+1)
evaluations, judged on the true value of the best *measured* point (what a tuner would report)
with tau = 1e-3. PRO with 4 clients is also judged in parallel steps (rounds of up to 4
simultaneous evaluations) against Nelder-Mead's evaluations. Writes
benchmarks/results/strategies_noisy_grid.json and .md (``--quick``: 2 seeds, 5 % noise only,
without Optuna's TPE, which costs most of the CPU time).

Run: ``.venv/bin/python -m benchmarks.strategies_table [--quick] [--suite SUITE]``
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.optimize

from benchmarks.machine import cpu_model
from harmony_base.space import IntParam, Point, Space
from harmony_core.synth import FUNCTIONS, trace_synthetic
from strategies.base import Trial, make_strategy

RESULTS = Path(__file__).resolve().parent / "results"
DIMS = (2, 5, 10)
GRIDS = ("real", "int")
#: (label, strategy, emulated clients, strategy options)
STRATEGIES: tuple[tuple[str, str, int, dict[str, Any]], ...] = (
    ("nelder-mead", "nelder-mead", 1, {"init_method": "lhs"}),
    ("pro (4 clients)", "pro", 4, {"init_method": "random-point", "init_radius": 0.2}),
    ("random", "random", 1, {}),
)
WITHIN = 0.01
BUDGET_PER_DIM = 200


def _machine() -> dict[str, Any]:
    cpu = cpu_model()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "numpy": np.__version__, "platform": platform.platform(),
            "load_average": list(os.getloadavg())}


def measure(seeds: int) -> list[dict[str, Any]]:
    """One row per (function, dim, grid, strategy): per-seed evaluations and their median."""
    rows = []
    for function in FUNCTIONS:
        for dim in DIMS:
            for grid in GRIDS:
                budget = BUDGET_PER_DIM * dim
                for label, strategy, parallel, options in STRATEGIES:
                    start = time.process_time()
                    reached: list[int | None] = []
                    for seed in range(seeds):
                        trace = trace_synthetic(
                            strategy, function, dim, grid=grid, evals=budget, seed=seed,
                            parallel=parallel, strategy_options=options,
                            restart_on_converge=strategy != "random", stop_within=WITHIN)
                        reached.append(trace.evals_to_within(WITHIN))
                    median = statistics.median(math.inf if r is None else r for r in reached)
                    rows.append({
                        "function": function, "dim": dim, "grid": grid, "strategy": label,
                        "budget": budget, "seeds": seeds,
                        "median_evals": None if math.isinf(median) else median,
                        "reached": sum(r is not None for r in reached),
                        "per_seed": reached, "cpu_seconds": round(time.process_time() - start, 2),
                    })
    return rows


def markdown(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    m = info["machine"]
    labels = [label for label, *_ in STRATEGIES]
    lines = [
        "# Strategies: evaluations to within 1% of the optimum",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, numpy {m['numpy']}; "
        f"load average at start {m['load_average'][0]:.2f} (the machine is shared).",
        f"Command: `{info['command']}` ({info['seeds']} seeds; {info['wall_seconds']:.0f} s wall, "
        f"{info['cpu_seconds']:.0f} s CPU).",
        "",
        "Cell: median over seeds of the evaluations a run needed to get within 1% of the optimum "
        "(1% of the mean gap of a random point), and how many seeds got there within the budget "
        f"of {BUDGET_PER_DIM}·dim evaluations; `-` = fewer than half did. nelder-mead: 1 client, "
        "Latin-hypercube initial simplex; pro: 4 clients, axis simplex (radius 0.2) around a "
        "random point; both restart when they converge. random: 1 client. Real grid = "
        "continuous box; int grid = 101 (Ackley 129) integer levels per axis, optimum on the grid.",
        "",
        "| function | dim | grid | budget | " + " | ".join(labels) + " |",
        "|---|---:|---|---:|" + "---:|" * len(labels),
    ]
    by_key: dict[tuple[str, int, str], dict[str, dict[str, Any]]] = {}
    for row in rows:
        by_key.setdefault((row["function"], row["dim"], row["grid"]), {})[row["strategy"]] = row
    for (function, dim, grid), cells in by_key.items():
        budget = next(iter(cells.values()))["budget"]
        shown = []
        for label in labels:
            row = cells[label]
            median = row["median_evals"]
            text = "-" if median is None else f"{median:g}"
            shown.append(f"{text} ({row['reached']}/{row['seeds']})")
        lines.append(f"| {function} | {dim} | {grid} | {budget} | " + " | ".join(shown) + " |")
    totals = {label: sum(r["reached"] for r in rows if r["strategy"] == label) for label in labels}
    runs = sum(1 for r in rows if r["strategy"] == labels[0]) * info["seeds"]
    lines += ["", "Runs that got within 1%: " + ", ".join(f"{k} {v}/{runs}"
                                                       for k, v in totals.items()) + "."]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# The noisy-grid regime: classic least-squares test problems on a 201-level integer grid
# ---------------------------------------------------------------------------------------------
#: grid levels per axis: index k of 0..LEVELS-1 stands for lower + k * (upper - lower) / 200
LEVELS = 201
#: data-profile tolerance and budgets (multiples of n + 1 evaluations), Moré & Wild (2009)
TAU = 1e-3
ALPHAS = (10, 50, 200)
NOISES = (0.0, 0.05, 0.15)
QUICK_NOISES = (0.05,)
#: Optuna's TPE costs ~20 s of CPU for one 8-d run of 1,800 trials: only at 5 % noise
TPE_NOISES = (0.05,)
#: (label, strategy, clients, options): every strategy starts at the problem's standard start
GRID_STRATEGIES: tuple[tuple[str, str, int, dict[str, Any]], ...] = (
    ("nelder-mead", "nelder-mead", 1, {}),
    ("pro (1 client)", "pro", 1, {}),
    ("pro (4 clients)", "pro", 4, {}),
    ("cma-es", "cma-es", 1, {}),
    ("random", "random", 1, {}),
    ("optuna-tpe", "optuna-tpe", 1, {}),
)


def _residual_sum(r: np.ndarray) -> float:
    return float(np.dot(r, r))


def rosenbrock_r(x: np.ndarray) -> np.ndarray:
    return np.array([10.0 * (x[1] - x[0] ** 2), 1.0 - x[0]])


def freudenstein_roth_r(x: np.ndarray) -> np.ndarray:
    return np.array([-13.0 + x[0] + ((5.0 - x[1]) * x[1] - 2.0) * x[1],
                     -29.0 + x[0] + ((x[1] + 1.0) * x[1] - 14.0) * x[1]])


def beale_r(x: np.ndarray) -> np.ndarray:
    y = np.array([1.5, 2.25, 2.625])
    return y - x[0] * (1.0 - x[1] ** np.arange(1, 4))


def brown_badly_scaled_r(x: np.ndarray) -> np.ndarray:
    return np.array([x[0] - 1e6, x[1] - 2e-6, x[0] * x[1] - 2.0])


def helical_valley_r(x: np.ndarray) -> np.ndarray:
    if x[0] > 0:
        theta = math.atan(x[1] / x[0]) / (2 * math.pi)
    elif x[0] < 0:
        theta = math.atan(x[1] / x[0]) / (2 * math.pi) + 0.5
    else:
        theta = 0.25 * math.copysign(1.0, x[1]) if x[1] != 0 else 0.0
    return np.array([10.0 * (x[2] - 10.0 * theta), 10.0 * (math.hypot(x[0], x[1]) - 1.0), x[2]])


def box3d_r(x: np.ndarray) -> np.ndarray:
    t = 0.1 * np.arange(1, 11)
    return np.exp(-t * x[0]) - np.exp(-t * x[1]) - x[2] * (np.exp(-t) - np.exp(-10.0 * t))


def powell_singular_r(x: np.ndarray) -> np.ndarray:
    return np.array([x[0] + 10.0 * x[1], math.sqrt(5.0) * (x[2] - x[3]),
                     (x[1] - 2.0 * x[2]) ** 2, math.sqrt(10.0) * (x[0] - x[3]) ** 2])


def wood_r(x: np.ndarray) -> np.ndarray:
    return np.array([10.0 * (x[1] - x[0] ** 2), 1.0 - x[0], math.sqrt(90.0) * (x[3] - x[2] ** 2),
                     1.0 - x[2], math.sqrt(10.0) * (x[1] + x[3] - 2.0),
                     (x[1] - x[3]) / math.sqrt(10.0)])


_KO_Y = np.array([.1957, .1947, .1735, .1600, .0844, .0627, .0456, .0342, .0323, .0235, .0246])
_KO_U = np.array([4.0, 2.0, 1.0, .5, .25, .167, .125, .1, .0833, .0714, .0625])


def kowalik_osborne_r(x: np.ndarray) -> np.ndarray:
    u = _KO_U
    return _KO_Y - x[0] * (u * u + u * x[1]) / (u * u + u * x[2] + x[3])


def brown_dennis_r(x: np.ndarray) -> np.ndarray:
    t = np.arange(1, 21) / 5.0
    return (x[0] + t * x[1] - np.exp(t)) ** 2 + (x[2] + x[3] * np.sin(t) - np.cos(t)) ** 2


def brown_almost_linear_r(x: np.ndarray) -> np.ndarray:
    n = len(x)
    r = x + np.sum(x) - (n + 1.0)
    r[-1] = float(np.prod(x)) - 1.0
    return r


def variably_dimensioned_r(x: np.ndarray) -> np.ndarray:
    j = np.arange(1, len(x) + 1)
    s = float(np.dot(j, x - 1.0))
    return np.concatenate([x - 1.0, [s, s * s]])


def extended_rosenbrock_r(x: np.ndarray) -> np.ndarray:
    return np.concatenate([10.0 * (x[1::2] - x[0::2] ** 2), 1.0 - x[0::2]])


def extended_powell_r(x: np.ndarray) -> np.ndarray:
    return np.concatenate([powell_singular_r(x[i:i + 4]) for i in range(0, len(x), 4)])


@dataclass(frozen=True)
class GridProblem:
    """A least-squares test problem on a 201-level integer grid over the box ``lower..upper``.

    Moré, Garbow & Hillstrom, "Testing unconstrained optimization software", ACM TOMS 7
    (1981): residuals, standard start ``x0`` and a known minimiser ``xstar`` (or ``None``:
    the reference is then scipy's least-squares solution from ``x0``).
    """

    name: str
    residuals: Callable[[np.ndarray], np.ndarray]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    x0: tuple[float, ...]
    xstar: tuple[float, ...] | None = None

    @property
    def dim(self) -> int:
        return len(self.x0)

    @property
    def space(self) -> Space:
        start = self.index(np.array(self.x0))
        return Space(tuple(IntParam(f"x{i}", 0, LEVELS - 1, default=int(start[i]))
                           for i in range(self.dim)))

    def x(self, k: np.ndarray) -> np.ndarray:
        lo, hi = np.array(self.lower), np.array(self.upper)
        return lo + np.asarray(k, dtype=float) * (hi - lo) / (LEVELS - 1)

    def index(self, x: np.ndarray) -> np.ndarray:
        lo, hi = np.array(self.lower), np.array(self.upper)
        return np.clip(np.rint((x - lo) / (hi - lo) * (LEVELS - 1)), 0, LEVELS - 1).astype(int)

    def f_index(self, k: np.ndarray) -> float:
        return _residual_sum(self.residuals(self.x(k)))

    def __call__(self, point: Point) -> float:
        return self.f_index(np.array([point[f"x{i}"] for i in range(self.dim)]))

    def start_value(self) -> float:
        return self.f_index(self.index(np.array(self.x0)))

    @functools.cached_property
    def reference(self) -> float:
        """The lowest value known on the grid: a grid-local search from the snapped minimiser."""
        starts = []
        if self.xstar is not None:
            starts.append(np.array(self.xstar))
        fit = scipy.optimize.least_squares(self.residuals, np.array(self.x0), xtol=1e-12,
                                           ftol=1e-12, gtol=1e-12, max_nfev=20_000)
        starts.append(fit.x)
        return min(self._grid_descent(self.index(x)) for x in starts)

    def _grid_descent(self, k: np.ndarray) -> float:
        """Descend over the 3^n grid neighbours until none is better."""
        steps = np.array(list(itertools.product((-1, 0, 1), repeat=self.dim)))
        best = self.f_index(k)
        while True:
            cands = np.clip(k + steps, 0, LEVELS - 1)
            values = [self.f_index(c) for c in cands]
            i = int(np.argmin(values))
            if values[i] >= best:
                return best
            best, k = values[i], cands[i]


def _box(n: int, lo: float, hi: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    return (lo,) * n, (hi,) * n


PROBLEMS: tuple[GridProblem, ...] = (
    GridProblem("rosenbrock", rosenbrock_r, *_box(2, -2, 2), (-1.2, 1.0), (1.0, 1.0)),
    GridProblem("freudenstein-roth", freudenstein_roth_r, *_box(2, -5, 15), (0.5, -2.0),
                (5.0, 4.0)),
    GridProblem("beale", beale_r, *_box(2, -5, 5), (1.0, 1.0), (3.0, 0.5)),
    GridProblem("brown-badly-scaled", brown_badly_scaled_r, (0.0, 0.0), (2e6, 2.0), (1.0, 1.0),
                (1e6, 2e-6)),
    GridProblem("helical-valley", helical_valley_r, *_box(3, -2, 2), (-1.0, 0.0, 0.0),
                (1.0, 0.0, 0.0)),
    GridProblem("box-3d", box3d_r, *_box(3, 0, 20), (0.0, 10.0, 20.0), (1.0, 10.0, 1.0)),
    GridProblem("powell-singular", powell_singular_r, *_box(4, -4, 4), (3.0, -1.0, 0.0, 1.0),
                (0.0,) * 4),
    GridProblem("wood", wood_r, *_box(4, -4, 4), (-3.0, -1.0, -3.0, -1.0), (1.0,) * 4),
    GridProblem("kowalik-osborne", kowalik_osborne_r, *_box(4, 0, 0.5),
                (0.25, 0.39, 0.415, 0.39)),
    GridProblem("brown-dennis", brown_dennis_r, (-30.0, -30.0, -6.0, -6.0),
                (30.0, 30.0, 6.0, 6.0), (25.0, 5.0, -5.0, -1.0)),
    GridProblem("brown-almost-linear", brown_almost_linear_r, *_box(5, -1, 3), (0.5,) * 5,
                (1.0,) * 5),
    GridProblem("variably-dimensioned", variably_dimensioned_r, *_box(6, -2, 2),
                tuple(1.0 - j / 6 for j in range(1, 7)), (1.0,) * 6),
    GridProblem("extended-rosenbrock", extended_rosenbrock_r, *_box(6, -2, 2),
                (-1.2, 1.0) * 3, (1.0,) * 6),
    GridProblem("extended-powell", extended_powell_r, *_box(8, -4, 4),
                (3.0, -1.0, 0.0, 1.0) * 2, (0.0,) * 8),
)


@dataclass
class GridRun:
    """One run: the true value of the best *measured* point after each evaluation and after
    each round of simultaneous evaluations, and whether the strategy stopped by itself."""

    trace: list[float]
    rounds: list[float]
    stopped: str | None = None


def run_grid_strategy(strategy: str, options: Mapping[str, Any], problem: GridProblem,
                      budget: int, seed: int, noise: float, clients: int) -> GridRun:
    """Drive a registered strategy as ``clients`` clients measuring in synchronous rounds.

    Every measurement is the true value times ``1 + noise * N(0, 1)``. Each round asks for up
    to ``clients`` points (fewer when the strategy has no more to hand out before results),
    measures them at once and tells them all. The run never restarts the strategy: a
    strategy that hands out nothing before the budget is spent stopped by itself.
    """
    if strategy == "optuna-tpe":
        return _run_tpe(problem, budget, seed, noise)
    start = problem.space.default_point()
    opts = dict(options)
    if strategy != "random":
        opts.setdefault("init_point", start)
    strat = make_strategy(strategy, problem.space, seed=seed, **opts)
    rng = np.random.default_rng([seed, 0x5EED])
    run = GridRun([], [])
    best_measured, best_true = math.inf, math.inf
    while len(run.trace) < budget:
        batch: list[Trial] = []
        while len(batch) < clients and len(run.trace) + len(batch) < budget:
            trial = strat.ask()
            if trial is None:
                break
            batch.append(trial)
        if not batch:
            run.stopped = getattr(strat, "convergence_reason", None) or "handed out nothing"
            break
        for trial in batch:
            true_value = problem(trial.point)
            measured = true_value * (1.0 + noise * float(rng.standard_normal()))
            strat.tell(trial.id, measured)
            if measured < best_measured:
                best_measured, best_true = measured, true_value
            run.trace.append(best_true)
        run.rounds.append(best_true)
    return run


def _run_tpe(problem: GridProblem, budget: int, seed: int, noise: float) -> GridRun:
    """Optuna's TPE sampler (defaults), started with the standard start as its first trial."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    study.enqueue_trial(problem.space.default_point())
    dists = {f"x{i}": optuna.distributions.IntDistribution(0, LEVELS - 1)
             for i in range(problem.dim)}
    rng = np.random.default_rng([seed, 0x5EED])
    run = GridRun([], [])
    best_measured, best_true = math.inf, math.inf
    for _ in range(budget):
        trial = study.ask(dists)
        true_value = problem(trial.params)
        measured = true_value * (1.0 + noise * float(rng.standard_normal()))
        study.tell(trial, measured)
        if measured < best_measured:
            best_measured, best_true = measured, true_value
        run.trace.append(best_true)
        run.rounds.append(best_true)
    return run


def first_at_or_below(trace: Sequence[float], target: float) -> int | None:
    """1-based index of the first entry ``<= target`` (``None``: never)."""
    for i, value in enumerate(trace):
        if value <= target:
            return i + 1
    return None


def measure_grid(seeds: int, noises: Sequence[float],
                 strategies: Sequence[tuple[str, str, int, dict[str, Any]]] = GRID_STRATEGIES,
                 problems: Sequence[GridProblem] = PROBLEMS,
                 budget_alpha: int = ALPHAS[-1]) -> list[dict[str, Any]]:
    """One row per (problem, noise, strategy, seed): the traces and where the run stopped."""
    rows = []
    for problem in problems:
        budget = budget_alpha * (problem.dim + 1)
        for noise in noises:
            for label, strategy, clients, options in strategies:
                if strategy == "optuna-tpe" and noise not in TPE_NOISES:
                    continue
                for seed in range(seeds):
                    start = time.process_time()
                    run = run_grid_strategy(strategy, options, problem, budget, seed, noise,
                                            clients)
                    rows.append({
                        "problem": problem.name, "dim": problem.dim, "noise": noise,
                        "strategy": label, "clients": clients, "seed": seed, "budget": budget,
                        "evaluations": len(run.trace), "stopped": run.stopped,
                        "trace": run.trace, "rounds": run.rounds,
                        "cpu_seconds": round(time.process_time() - start, 3)})
            print(f"{problem.name} noise {noise:g}: done", file=sys.stderr, flush=True)
    return rows


def data_profile(rows: Sequence[dict[str, Any]], problems: Sequence[GridProblem] = PROBLEMS,
                 tau: float = TAU) -> dict[str, Any]:
    """Solved shares per (noise, strategy) within ``alpha * (n + 1)`` evaluations.

    A run solved its problem once the true value of its best measured point ``f`` satisfies
    ``f(x0) - f >= (1 - tau) * (f(x0) - f_L)`` (Moré & Wild 2009), ``f_L`` being the lower of
    the grid reference and the best any run reached (under any noise).
    """
    by_name = {p.name: p for p in problems}
    lowest: dict[str, float] = {}
    for row in rows:
        lowest[row["problem"]] = min(lowest.get(row["problem"], math.inf),
                                     min(row["trace"], default=math.inf))
    f_low = {name: min(by_name[name].reference, value) for name, value in lowest.items()}
    out: dict[str, Any] = {"f_low": f_low, "tau": tau, "profiles": {}}
    for row in rows:
        problem = by_name[row["problem"]]
        f0 = problem.start_value()
        target = f0 - (1.0 - tau) * (f0 - f_low[problem.name])
        solved_at = first_at_or_below(row["trace"], target)
        row["solved_at"] = solved_at
        row["solved_round"] = first_at_or_below(row["rounds"], target)
        cell = out["profiles"].setdefault(f"{row['noise']:g}", {}).setdefault(
            row["strategy"], {"runs": 0, **{str(a): 0 for a in ALPHAS}})
        cell["runs"] += 1
        for alpha in ALPHAS:
            if solved_at is not None and solved_at <= alpha * (problem.dim + 1):
                cell[str(alpha)] += 1
    return out


def pro_parallel_steps(rows: Sequence[dict[str, Any]], pro_label: str = "pro (4 clients)",
                       nm_label: str = "nelder-mead") -> list[dict[str, Any]]:
    """Per (noise, problem, seed): NM's final value and the evaluations it needed to reach it,
    and the parallel steps PRO with 4 clients needed to reach that value, and its final value."""
    nm = {(r["noise"], r["problem"], r["seed"]): r for r in rows if r["strategy"] == nm_label}
    out = []
    for r in rows:
        if r["strategy"] != pro_label:
            continue
        n = nm.get((r["noise"], r["problem"], r["seed"]))
        if n is None or not n["trace"]:
            continue
        nm_final = n["trace"][-1]
        out.append({"noise": r["noise"], "problem": r["problem"], "seed": r["seed"],
                    "nm_final": nm_final, "nm_evals": first_at_or_below(n["trace"], nm_final),
                    "pro_final": r["trace"][-1] if r["trace"] else math.inf,
                    "pro_steps": first_at_or_below(r["rounds"], nm_final),
                    "pro_rounds": len(r["rounds"]), "nm_solved_at": n.get("solved_at"),
                    "pro_solved_round": r.get("solved_round")})
    return out


def _summarise_run(row: dict[str, Any]) -> dict[str, Any]:
    """What the JSON keeps of a run (the full traces would be tens of megabytes)."""
    n1 = row["dim"] + 1
    trace = row["trace"]
    at = {str(a): trace[min(a * n1, len(trace)) - 1] if trace else None for a in ALPHAS}
    return {k: v for k, v in row.items() if k not in ("trace", "rounds")} | {
        "final": trace[-1] if trace else None, "at": at, "round_count": len(row["rounds"])}


def _fmt(value: float | None) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.3g}"


def grid_markdown(rows: Sequence[dict[str, Any]], profile: dict[str, Any],
                  steps: Sequence[dict[str, Any]], info: dict[str, Any]) -> str:
    m = info["machine"]
    labels = list(dict.fromkeys(r["strategy"] for r in rows))
    lines = [
        "# Strategies on a noisy integer grid: data profiles",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, numpy {m['numpy']}; "
        f"load average at start {m['load_average'][0]:.2f} (the machine is shared).",
        f"Command: `{info['command']}` ({info['seeds']} seeds; {info['wall_seconds']:.0f} s "
        f"wall, {info['cpu_seconds']:.0f} s CPU).",
        "",
        f"{len(info['problems'])} Moré–Garbow–Hillstrom problems "
        f"({', '.join(f'{p} ({d})' for p, d in info['problems'])}) on a {LEVELS}-level integer "
        "grid per axis, started at the standard start; each measurement is the true value "
        "times 1 + noise·N(0, 1). Budget 200·(n+1) evaluations; no harness restarts. A run is "
        f"solved once the true value f of its best measured point has f(x0) − f ≥ "
        f"(1 − τ)(f(x0) − f_L), τ = {TAU:g}. Cells: share of the {info['seeds']}·"
        f"{len(info['problems'])} runs solved within 10, 50 and 200·(n+1) evaluations. "
        + ("Optuna's TPE runs only at noise "
         f"{', '.join(f'{x:g}' for x in TPE_NOISES)} (its CPU cost)."
         if any(r["strategy"] == "optuna-tpe" for r in rows) else "Optuna's TPE is left out."),
        "",
    ]
    for noise, cells in profile["profiles"].items():
        lines += [f"## Noise {float(noise) * 100:g} %", "",
                  "| strategy | 10·(n+1) | 50·(n+1) | 200·(n+1) | stopped early | budget used |",
                  "|---|---:|---:|---:|---:|---:|"]
        for label in labels:
            cell = cells.get(label)
            if cell is None:
                continue
            mine = [r for r in rows if r["strategy"] == label and f"{r['noise']:g}" == noise]
            early = sum(1 for r in mine if r["stopped"] is not None)
            used = sum(r["evaluations"] for r in mine) / max(sum(r["budget"] for r in mine), 1)
            shares = " | ".join(f"{cell[str(a)] / cell['runs']:.2f}" for a in ALPHAS)
            lines.append(f"| {label} | {shares} | {early}/{len(mine)} | {used:.0%} |")
        lines.append("")
        reasons = sorted({r["stopped"] for r in rows
                          if f"{r['noise']:g}" == noise and r["stopped"] is not None})
        if reasons:
            lines += ["Reasons given by strategies that stopped early: "
                      + "; ".join(f"`{x}`" for x in reasons) + ".", ""]
    if steps:
        lines += ["## PRO with 4 clients in parallel steps", "",
                  "Per noise level, over problems and seeds: Nelder-Mead's final value and the "
                  "evaluations it needed to first reach it, against the parallel steps (rounds "
                  "of up to 4 simultaneous evaluations) PRO with 4 clients needed to reach the "
                  "same value, and PRO's final value. Medians; a run that never reached NM's "
                  "final value counts as infinite.", "",
                  "| noise | runs | PRO reached NM's final value | ... in fewer steps than NM's "
                  "evaluations | median NM evaluations | median PRO steps | PRO final ≤ NM "
                  "final |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for noise in sorted({s["noise"] for s in steps}):
            mine = [s for s in steps if s["noise"] == noise]
            reached = [s for s in mine if s["pro_steps"] is not None]
            fewer = [s for s in reached if s["pro_steps"] < s["nm_evals"]]
            med_nm = statistics.median(s["nm_evals"] for s in mine)
            med_pro = statistics.median(math.inf if s["pro_steps"] is None else s["pro_steps"]
                                        for s in mine)
            not_worse = sum(1 for s in mine if s["pro_final"] <= s["nm_final"])
            lines.append(f"| {noise * 100:g} % | {len(mine)} | {len(reached)} | {len(fewer)} | "
                         f"{med_nm:g} | {_fmt(med_pro)} | {not_worse} |")
        lines += ["", "Per problem (5 % noise where run, else the first noise level): median "
                  "over seeds.", "",
                  "| problem | NM final | NM evaluations to it | PRO-4 final | PRO-4 steps to "
                  "NM's final | PRO-4 rounds used |", "|---|---:|---:|---:|---:|---:|"]
        noises = sorted({s["noise"] for s in steps})
        shown = 0.05 if 0.05 in noises else noises[0]
        for name, _dim in info["problems"]:
            mine = [s for s in steps if s["noise"] == shown and s["problem"] == name]
            if not mine:
                continue
            lines.append(
                f"| {name} | {_fmt(statistics.median(s['nm_final'] for s in mine))} | "
                f"{statistics.median(s['nm_evals'] for s in mine):g} | "
                f"{_fmt(statistics.median(s['pro_final'] for s in mine))} | "
                f"{_fmt(statistics.median(math.inf if s['pro_steps'] is None else s['pro_steps'] for s in mine))} | "  # noqa: E501
                f"{statistics.median(s['pro_rounds'] for s in mine):g} |")
        lines.append("")
    lines += ["## f_L per problem", "",
              "| problem | n | f(x0) | f_L |", "|---|---:|---:|---:|"]
    by_name = {p.name: p for p in PROBLEMS}
    for name, dim in info["problems"]:
        lines.append(f"| {name} | {dim} | {by_name[name].start_value():.6g} | "
                     f"{profile['f_low'][name]:.6g} |")
    return "\n".join(lines) + "\n"


def run_noisy_grid(quick: bool, seeds_given: int | None) -> None:
    seeds = seeds_given if seeds_given is not None else (2 if quick else 5)
    noises = QUICK_NOISES if quick else NOISES
    chosen = tuple(s for s in GRID_STRATEGIES if not (quick and s[1] == "optuna-tpe"))
    machine = _machine()
    start, start_cpu = time.perf_counter(), time.process_time()
    rows = measure_grid(seeds, noises, chosen)
    profile = data_profile(rows)
    steps = pro_parallel_steps(rows)
    info = {
        "command": "python -m benchmarks.strategies_table --suite noisy-grid"
                   + (" --quick" if quick else "")
                   + (f" --seeds {seeds_given}" if seeds_given is not None else ""),
        "seeds": seeds, "noises": list(noises), "tau": TAU, "alphas": list(ALPHAS),
        "levels": LEVELS, "problems": [(p.name, p.dim) for p in PROBLEMS], "machine": machine,
        "wall_seconds": round(time.perf_counter() - start, 1),
        "cpu_seconds": round(time.process_time() - start_cpu, 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = "strategies_noisy_grid.quick" if quick else "strategies_noisy_grid"
    text = grid_markdown(rows, profile, steps, info)
    (RESULTS / f"{stem}.json").write_text(json.dumps(
        {**info, **profile, "pro_parallel_steps": steps,
         "runs": [_summarise_run(r) for r in rows]}, indent=1) + "\n")
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)


def run_synthetic_suite(quick: bool) -> None:
    seeds = 5 if quick else 20
    machine = _machine()
    start, start_cpu = time.perf_counter(), time.process_time()
    rows = measure(seeds)
    info = {
        "command": "python -m benchmarks.strategies_table --suite synthetic"
                   + (" --quick" if quick else ""),
        "seeds": seeds, "within": WITHIN, "budget_per_dim": BUDGET_PER_DIM, "machine": machine,
        "wall_seconds": round(time.perf_counter() - start, 1),
        "cpu_seconds": round(time.process_time() - start_cpu, 1),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = "strategies.quick" if quick else "strategies"
    (RESULTS / f"{stem}.json").write_text(json.dumps({**info, "rows": rows}, indent=2) + "\n")
    text = markdown(rows, info)
    (RESULTS / f"{stem}.md").write_text(text)
    print(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true",
                        help="fewer seeds (synthetic 5, noisy grid 2, 5 %% noise, no TPE)")
    parser.add_argument("--suite", choices=("all", "synthetic", "noisy-grid"), default="all")
    parser.add_argument("--seeds", type=int, default=None,
                        help="seeds of the noisy-grid suite (default 5, quick 2)")
    args = parser.parse_args(argv)
    if args.suite in ("all", "synthetic"):
        run_synthetic_suite(args.quick)
    if args.suite in ("all", "noisy-grid"):
        run_noisy_grid(args.quick, args.seeds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
