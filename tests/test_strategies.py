"""Search strategies: Nelder-Mead (against scipy), PRO, random, exhaustive; the shared contract."""

from __future__ import annotations

import inspect
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.optimize
from hypothesis import given, settings
from hypothesis import strategies as st

import strategies
from harmony_base.errors import ConfigError, TrialError
from harmony_base.space import EnumParam, IntParam, Point, RealParam, Space
from strategies import PRO, NelderMead, Strategy, make_strategy

Objective = Callable[[Point], float]


def rosenbrock(point: Point) -> float:
    x, y = float(point["x"]), float(point["y"])
    return 100.0 * (y - x * x) ** 2 + (1.0 - x) ** 2


def drive(strategy: Strategy, objective: Objective, *, evals: int,
          parallel: int = 1) -> list[Point]:
    """Ask/tell like ``parallel`` clients (oldest answered first); the points handed out."""
    out: deque = deque()
    handed: list[Point] = []
    told = 0
    while told < evals:
        while len(out) < parallel:
            trial = strategy.ask()
            if trial is None:
                break
            out.append(trial)
            handed.append(dict(trial.point))
        if not out:
            break
        trial = out.popleft()
        strategy.tell(trial.id, objective(trial.point))
        told += 1
    return handed


class SumAtMost:
    """A feasible region for tests: ``x + y <= limit`` on an integer space."""

    def __init__(self, space: Space, limit: int):
        self.space, self.limit = space, limit

    def contains(self, point: Point) -> bool:
        return self.space.contains(point) and point["x"] + point["y"] <= self.limit  # type: ignore[operator]

    def sample(self, rng: np.random.Generator) -> Point:
        while True:
            point = self.space.random_point(rng)
            if self.contains(point):
                return point

    def project(self, point: Point) -> Point | None:
        p = self.space.snap(point)
        while not self.contains(p):  # lower the larger coordinate one step at a time
            name = "x" if p["x"] >= p["y"] else "y"  # type: ignore[operator]
            if p[name] == self.space[name].min:  # type: ignore[union-attr]
                return None
            p[name] = p[name] - 1  # type: ignore[operator]
        return p


def square_space(lo: int = 0, hi: int = 100) -> Space:
    return Space((IntParam("x", lo, hi), IntParam("y", lo, hi)))


# -- registry and bad input ----------------------------------------------------------------


def _concrete_subclasses(cls: type) -> list[type]:
    found: list[type] = []
    sub: type
    for sub in cls.__subclasses__():
        if not inspect.isabstract(sub):
            found.append(sub)
        found.extend(_concrete_subclasses(sub))
    return found


def test_every_concrete_strategy_is_registered_under_its_name() -> None:
    concrete = [c for c in _concrete_subclasses(Strategy) if c.__module__.startswith("strategies")]
    assert {c.__name__ for c in concrete} >= {"NelderMead", "PRO", "RandomSearch", "Exhaustive"}
    for cls in concrete:
        name = getattr(cls, "name", "")
        assert name and Strategy.registry[name] is cls
    assert {"nelder-mead", "pro", "random", "exhaustive"} <= set(Strategy.registry)
    assert not inspect.isabstract(NelderMead) and inspect.isabstract(strategies.SimplexStrategy)


@pytest.mark.parametrize("name, options, words", [
    ("simplex", {}, ["unknown strategy 'simplex'", "nelder-mead"]),
    ("nelder-mead", {"colour": "red"}, ["nelder-mead", "colour"]),
    ("nelder-mead", {"reject_method": "ignore"}, ["reject_method", "penalty", "'ignore'"]),
    ("nelder-mead", {"init_method": "grid"}, ["init_method", "lhs", "'grid'"]),
    ("nelder-mead", {"simplex_size": 2}, ["simplex_size", ">= 3", "2"]),
    ("nelder-mead", {"init_radius": 0}, ["init_radius", "0"]),
    ("nelder-mead", {"expand": 0.5}, ["expand", "0.5"]),
    ("nelder-mead", {"contract_inside": 1.5}, ["contract_inside", "1.5"]),
    ("nelder-mead", {"shrink": 1.0}, ["shrink", "1.0"]),
    ("nelder-mead", {"max_evals": 0}, ["max_evals", "positive"]),
    ("nelder-mead", {"fval_tol": "tight"}, ["fval_tol", "'tight'"]),
    ("nelder-mead", {"init_point": {"x": 1}}, ["init_point", "missing ['y']"]),
    ("pro", {"expand_check": "some"}, ["expand_check", "'some'"]),
    ("pro", {"simplex_size": True}, ["simplex_size"]),
    ("random", {"max_evals": -3}, ["max_evals", "-3"]),
    ("exhaustive", {"passes": 0}, ["passes", "positive", "0"]),
])
def test_bad_strategy_names_and_options_raise_config_error(name, options, words) -> None:
    with pytest.raises(ConfigError) as info:
        make_strategy(name, square_space(), **options)
    for word in words:
        assert word in str(info.value)


def test_exhaustive_needs_a_discrete_space() -> None:
    space = Space((IntParam("x", 0, 3), RealParam("r", 0.0, 1.0)))
    with pytest.raises(ConfigError, match=r"exhaustive.*\['r'\].*continuous"):
        make_strategy("exhaustive", space)


# -- Nelder-Mead -----------------------------------------------------------------------------


def _best_so_far(values: list[float]) -> np.ndarray:
    return np.minimum.accumulate(np.array(values))


def test_nelder_mead_matches_scipy_on_rosenbrock() -> None:
    """Same start, same initial simplex, same coefficients: the same run as scipy's."""
    lo, hi, radius = -5.0, 5.0, 0.05
    space = Space((RealParam("x", lo, hi), RealParam("y", lo, hi)))
    nm = make_strategy("nelder-mead", space, init_point={"x": -1.2, "y": 1.0},
                       init_radius=radius, max_evals=400, fval_tol=0.0, size_tol=0.0)
    ours: list[float] = []
    final: Point = {}
    for point in drive(nm, rosenbrock, evals=400):
        ours.append(rosenbrock(point))
    best = nm.best()
    assert best is not None
    final = best.point

    x0 = np.array([-1.2, 1.0])
    step = radius * (hi - lo)
    simplex = np.array([x0, x0 + [step, 0.0], x0 + [0.0, step]])
    theirs: list[float] = []

    def f(x: np.ndarray) -> float:
        value = rosenbrock({"x": x[0], "y": x[1]})
        theirs.append(value)
        return value

    res = scipy.optimize.minimize(f, x0, method="Nelder-Mead",
                                  bounds=scipy.optimize.Bounds([lo, lo], [hi, hi]),
                                  options={"initial_simplex": simplex, "maxfev": 400,
                                           "xatol": 1e-12, "fatol": 1e-20})
    ours_to, theirs_to = (int(np.argmax(_best_so_far(v) < 1e-3)) + 1 for v in (ours, theirs))
    assert _best_so_far(ours)[ours_to - 1] < 1e-3 and ours_to <= 400
    assert abs(ours_to - theirs_to) <= 3, (ours_to, theirs_to)
    # the two runs are the same run: the first 100 measured values agree
    np.testing.assert_allclose(ours[:100], theirs[:100], rtol=1e-6, atol=1e-12)
    assert abs(final["x"] - res.x[0]) < 1e-6 and abs(final["y"] - res.x[1]) < 1e-6  # type: ignore[operator]
    assert abs(final["x"] - 1.0) < 1e-6  # type: ignore[operator]


def test_nelder_mead_reaches_rosenbrock_optimum_on_a_fine_real_grid() -> None:
    space = Space((RealParam("x", -2.0, 2.0, step=1e-6), RealParam("y", -2.0, 2.0, step=1e-6)))
    nm = make_strategy("nelder-mead", space, init_point={"x": -1.2, "y": 1.0})
    handed = drive(nm, rosenbrock, evals=400)
    values = [rosenbrock(p) for p in handed]
    first = next(i + 1 for i, v in enumerate(values) if v < 1e-3)
    assert first <= 400
    assert all(space.contains(p) for p in handed)


def test_nelder_mead_one_dimensional_offline_session_finds_the_grid_optimum() -> None:
    """The offline session's shape: one integer knob, a 2-vertex simplex."""
    space = Space((IntParam("shared_buffers", 32, 2048, step=32),))
    nm = make_strategy("nelder-mead", space, simplex_size=2, init_point={"shared_buffers": 128})
    handed = drive(nm, lambda p: (p["shared_buffers"] - 1000) ** 2, evals=200)  # type: ignore[operator]
    best = nm.best()
    assert best is not None and best.point == {"shared_buffers": 992}  # the grid point nearest 1000
    assert handed.index({"shared_buffers": 992}) < 25
    # restarts widen until all 64 grid points are measured once; then the grid is exhausted
    assert nm.converged and "exhausted" in str(nm.convergence_reason)
    assert len({p["shared_buffers"] for p in handed}) == len(handed) == 64


def test_simplex_strategies_never_measure_a_grid_point_twice() -> None:
    space = Space((IntParam("x", 0, 12), IntParam("y", 0, 12), IntParam("z", 0, 12)))

    def bowl(p: Point) -> float:
        x, y, z = (int(p[n]) for n in "xyz")
        return float((x - 4) ** 2 + 2 * (y - 9) ** 2 + (z - 1) ** 2)

    for name, parallel in (("nelder-mead", 1), ("pro", 3)):
        s = make_strategy(name, space, seed=3, max_evals=300)
        handed = drive(s, bowl, evals=500, parallel=parallel)
        keys = [space.key(p) for p in handed]
        assert len(set(keys)) == len(keys) == 300, name  # restarts reach new points only
        assert s.converged, name
        best = s.best()
        assert best is not None and best.value == 0.0, name


def test_pro_with_four_clients_reaches_the_exact_optimum_of_a_5d_integer_sphere() -> None:
    space = Space(tuple(IntParam(f"x{i}", -50, 50) for i in range(5)))
    optimum = {"x0": 7, "x1": -13, "x2": 22, "x3": 3, "x4": -31}

    def sphere(p: Point) -> float:
        return float(sum((int(p[k]) - v) ** 2 for k, v in optimum.items()))

    for seed in range(3):
        # a simplex strategy restarts until its budget is spent: the budget ends the search
        pro = make_strategy("pro", space, seed=seed, max_evals=600)
        in_flight = []
        handed: list[Point] = []
        out: deque = deque()
        while True:
            while len(out) < 4:
                trial = pro.ask()
                if trial is None:
                    break
                out.append(trial)
                handed.append(trial.point)
            in_flight.append(len(out))
            if not out:
                break
            trial = out.popleft()
            pro.tell(trial.id, sphere(trial.point))
        best = pro.best()
        assert pro.converged and best is not None
        assert best.point == optimum and best.value == 0.0
        assert len(handed) == 600 and pro.convergence_reason == "budget spent (max_evals 600)"
        assert max(in_flight) == 4  # four clients really worked at once


def test_pro_hands_out_a_whole_batch_and_waits_while_it_is_out() -> None:
    space = Space(tuple(IntParam(f"x{i}", 0, 100) for i in range(4)))
    pro = make_strategy("pro", space, simplex_size=8, init_point={f"x{i}": 50 for i in range(4)},
                        init_radius=0.1)
    batch = [pro.ask() for _ in range(8)]
    assert all(t is not None for t in batch) and pro.ask() is None
    for t in batch:
        pro.tell(t.id, float(sum(t.point.values())))  # type: ignore[union-attr, arg-type]
    reflected = []
    while (t := pro.ask()) is not None:
        reflected.append(t)
    assert len(reflected) == 7  # every vertex but the best, at once


# -- the contract: ids, duplicates, determinism, restarts --------------------------------------


@pytest.mark.parametrize("name", ["nelder-mead", "pro", "random", "exhaustive"])
def test_duplicate_tell_is_ignored_and_unknown_id_raises(name: str) -> None:
    space = square_space(0, 20)

    def run(duplicate: bool) -> list[Point]:
        s = make_strategy(name, space, seed=5)
        handed = []
        for _ in range(40):
            t = s.ask()
            if t is None:
                break
            handed.append(t.point)
            assert s.tell(t.id, float(t.point["x"] * 3 + t.point["y"])) is True  # type: ignore[operator]
            if duplicate:
                assert s.tell(t.id, -1e9) is False  # would be the best by far if counted
                assert s.trials[t.id].value == float(t.point["x"] * 3 + t.point["y"])  # type: ignore[operator]
        with pytest.raises(TrialError, match="never handed out trial 9999"):
            s.tell(9999, 1.0)
        return handed

    assert run(duplicate=True) == run(duplicate=False)


@pytest.mark.parametrize("name, options", [
    ("nelder-mead", {}), ("nelder-mead", {"init_method": "random"}),
    ("pro", {"init_method": "random-point"}), ("random", {}),
])
def test_same_seed_same_points_and_other_seed_other_points(name: str, options: dict) -> None:
    space = Space((IntParam("x", 0, 1000), RealParam("y", -1.0, 1.0), EnumParam("e", ("a", "b"))))

    def objective(p: Point) -> float:
        return (p["x"] - 300) ** 2 / 1e4 + float(p["y"]) ** 2 + (p["e"] == "a")  # type: ignore[operator]

    def run(seed: int) -> list[Point]:
        return drive(make_strategy(name, space, seed=seed, **options), objective, evals=60,
                     parallel=2)

    assert run(11) == run(11)
    assert run(11) != run(12)


def test_failed_measurement_is_penalised_and_the_search_goes_on() -> None:
    space = square_space()
    nm = make_strategy("nelder-mead", space, init_point={"x": 50, "y": 50})
    first = nm.ask()
    assert first is not None
    assert nm.tell(first.id, float("nan")) is True
    assert nm.trials[first.id].failure is not None and nm.trials[first.id].value is None
    handed = drive(nm, lambda p: float((p["x"] - 20) ** 2 + (p["y"] - 70) ** 2),  # type: ignore[operator]
                   evals=200)
    best = nm.best()
    assert best is not None and best.point == {"x": 20, "y": 70}
    assert space.key(first.point) not in {space.key(p) for p in handed}


def test_max_evals_caps_the_points_handed_out() -> None:
    for name in ("nelder-mead", "pro", "random"):
        s = make_strategy(name, square_space(), seed=1, max_evals=7)
        handed = drive(s, lambda p: float(p["x"]), evals=100, parallel=2)  # type: ignore[arg-type]
        assert len(handed) == 7 and s.converged, name


def test_restart_from_a_point_and_from_a_simplex() -> None:
    space = square_space()
    nm = make_strategy("nelder-mead", space, init_point={"x": 10, "y": 10}, init_radius=0.05)
    drive(nm, lambda p: float(p["x"] + p["y"]), evals=30)  # type: ignore[operator]
    nm.restart(point={"x": 80, "y": 20})
    assert not nm.converged
    batch = [nm.ask() for _ in range(3)]
    assert [t.point for t in batch] == [{"x": 80, "y": 20}, {"x": 85, "y": 20},  # type: ignore[union-attr]
                                        {"x": 80, "y": 25}]
    simplex: list[Point] = [{"x": 1, "y": 2}, {"x": 30, "y": 2}, {"x": 1, "y": 40}]
    nm.restart(simplex=simplex)
    assert [nm.ask().point for _ in range(3)] == simplex  # type: ignore[union-attr]
    # an answer from before the restart is recorded but does not disturb the new simplex
    assert nm.tell(batch[0].id, 0.0) is True  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="needs 3 points"):
        nm.restart(simplex=simplex[:2])


def test_simplex_view_is_sorted_best_first() -> None:
    nm = make_strategy("nelder-mead", square_space(), init_point={"x": 50, "y": 50})
    assert isinstance(nm, NelderMead)
    drive(nm, lambda p: float(abs(p["x"] - 30) + abs(p["y"] - 60)), evals=3)  # type: ignore[operator]
    values = [v for _, v in nm.simplex()]
    assert len(values) == 3 and values == sorted(values)


# -- exhaustive and random --------------------------------------------------------------------


def test_exhaustive_covers_the_grid_exactly_once_per_pass_in_odometer_order() -> None:
    space = Space((IntParam("a", 0, 4, step=2), EnumParam("b", ("x", "y")), IntParam("c", 1, 3)))
    ex = make_strategy("exhaustive", space, passes=2)
    handed = drive(ex, lambda p: 0.0, evals=1000, parallel=5)
    grid = list(space.iter_grid())
    assert handed == grid + grid
    assert handed[:3] == [{"a": 0, "b": "x", "c": 1}, {"a": 0, "b": "x", "c": 2},
                          {"a": 0, "b": "x", "c": 3}]
    assert ex.converged and ex.ask() is None


def test_exhaustive_and_random_skip_infeasible_points() -> None:
    space = square_space(0, 9)
    region = SumAtMost(space, 6)
    feasible = [p for p in space.iter_grid() if region.contains(p)]
    ex = make_strategy("exhaustive", space, region=region)
    assert drive(ex, lambda p: 0.0, evals=1000) == feasible
    rnd = make_strategy("random", space, region=region, seed=4)
    handed = drive(rnd, lambda p: 0.0, evals=1000)
    assert sorted(space.key(p) for p in handed) == sorted(space.key(p) for p in feasible)
    assert rnd.converged


def test_random_never_repeats_a_point_until_the_grid_is_exhausted() -> None:
    space = Space((IntParam("a", 0, 4), EnumParam("b", ("x", "y", "z"))))
    rnd = make_strategy("random", space, seed=9)
    handed = drive(rnd, lambda p: 0.0, evals=100, parallel=3)
    assert len(handed) == 15 and len({space.key(p) for p in handed}) == 15
    assert rnd.converged
    rnd.restart()
    assert not rnd.converged and rnd.ask() is not None


# -- feasibility: reject methods and plugin rejections -----------------------------------------


@pytest.mark.parametrize("name", ["nelder-mead", "pro"])
@pytest.mark.parametrize("reject_method", ["penalty", "random", "project"])
def test_infeasible_candidates_never_reach_a_client(name: str, reject_method: str) -> None:
    space = square_space()
    region = SumAtMost(space, 90)

    def pull_out(p: Point) -> float:  # the unconstrained optimum (80, 80) is infeasible
        return float((p["x"] - 80) ** 2 + (p["y"] - 80) ** 2)  # type: ignore[operator]

    for seed in range(3):
        s = make_strategy(name, space, seed=seed, region=region, reject_method=reject_method)
        handed = drive(s, pull_out, evals=300, parallel=2)
        assert handed and all(region.contains(p) for p in handed)
        best = s.best()
        assert best is not None
        assert best.point["x"] + best.point["y"] >= 85  # type: ignore[operator]
        constrained_optimum = pull_out({"x": 45, "y": 45})
        if name == "nelder-mead" or reject_method == "project":
            assert best.value == constrained_optimum
        else:
            # PRO keeps its simplex's shape, so penalties can pin it to the boundary early
            assert best.value is not None and best.value <= 2 * constrained_optimum


@pytest.mark.parametrize("reject_method", ["penalty", "random", "project"])
def test_a_point_rejected_by_a_plugin_is_never_handed_out_again(reject_method: str) -> None:
    space = square_space()
    refused = {(x, y) for x in range(40, 61) for y in range(40, 61)}  # a plugin's forbidden square
    nm = make_strategy("nelder-mead", space, init_point={"x": 10, "y": 10}, init_radius=0.2,
                       reject_method=reject_method, seed=2)
    rejected: list[tuple] = []
    handed: list[tuple] = []
    for _ in range(400):
        t = nm.ask()
        if t is None:
            break
        key = space.key(t.point)
        assert key not in rejected
        if key in refused:
            rejected.append(key)
            nm.rejected(t.id)
            assert nm.tell(t.id, 0.0) is False  # a rejected trial is done
            continue
        handed.append(key)
        nm.tell(t.id, float((t.point["x"] - 50) ** 2 + (t.point["y"] - 50) ** 2))  # type: ignore[operator]
    assert rejected, "the search should have run into the forbidden square"
    assert not set(handed) & refused


def test_rejection_hint_replaces_the_point() -> None:
    space = square_space()
    nm = make_strategy("nelder-mead", space, init_point={"x": 50, "y": 50},
                       init_radius=0.1, reject_method="project")
    t = nm.ask()
    assert t is not None
    nm.rejected(t.id, hint={"x": 3, "y": 4})
    points = [nm.ask().point for _ in range(3)]  # type: ignore[union-attr]
    assert points == [{"x": 3, "y": 4}, {"x": 60, "y": 50}, {"x": 50, "y": 60}]
    assert nm.ask() is None  # the initial simplex is out: nothing more until results come


# -- property test: points never leave the space ----------------------------------------------

@st.composite
def mixed_spaces(draw: st.DrawFn) -> Space:
    params: list[IntParam | RealParam | EnumParam] = []
    for i in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["int", "log", "real", "step", "enum"]))
        if kind == "enum":
            params.append(EnumParam(f"p{i}", tuple(range(draw(st.integers(1, 4))))))
        elif kind in ("int", "log"):
            lo = draw(st.integers(1, 50))
            width = draw(st.integers(0, 300))
            step = draw(st.integers(1, max(1, width)))
            params.append(IntParam(f"p{i}", lo, lo + width, step=step, log=kind == "log"))
        else:
            low = draw(st.floats(-10, 10))
            high = low + draw(st.floats(0.02, 50))
            real_step = draw(st.floats(0.01, (high - low) * 0.999)) if kind == "step" else 0.0
            params.append(RealParam(f"p{i}", low, high, step=real_step))
    return Space(tuple(params))


@settings(max_examples=60, deadline=None)
@given(space=mixed_spaces(), seed=st.integers(0, 1000),
       name=st.sampled_from(["nelder-mead", "pro", "random"]),
       init=st.sampled_from(["lhs", "random", "random-point"]))
def test_points_never_leave_the_space(space: Space, seed: int, name: str, init: str) -> None:
    options: dict[str, Any] = {} if name == "random" else {"init_method": init}
    s = make_strategy(name, space, seed=seed, **options)
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=space.dim)

    def objective(p: Point) -> float:  # a tilted bowl pushing toward a corner
        u = space.to_unit(p)
        return float(np.dot(weights, u) + np.sum((u - 0.9) ** 2))

    handed = drive(s, objective, evals=80, parallel=int(rng.integers(1, 4)))
    assert handed
    for p in handed:
        assert space.contains(p), p
        for param in space.params:
            if not isinstance(param, EnumParam):
                assert param.min <= p[param.name] <= param.max  # type: ignore[operator]
    if name != "random":
        assert isinstance(s, NelderMead | PRO)
        counts = Counter(space.key(p) for p in handed)
        assert max(counts.values()) == 1  # remembered, never re-measured


def test_init_simplex_is_the_first_batch_handed_out() -> None:
    from harmony_base.space import IntParam, Space
    from strategies import make_strategy

    space = Space((IntParam("x", 0, 100), IntParam("y", 0, 100)))
    given = [{"x": 10, "y": 20}, {"x": 50, "y": 20}, {"x": 10, "y": 70}]
    for name in ("nelder-mead", "pro"):
        strategy = make_strategy(name, space, seed=1, init_simplex=given)
        first = []
        while len(first) < 3 and (trial := strategy.ask()) is not None:
            first.append(trial.point)
            if name == "nelder-mead":
                strategy.tell(trial.id, float(trial.point["x"] + trial.point["y"]))
        assert sorted((p["x"], p["y"]) for p in first) == sorted((p["x"], p["y"]) for p in given)


def test_init_simplex_of_the_wrong_size_is_a_config_error() -> None:
    import pytest

    from harmony_base.errors import ConfigError
    from harmony_base.space import IntParam, Space
    from strategies import make_strategy

    space = Space((IntParam("x", 0, 100), IntParam("y", 0, 100)))
    with pytest.raises(ConfigError, match="init_simplex"):
        make_strategy("nelder-mead", space, simplex_size=4, init_simplex=[{"x": 1, "y": 1}] * 3)
