"""Synthetic test functions with known optima, and a harness that drives a strategy on them.

The harness talks to a strategy exactly as a session does (ask / tell by trial id) and
emulates ``parallel`` clients by keeping that many points out before telling the oldest.
A function is tuned on a continuous real box (``grid="real"``) or on an integer grid of
indices (``grid="int"``: index ``k`` of ``0..levels`` stands for
``lower + k * (upper - lower) / levels``); each grid is chosen so that the optimum of
sphere, Rosenbrock, Ackley and Rastrigin lies on it, and Michalewicz's (separable) optimum
is computed coordinate by coordinate.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSON
from harmony_base.space import IntParam, Point, RealParam, Space
from strategies.base import Strategy, Trial, make_strategy

logger = logging.getLogger(__name__)

GRIDS = ("real", "int")
MIN_DIM, MAX_DIM = 2, 16
#: random points used to estimate a function's typical gap to its optimum
_TYPICAL_SAMPLES = 4096


def sphere(x: np.ndarray) -> float:
    """De Jong's first function: sum of squares; 0 at the origin."""
    return float(np.dot(x, x))


def rosenbrock(x: np.ndarray) -> float:
    """Rosenbrock's banana valley; 0 at (1, ..., 1)."""
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2))


def ackley(x: np.ndarray) -> float:
    """Ackley's function: a flat, bumpy plate with one deep hole; 0 at the origin."""
    d = len(x)
    return float(-20.0 * math.exp(-0.2 * math.sqrt(float(np.dot(x, x)) / d))
                 - math.exp(float(np.sum(np.cos(2.0 * math.pi * x))) / d) + 20.0 + math.e)


def rastrigin(x: np.ndarray) -> float:
    """Rastrigin's function: a bowl covered with regular local minima; 0 at the origin."""
    return float(10.0 * len(x) + np.sum(x * x - 10.0 * np.cos(2.0 * math.pi * x)))


def michalewicz(x: np.ndarray) -> float:
    """Michalewicz's function (m = 10): steep narrow valleys; separable, optimum about -0.97 d."""
    i = np.arange(1, len(x) + 1)
    return float(-np.sum(np.sin(x) * np.sin(i * x * x / math.pi) ** 20))


@dataclass(frozen=True)
class SyntheticFunction:
    """A test function on the box ``[lower, upper]^dim`` with ``levels`` steps per integer axis."""

    name: str
    evaluate: Callable[[np.ndarray], float]
    lower: float
    upper: float
    levels: int
    #: the optimum's coordinates when they are the same for every dimension (else None)
    argmin: float | None

    def optimum(self, dim: int, grid: str) -> float:
        """The minimum over the box (``real``) or over the integer grid (``int``)."""
        if self.name == "michalewicz":
            return _michalewicz_optimum(dim, grid, self.lower, self.upper, self.levels)
        if self.argmin is None:
            raise ConfigError(f"synthetic function {self.name!r} has no closed-form optimum")
        return self.evaluate(np.full(dim, self.argmin))


FUNCTIONS: dict[str, SyntheticFunction] = {
    f.name: f for f in (
        SyntheticFunction("sphere", sphere, -5.12, 5.12, 100, 0.0),
        SyntheticFunction("rosenbrock", rosenbrock, -2.0, 2.0, 100, 1.0),
        SyntheticFunction("ackley", ackley, -32.768, 32.768, 128, 0.0),
        SyntheticFunction("rastrigin", rastrigin, -5.12, 5.12, 100, 0.0),
        SyntheticFunction("michalewicz", michalewicz, 0.0, math.pi, 100, None),
    )
}


@functools.lru_cache(maxsize=64)
def _michalewicz_optimum(dim: int, grid: str, lower: float, upper: float, levels: int) -> float:
    """Separable: the minimum is the sum of each coordinate's one-dimensional minimum."""
    total = 0.0
    for i in range(1, dim + 1):
        def term(x: float, i: int = i) -> float:
            return float(-math.sin(x) * math.sin(i * x * x / math.pi) ** 20)

        if grid == "int":
            xs = lower + np.arange(levels + 1) * (upper - lower) / levels
            total += min(term(float(x)) for x in xs)
            continue
        xs = np.linspace(lower, upper, 200_001)
        values = -np.sin(xs) * np.sin(i * xs * xs / math.pi) ** 20
        k = int(np.argmin(values))
        lo, hi = xs[max(k - 1, 0)], xs[min(k + 1, len(xs) - 1)]
        res = minimize_scalar(term, bounds=(lo, hi), method="bounded",
                              options={"xatol": 1e-12})
        total += min(float(res.fun), float(values[k]))
    return total


@dataclass(frozen=True)
class Problem:
    """A function, a dimension and a grid: the space to search and the objective on it."""

    function: SyntheticFunction
    dim: int
    grid: str
    space: Space
    optimum: float

    def coordinates(self, point: Mapping[str, Any]) -> np.ndarray:
        values = np.array([float(point[n]) for n in self.space.names])
        if self.grid == "int":
            f = self.function
            return f.lower + values * (f.upper - f.lower) / f.levels
        return values

    def __call__(self, point: Mapping[str, JSON]) -> float:
        return self.function.evaluate(self.coordinates(point))

    def typical_gap(self) -> float:
        """Mean distance to the optimum of a uniformly random point: what "1 %" is 1 % of."""
        return _typical_gap(self.function.name, self.dim, self.grid)


@functools.lru_cache(maxsize=256)
def _typical_gap(function: str, dim: int, grid: str) -> float:
    problem = make_problem(function, dim, grid)
    rng = np.random.default_rng(12345)
    values = [problem(problem.space.random_point(rng)) for _ in range(_TYPICAL_SAMPLES)]
    return float(np.mean(values)) - problem.optimum


def make_problem(function: str, dim: int, grid: str = "real") -> Problem:
    """The search space and objective for ``function`` in ``dim`` dimensions on ``grid``."""
    if function not in FUNCTIONS:
        raise ConfigError(f"unknown synthetic function {function!r}; known: {sorted(FUNCTIONS)}")
    if isinstance(dim, bool) or not isinstance(dim, int) or not MIN_DIM <= dim <= MAX_DIM:
        raise ConfigError(f"synthetic dimension must be an integer in {MIN_DIM}..{MAX_DIM}, "
                          f"got {dim!r}")
    if grid not in GRIDS:
        raise ConfigError(f"synthetic grid must be one of {', '.join(GRIDS)}, got {grid!r}")
    f = FUNCTIONS[function]
    if grid == "int":
        space = Space(tuple(IntParam(f"x{i}", 0, f.levels) for i in range(dim)))
    else:
        space = Space(tuple(RealParam(f"x{i}", f.lower, f.upper) for i in range(dim)))
    return Problem(f, dim, grid, space, f.optimum(dim, grid))


@dataclass
class SynthTrace:
    """One run: after each evaluation, the true value of the best point measured so far."""

    problem: Problem
    best: list[float] = field(default_factory=list)
    best_point: Point | None = None
    converged: bool = False
    restarts: int = 0

    @property
    def evaluations(self) -> int:
        return len(self.best)

    def checkpoints(self) -> list[tuple[int, float]]:
        """``(evaluations, best value)`` at 1, 2, 4, 8, ... and at the last evaluation."""
        out = []
        n = 1
        while n <= len(self.best):
            out.append((n, self.best[n - 1]))
            n *= 2
        if self.best and out[-1][0] != len(self.best):
            out.append((len(self.best), self.best[-1]))
        return out

    def evals_to_within(self, fraction: float) -> int | None:
        """First evaluation whose best is within ``fraction`` of the typical gap of the optimum."""
        target = self.problem.optimum + fraction * self.problem.typical_gap()
        for i, value in enumerate(self.best):
            if value <= target:
                return i + 1
        return None


def trace_synthetic(strategy: str, function: str, dim: int, *, grid: str = "real",
                    evals: int, seed: int = 0, parallel: int = 1, noise: float = 0.0,
                    strategy_options: Mapping[str, Any] | None = None,
                    restart_on_converge: bool = False,
                    stop_within: float | None = None) -> SynthTrace:
    """Run ``strategy`` for up to ``evals`` evaluations and record the best value after each.

    With ``noise`` > 0 every measurement gets Gaussian noise of that standard deviation; the
    strategy ranks noisy values, the trace shows the true value of its best point.
    With ``restart_on_converge`` a converged strategy is restarted until the budget is used.
    With ``stop_within`` the run ends early once the best is within that fraction of the
    typical gap of the optimum (see :meth:`SynthTrace.evals_to_within`).
    """
    if isinstance(evals, bool) or not isinstance(evals, int) or evals < 1:
        raise ConfigError(f"synthetic evals must be a positive integer, got {evals!r}")
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ConfigError(f"synthetic parallel must be a positive integer, got {parallel!r}")
    if not math.isfinite(noise) or noise < 0:
        raise ConfigError(f"synthetic noise must be a finite number >= 0, got {noise!r}")
    problem = make_problem(function, dim, grid)
    strat: Strategy = make_strategy(strategy, problem.space, seed=seed,
                                    **dict(strategy_options or {}))
    noise_rng = np.random.default_rng([seed, 0x5EED])
    trace = SynthTrace(problem)
    target = -math.inf if stop_within is None \
        else problem.optimum + stop_within * problem.typical_gap()
    out: deque[Trial] = deque()
    best_measured = math.inf
    best_true = math.inf
    while trace.evaluations < evals:
        while len(out) < parallel and trace.evaluations + len(out) < evals:
            trial = strat.ask()
            if trial is None:
                break
            out.append(trial)
        if not out:
            if strat.converged and restart_on_converge:
                strat.restart()
                trace.restarts += 1
                if strat.converged:  # nothing left to search (e.g. exhausted grid)
                    break
                continue
            if not strat.converged:
                logger.warning("%s handed out nothing with no point outstanding", strategy)
            break
        trial = out.popleft()
        true_value = problem(trial.point)
        measured = true_value + (float(noise_rng.normal(0.0, noise)) if noise > 0 else 0.0)
        strat.tell(trial.id, measured)
        if measured < best_measured:
            best_measured, best_true = measured, true_value
            trace.best_point = dict(trial.point)
        trace.best.append(best_true)
        if best_true <= target:
            break
    trace.converged = strat.converged
    return trace


def run_synthetic(strategy: str, function: str, dim: int, *, grid: str = "real", evals: int,
                  seed: int = 0, parallel: int = 1, noise: float = 0.0,
                  strategy_options: Mapping[str, JSON] | None = None) -> list[tuple[int, float]]:
    """Best value found at evaluation counts 1, 2, 4, 8, ... (and the last one)."""
    return trace_synthetic(strategy, function, dim, grid=grid, evals=evals, seed=seed,
                           parallel=parallel, noise=noise,
                           strategy_options=strategy_options).checkpoints()
