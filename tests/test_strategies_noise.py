"""Search under noise on integer grids: restarts instead of stops, restart() that explores,
CMA-ES (integers, the isl region, selectable by name)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

import numpy as np
import pytest
from plugin_support import SessionView

from harmony_base.space import IntParam, Point, Space
from harmony_core.definition import SessionDefinition
from harmony_core.session import SessionCore
from plugins.base import make_plugin
from plugins.constraint import ConstraintPlugin
from strategies import CMAES, Strategy, make_strategy

Objective = Callable[[Point], float]


def grid(dim: int, levels: int = 201) -> Space:
    return Space(tuple(IntParam(f"x{i}", 0, levels - 1) for i in range(dim)))


def bowl(centre: tuple[int, ...]) -> Objective:
    def f(p: Point) -> float:
        return float(sum((int(p[f"x{i}"]) - c) ** 2 * (i + 1) for i, c in enumerate(centre)))
    return f


def drive(strategy: Strategy, objective: Objective, *, evals: int, parallel: int = 1,
          noise: float = 0.0, seed: int = 0) -> tuple[list[Point], Point | None]:
    """Ask/tell like ``parallel`` clients; each measurement is ``f * (1 + noise * N(0, 1))``.
    Returns the points handed out and the best *measured* point."""
    rng = np.random.default_rng(seed)
    out: deque = deque()
    handed: list[Point] = []
    best: tuple[float, Point] | None = None
    while len(handed) < evals or out:
        while len(out) < parallel and len(handed) < evals:
            trial = strategy.ask()
            if trial is None:
                break
            out.append(trial)
            handed.append(dict(trial.point))
        if not out:
            break
        trial = out.popleft()
        measured = objective(trial.point) * (1.0 + noise * float(rng.standard_normal()))
        strategy.tell(trial.id, measured)
        if best is None or measured < best[0]:
            best = (measured, dict(trial.point))
    return handed, best[1] if best is not None else None


# -- simplex strategies keep going ---------------------------------------------------------


@pytest.mark.parametrize("name", ["nelder-mead", "pro"])
def test_a_simplex_collapsed_on_the_grid_restarts_instead_of_converging(name: str) -> None:
    space = grid(2)
    collapsed = [{"x0": 100, "x1": 100}] * 3  # every vertex on one grid point
    s = make_strategy(name, space, seed=1, init_simplex=collapsed)
    first = s.ask()
    assert first is not None and first.point == {"x0": 100, "x1": 100}
    s.tell(first.id, 5.0)  # the other two vertices are the same point: answered from memory
    follow = [s.ask(), s.ask()]
    assert not s.converged and s.convergence_reason is None
    assert s.restarts == 1  # type: ignore[attr-defined]
    points = [t.point for t in follow if t is not None]
    assert len(points) == 2 and {"x0": 100, "x1": 100} not in points  # a fresh simplex
    # the restart radius is init_radius (0.3 of the range = 60 grid steps) around the best
    for p in points:
        assert math.isclose(math.hypot(p["x0"] - 100, p["x1"] - 100), 60, abs_tol=1.5)  # type: ignore[operator]
    # a plain Nelder-Mead (no re-expansion) would have stopped right there
    plain = make_strategy(name, space, seed=1, init_simplex=collapsed, reexpand=False)
    t = plain.ask()
    assert t is not None
    plain.tell(t.id, 5.0)
    assert plain.ask() is None and plain.converged
    assert plain.convergence_reason == "collapsed on the grid"


def test_restart_radii_shrink_to_one_grid_step_and_start_over() -> None:
    nm = make_strategy("nelder-mead", grid(3), init_point={"x0": 50, "x1": 50, "x2": 50})
    radii = [nm.restart_radius(k) for k in range(8)]  # type: ignore[attr-defined]
    assert radii[:6] == pytest.approx([0.3, 0.15, 0.075, 0.0375, 0.01875, 0.009375])
    assert radii[6] == pytest.approx(0.005)  # one grid step of 200
    assert radii[7] == pytest.approx(0.3)


@pytest.mark.parametrize(("name", "parallel"), [("nelder-mead", 1), ("pro", 4)])
def test_a_noisy_grid_search_spends_its_budget_and_reaches_the_optimum(name: str,
                                                                       parallel: int) -> None:
    """5 % multiplicative noise on a 201-level 3-d grid: the whole budget of 400 evaluations
    is spent, and the best measured point is within a grid step or two of the optimum."""
    centre = (130, 60, 170)
    f = bowl(centre)
    start = {"x0": 40, "x1": 150, "x2": 60}
    for seed in range(4):
        s = make_strategy(name, grid(3), seed=seed, init_point=start, max_evals=400)
        handed, best = drive(s, f, evals=400, parallel=parallel, noise=0.05, seed=seed)
        assert len(handed) == 400, (name, seed)  # never stopped by itself
        assert s.convergence_reason == "budget spent (max_evals 400)"
        assert best is not None and f(best) <= 6.0, (name, seed, best)  # f(start) is 35,700


def test_restart_without_a_point_never_repeats_the_search() -> None:
    space = grid(3)
    f = bowl((130, 60, 170))
    nm = make_strategy("nelder-mead", space, seed=0, init_point={"x0": 40, "x1": 150, "x2": 60},
                       max_evals=80)
    runs = []
    for _ in range(3):
        handed, _ = drive(nm, f, evals=80)
        runs.append(handed)
        nm.restart()
    assert all(len(r) == 80 for r in runs)
    starts = [tuple(tuple(p.values()) for p in r[:4]) for r in runs]
    assert len(set(starts)) == 3  # three different initial simplices
    assert all(r[0] == {"x0": 40, "x1": 150, "x2": 60} for r in runs)  # each around init_point
    assert runs[0] != runs[1] != runs[2]


# -- CMA-ES -------------------------------------------------------------------------------


def test_cmaes_is_registered_and_takes_optuna_defaults() -> None:
    assert Strategy.registry["cma-es"] is CMAES
    s = make_strategy("cma-es", grid(4))
    assert isinstance(s, CMAES)
    assert s.sigma0 == pytest.approx(1 / 6) and s.popsize == 4 + int(3 * math.log(4))
    assert s.n_max_resampling == 40 and s.with_margin  # the margin: every axis is a grid


def test_cmaes_reaches_the_exact_optimum_of_an_integer_bowl() -> None:
    f = bowl((130, 60, 170, 20))
    for seed in range(2):
        s = make_strategy("cma-es", grid(4), seed=seed, max_evals=400)
        handed, best = drive(s, f, evals=400, parallel=4)
        assert len(handed) == 400 and best == {"x0": 130, "x1": 60, "x2": 170, "x3": 20}
        assert all(grid(4).contains(p) for p in handed)


def test_cmaes_never_hands_out_a_point_outside_the_isl_region() -> None:
    space = grid(3, levels=101)
    constraints = ["x0 + 2 * x1 + x2 <= 120", "x0 - x2 >= -30"]
    plugin = make_plugin("constraint", SessionView(space), constraints=constraints,
                         constants={})
    assert isinstance(plugin, ConstraintPlugin)
    narrowed = plugin.init(space)
    region = plugin.region()
    assert region is not None
    f = bowl((80, 70, 90))  # far outside: x0 + 2 x1 + x2 = 310
    s = make_strategy("cma-es", narrowed, seed=2, region=region, max_evals=500)
    handed, best = drive(s, f, evals=500, parallel=3)
    assert len(handed) == 500
    for p in handed:
        x0, x1, x2 = (int(p[n]) for n in ("x0", "x1", "x2"))  # type: ignore[call-overload]
        assert x0 + 2 * x1 + x2 <= 120 and x0 - x2 >= -30, p
        assert region.contains(p)
    # the constrained optimum lies on the budget plane: the best point gets there
    assert best is not None
    assert int(best["x0"]) + 2 * int(best["x1"]) + int(best["x2"]) >= 117  # type: ignore[call-overload]


def test_cmaes_restart_draws_a_new_population() -> None:
    f = bowl((10, 20))
    s = make_strategy("cma-es", grid(2), seed=5, max_evals=30)
    first, _ = drive(s, f, evals=30)
    s.restart()
    second, _ = drive(s, f, evals=30)
    assert len(first) == len(second) == 30 and first[:6] != second[:6]


def test_cmaes_is_selectable_by_name_in_a_session_definition() -> None:
    definition = SessionDefinition.from_dict({
        "name": "cma", "strategy": {"name": "cma-es", "options": {"popsize": 6}},
        "parameters": [{"name": "x", "type": "int", "min": 0, "max": 100},
                       {"name": "y", "type": "int", "min": 0, "max": 100}],
        "constraints": ["x + y <= 90"], "seed": 1})
    assert definition.strategy == "cma-es"
    assert definition.plugins[0].name == "constraint"
    core = SessionCore(definition)
    assert isinstance(core.strategy, CMAES) and core.strategy.popsize == 6
    values = []
    for _ in range(150):
        a = core.fetch("c1")
        assert a is not None
        x, y = int(a.point["x"]), int(a.point["y"])  # type: ignore[call-overload]
        assert x + y <= 90
        values.append((x - 70) ** 2 + (y - 50) ** 2)
        core.report(a.trial_id, float(values[-1]))
    # the constrained optimum is (55, 35), where the value is 450; its grid neighbours are 452
    assert min(values) <= 452


def _run_session(data: dict, *, parallel: int = 1, limit: int = 1000) -> tuple[SessionCore, int]:
    """Fetch and report like ``parallel`` clients until the session hands out nothing more;
    returns the core and the number of points handed out."""
    core = SessionCore(SessionDefinition.from_dict(data))
    handed = 0
    while handed < limit:
        got = [a for a in (core.fetch(f"c{i}") for i in range(parallel)) if a is not None]
        if not got:
            break
        handed += len(got)
        for a in got:
            core.report(a.trial_id, float(a.point["x"]) ** 2 + 3.0 * float(a.point["y"]))
    return core, handed


@pytest.mark.timeout(120)
def test_cmaes_converges_on_a_small_constrained_integer_space_instead_of_hanging() -> None:
    """Issue 28: two integers 0..20 with x + y <= 5 (21 feasible points); on main the 20th
    fetch took ~40 s and the next never returned (restart after restart, each doubling the
    population, resampling points measured already)."""
    data = {"name": "tri", "strategy": "cma-es", "seed": 0, "constraints": ["x + y <= 5"],
            "parameters": [{"name": "x", "type": "int", "min": 0, "max": 20},
                           {"name": "y", "type": "int", "min": 0, "max": 20}]}
    for parallel in (1, 3):
        core, handed = _run_session(data, parallel=parallel)
        assert core.converged and 10 <= handed <= 21, (handed, core.convergence_reason)
        points = [tuple(r.point.values()) for r in core.trials()]
        assert len(set(points)) == handed  # never a point twice
        reason = core.convergence_reason or ""
        assert reason.startswith(("exhausted: every one of the 21", "stalled: 1000 draws")), reason
        best = core.best()
        assert best is not None and best[1] == 0.0  # (0, 0) was found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("parallel", [1, 4])
def test_cmaes_on_a_2x2_grid_converges_after_its_four_points(parallel: int) -> None:
    """Issue 28: on a 2x2 grid the fetch after every point was measured never returned."""
    data = {"name": "g", "strategy": "cma-es", "seed": 0,
            "parameters": [{"name": "x", "type": "int", "min": 0, "max": 1},
                           {"name": "y", "type": "int", "min": 0, "max": 1}]}
    core, handed = _run_session(data, parallel=parallel)
    assert handed == 4 and core.converged
    assert core.convergence_reason == "exhausted: every one of the 4 feasible points was handed out"
    assert core.fetch("late") is None


def test_cmaes_counts_only_small_spaces_and_keeps_searching_a_large_one() -> None:
    s = make_strategy("cma-es", grid(2, levels=201), seed=0, max_evals=60)
    assert isinstance(s, CMAES)
    handed, _ = drive(s, bowl((30, 160)), evals=60)
    assert len(handed) == 60 and s.convergence_reason == "budget spent (max_evals 60)"
    assert s._feasible_points() is None  # 40,401 grid points: not enumerated
    small = make_strategy("cma-es", grid(2, levels=5), seed=0)
    assert isinstance(small, CMAES)
    handed, best = drive(small, bowl((1, 3)), evals=100)
    assert len(handed) == len({tuple(p.values()) for p in handed}) <= 25
    assert small.converged and best == {"x0": 1, "x1": 3}
