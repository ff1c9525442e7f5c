"""The constraint plugin: parsing, isl narrowing, membership, sampling, projection.

Every check is against brute-force enumeration of the grid with exact fractions.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from plugin_support import SessionView

from harmony_base.errors import ConstraintError
from harmony_base.space import EnumParam, IntParam, Param, RealParam, Space
from plugins.affine import parse_constraint
from plugins.base import Flow, PluginTrial, make_plugin
from plugins.constraint import ConstraintPlugin
from plugins.feasible import ConstrainedRegion


def launch(space: Space, constraints: list[str], constants: dict | None = None,
           **options: object) -> tuple[ConstraintPlugin, Space, ConstrainedRegion]:
    plugin = make_plugin("constraint", SessionView(space), constraints=constraints,
                         constants=constants or {}, **options)
    assert isinstance(plugin, ConstraintPlugin)
    narrowed = plugin.init(space)
    region = plugin.region()
    assert region is not None
    return plugin, narrowed, region


def grid_values(p: Param) -> list:
    return [p.value_at(i) for i in range(p.size)]


def exact(v: object) -> Fraction:
    return Fraction(repr(v)) if isinstance(v, float) else Fraction(v)  # type: ignore[arg-type]


def brute_feasible(space: Space, constraints: list[str],
                   constants: dict | None = None) -> list[dict]:
    parsed = [c for text in constraints for c in parse_constraint(text, space.names, constants)]
    out = []
    for values in itertools.product(*(grid_values(p) for p in space.params)):
        point = dict(zip(space.names, values, strict=True))
        if all(c.holds({n: exact(point[n]) for n in c.coeffs}) for c in parsed):
            out.append(point)
    return out


def unit_distance(space: Space, a: dict, b: dict) -> float:
    def u(p: Param, v: float) -> float:
        assert isinstance(p, IntParam | RealParam)
        if p.upper == p.min:
            return 0.5
        if p.log:
            return (math.log(v) - math.log(p.min)) / (math.log(p.upper) - math.log(p.min))
        return (v - p.min) / (p.upper - p.min)
    return math.sqrt(sum((u(p, a[p.name]) - u(p, b[p.name])) ** 2 for p in space.params))


BUDGET = "work_mem*20 + maintenance_work_mem + temp_buffers <= 1024"


def budget_space(mw_step: int = 8) -> Space:
    return Space((IntParam("work_mem", 1, 200), IntParam("maintenance_work_mem", 1, 1024, mw_step),
                  IntParam("temp_buffers", 1, 1024, mw_step)))


def budget_grid(space: Space) -> tuple[np.ndarray, np.ndarray]:
    """Every grid point of a budget space (rows) and whether it fits the budget (numpy, exact)."""
    axes = [np.array(grid_values(p), dtype=np.int64) for p in space.params]
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, len(axes))
    fits = grid[:, 0] * 20 + grid[:, 1] + grid[:, 2] <= 1024
    return grid, fits


# -- the memory budget -------------------------------------------------------------------
def test_budget_narrowing_equals_brute_force_bounds() -> None:
    space = budget_space()
    _, narrowed, _ = launch(space, [BUDGET])
    grid, fits = budget_grid(space)
    assert grid.shape == (200 * 128 * 128, 3)
    feasible = grid[fits]
    for i, name in enumerate(space.names):
        assert (narrowed[name].min, narrowed[name].upper) == (feasible[:, i].min(),
                                                              feasible[:, i].max())
    # work_mem: 20*51 + 1 + 1 = 1022 <= 1024 but 20*52 = 1040 > 1024
    assert (narrowed["work_mem"].min, narrowed["work_mem"].max) == (1, 51)
    # maintenance_work_mem on its 1 + 8k grid: 20 + 1001 + 1 = 1022
    assert (narrowed["maintenance_work_mem"].min, narrowed["maintenance_work_mem"].max) == (1, 1001)
    assert narrowed["maintenance_work_mem"].step == 8
    assert narrowed.grid_size() == 51 * 126 * 126  # the space really shrank (from 200*128*128)


def test_budget_contains_equals_brute_force_on_the_whole_grid() -> None:
    space = budget_space(64)
    _, _, region = launch(space, [BUDGET])
    grid, fits = budget_grid(space)
    names = space.names
    answers = np.array([region.contains(dict(zip(names, map(int, row), strict=True)))
                        for row in grid])
    assert len(answers) == 200 * 16 * 16
    assert np.array_equal(answers, fits)
    assert int(fits.sum()) == int(answers.sum()) > 1000
    # off-grid and malformed points are not feasible
    assert not region.contains({"work_mem": 1, "maintenance_work_mem": 2, "temp_buffers": 1})
    assert not region.contains({"work_mem": 1.5, "maintenance_work_mem": 1, "temp_buffers": 1})
    assert not region.contains({"work_mem": 1, "maintenance_work_mem": 1})
    assert not region.contains({"work_mem": "x", "maintenance_work_mem": 1, "temp_buffers": 1})


def test_budget_samples_are_feasible_and_spread() -> None:
    space = budget_space()
    _, narrowed, region = launch(space, [BUDGET])
    rng = np.random.default_rng(7)
    points = [region.sample(rng) for _ in range(500)]
    assert all(region.contains(p) for p in points)
    assert all(brute_ok(p) for p in points)
    assert len({tuple(p.values()) for p in points}) > 480
    # uniform over the feasible set: the mean of work_mem is near its exact mean (~14.3)
    mean = np.mean([p["work_mem"] for p in points])
    assert 12.0 < mean < 16.5
    # seeded: the same rng seed gives the same points
    again = [region.sample(np.random.default_rng(7)) for _ in range(1)]
    assert again[0] == points[0]
    assert narrowed.contains(points[0])


def brute_ok(p: dict) -> bool:
    return p["work_mem"] * 20 + p["maintenance_work_mem"] + p["temp_buffers"] <= 1024


def test_budget_projection_is_a_nearest_feasible_point() -> None:
    space = Space((IntParam("work_mem", 1, 30), IntParam("maintenance_work_mem", 1, 200, 10),
                   IntParam("temp_buffers", 1, 200, 10)))
    budget = "work_mem*20 + maintenance_work_mem + temp_buffers <= 400"
    _, narrowed, region = launch(space, [budget])
    feasible = brute_feasible(narrowed, [budget])
    # unit coordinates of every feasible point, for a vectorised nearest-distance check
    lows = np.array([p.min for p in narrowed.params], dtype=float)
    spans = np.array([p.upper - p.min for p in narrowed.params], dtype=float)
    units = (np.array([list(f.values()) for f in feasible], dtype=float) - lows) / spans
    rng = np.random.default_rng(3)
    infeasible_seen = 0
    for _ in range(200):
        point = narrowed.random_point(rng)
        projected = region.project(point)
        assert projected is not None and region.contains(projected)
        target = (np.array(list(point.values()), dtype=float) - lows) / spans
        best = float(np.sqrt(((units - target) ** 2).sum(axis=1)).min())
        assert unit_distance(narrowed, point, projected) == pytest.approx(best, abs=1e-12)
        if not region.contains(point):
            infeasible_seen += 1
        else:
            assert projected == point
    assert infeasible_seen > 50


def test_generate_rejects_infeasible_points_with_a_projected_hint() -> None:
    space = budget_space()
    plugin, narrowed, region = launch(space, [BUDGET])
    ok = PluginTrial(candidate=0, point={"work_mem": 10, "maintenance_work_mem": 401,
                                         "temp_buffers": 401})
    assert plugin.generate(ok).flow is Flow.ACCEPT
    bad = PluginTrial(candidate=1, point={"work_mem": 51, "maintenance_work_mem": 1001,
                                          "temp_buffers": 1001})
    result = plugin.generate(bad)
    assert result.flow is Flow.REJECT
    assert BUDGET in result.reason
    assert result.hint is not None and region.contains(result.hint)
    assert brute_ok(result.hint)
    plain, _, _ = launch(space, [BUDGET], reject_hint="none")
    assert plain.generate(bad).hint is None


def test_real_parameter_on_a_grid_and_log_scale() -> None:
    space = Space((RealParam("random_page_cost", 0.1, 30.0, 0.1),
                   IntParam("effective_cache_size", 128, 2048, 64, log=True)))
    text = "10 * random_page_cost + effective_cache_size / 64 <= 30"
    _, narrowed, region = launch(space, [text])
    feasible = brute_feasible(space, [text])
    rpc = [p["random_page_cost"] for p in feasible]
    assert (narrowed["random_page_cost"].min, narrowed["random_page_cost"].upper) == (
        min(rpc), max(rpc)) == (0.1, 2.8)
    # 10*0.1 + 1856/64 = 30
    assert narrowed["effective_cache_size"].upper == 1856 == max(
        p["effective_cache_size"] for p in feasible)
    for point in feasible[::7]:
        assert region.contains(point)
    assert not region.contains({"random_page_cost": 2.9, "effective_cache_size": 128})
    assert not region.contains({"random_page_cost": 0.15, "effective_cache_size": 128})
    target = {"random_page_cost": 2.8, "effective_cache_size": 1856}
    assert not region.contains(target)
    proj = region.project(target)
    assert proj is not None and region.contains(proj)
    best = min(unit_distance(narrowed, target, f) for f in brute_feasible(narrowed, [text]))
    assert unit_distance(narrowed, target, proj) == pytest.approx(best, abs=1e-12)


def test_chained_comparison_equality_and_unconstrained_parameters() -> None:
    space = Space((IntParam("a", 0, 20), IntParam("b", 0, 20), EnumParam("mode", ("x", "y")),
                   RealParam("free", 0.0, 1.0)))
    texts = ["3 <= a + b <= 9", "a - 2*b == 0"]
    _, narrowed, region = launch(space, texts)
    sub = Space(space.params[:2])
    feasible = brute_feasible(sub, texts)
    assert sorted((p["a"], p["b"]) for p in feasible) == [(2, 1), (4, 2), (6, 3)]
    assert [narrowed["a"].min, narrowed["a"].max, narrowed["b"].min, narrowed["b"].max] == [
        2, 6, 1, 3]
    assert narrowed["mode"] == space["mode"] and narrowed["free"] == space["free"]
    rng = np.random.default_rng(0)
    for _ in range(50):
        p = region.sample(rng)
        assert (p["a"], p["b"]) in {(2, 1), (4, 2), (6, 3)} and p["mode"] in ("x", "y")
    assert region.contains({"a": 4, "b": 2, "mode": "y", "free": 0.25})
    assert not region.contains({"a": 4, "b": 3, "mode": "y", "free": 0.25})
    assert not region.contains({"a": 4, "b": 2, "mode": "z", "free": 0.25})
    # nearest feasible point to (5, 3): (4, 2) at unit distance sqrt(1/16 + 1/4) vs (6, 3) at 1/4
    assert region.project({"a": 5, "b": 3, "mode": "x", "free": 0.5}) == {
        "a": 6, "b": 3, "mode": "x", "free": 0.5}


def test_thin_polytope_in_a_large_box_is_sampled_through_isl() -> None:
    # a sliver: x + y == 5000 with both in 0..10000, plus a 3rd dimension
    space = Space((IntParam("x", 0, 10_000), IntParam("y", 0, 10_000), IntParam("z", 0, 10_000)))
    _, narrowed, region = launch(space, ["x + y == 5000", "z - x >= 4990"])
    assert narrowed["x"].max == 5000 and narrowed["z"].min == 4990
    rng = np.random.default_rng(1)
    points = [region.sample(rng) for _ in range(40)]
    assert all(p["x"] + p["y"] == 5000 and p["z"] - p["x"] >= 4990 for p in points)
    assert len({p["x"] for p in points}) > 10


def test_constant_named_constraints_and_connections() -> None:
    space = budget_space()
    _, narrowed, _ = launch(space, ["work_mem * connections + maintenance_work_mem + temp_buffers "
                                    "<= budget"], {"connections": 20, "budget": 1024})
    assert narrowed["work_mem"].max == 51


# -- bad input ---------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "fragment"), [
    ("x*y <= 3", "multiplies parameters ['x'] and ['y']"),
    ("x + nope <= 3", "unknown name 'nope'"),
    ("x <= ", "syntax error"),
    ("x / y <= 3", "division by parameter(s) ['y']"),
    ("abs(x) <= 3", "function calls are not allowed"),
    ("x != 3", "NotEq is not allowed"),
    ("x + y", "must be a comparison"),
    ("x - x <= 3", "names no parameter"),
    ("x ** 2 <= 3", "** is only allowed between constants"),
])
def test_malformed_constraints_name_the_expression(text: str, fragment: str) -> None:
    space = Space((IntParam("x", 0, 10), IntParam("y", 0, 10)))
    with pytest.raises(ConstraintError) as info:
        launch(space, [text])
    message = str(info.value)
    assert repr(text.strip()) in message and fragment in message
    assert "^" in message


def test_pointer_marks_the_offending_part() -> None:
    with pytest.raises(ConstraintError) as info:
        parse_constraint("2*a + x*y <= 3", ["a", "x", "y"])
    lines = str(info.value).splitlines()
    assert lines[-2].strip() == "2*a + x*y <= 3"
    assert lines[-1] == "    " + " " * 6 + "^^^"


def test_empty_feasible_set_is_an_error_at_init() -> None:
    space = Space((IntParam("x", 0, 10), IntParam("y", 0, 10)))
    with pytest.raises(ConstraintError,
                       match=r"'x \+ y >= 5'.*together with \['x <= 1', 'y <= 2'\]"):
        launch(space, ["x <= 1", "y <= 2", "x + y >= 5"])
    with pytest.raises(ConstraintError, match="'2\\*x == 3'"):
        launch(space, ["2*x == 3"])


def test_gridless_parameters_are_rejected() -> None:
    space = Space((RealParam("r", 0.0, 1.0), IntParam("x", 0, 10), EnumParam("e", (1, 2))))
    with pytest.raises(ConstraintError, match="'r' is continuous"):
        launch(space, ["r + x <= 3"])
    with pytest.raises(ConstraintError, match="'e' is an enumeration"):
        launch(space, ["e + x <= 3"])


# -- property test against brute force ------------------------------------------------------
@st.composite
def systems(draw: st.DrawFn) -> tuple[Space, list[str]]:
    n = draw(st.integers(2, 3))
    params: list[Param] = []
    for i in range(n):
        if draw(st.booleans()):
            step = draw(st.integers(1, 3))
            lo = draw(st.integers(-6, 6))
            params.append(IntParam(f"p{i}", lo, lo + step * draw(st.integers(1, 6))
                                   + draw(st.integers(0, step - 1)), step))
        else:
            step = draw(st.sampled_from([0.25, 0.5, 1.5]))
            lo = draw(st.sampled_from([-1.5, -0.5, 0.0, 0.75, 2.0]))
            params.append(RealParam(f"p{i}", lo, lo + step * draw(st.integers(1, 6)), step))
    texts = []
    for _ in range(draw(st.integers(1, 3))):
        coeffs = draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n).filter(any))
        terms = " + ".join(f"{c}*p{i}" for i, c in enumerate(coeffs) if c)
        op = draw(st.sampled_from(["<=", "<", ">=", ">", "=="]))
        rhs = draw(st.sampled_from(["0", "1", "-2", "2.5", "7", "half * 3"]))
        texts.append(f"{terms} {op} {rhs}")
    return Space(tuple(params)), texts


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(systems())
def test_contains_bounds_and_emptiness_match_brute_force(system: tuple[Space, list[str]]) -> None:
    space, texts = system
    constants = {"half": 0.5}
    feasible = brute_feasible(space, texts, constants)
    if not feasible:
        with pytest.raises(ConstraintError, match="no feasible grid point"):
            launch(space, texts, constants)
        return
    _, narrowed, region = launch(space, texts, constants)
    named = {n for t in texts for c in parse_constraint(t, space.names, constants)
             for n in c.coeffs}
    for name in space.names:
        if name in named:
            values = [p[name] for p in feasible]
            assert narrowed[name].min == pytest.approx(min(values), abs=1e-9)
            assert narrowed[name].upper == pytest.approx(max(values), abs=1e-9)
        else:
            assert narrowed[name] == space[name]
    keys = {tuple(p.values()) for p in feasible}
    for values in itertools.product(*(grid_values(p) for p in space.params)):
        point = dict(zip(space.names, values, strict=True))
        assert region.contains(point) == (values in keys)
    rng = np.random.default_rng(0)
    for _ in range(5):
        assert tuple(region.sample(rng).values()) in keys
    for values in list(itertools.product(*(grid_values(p) for p in narrowed.params)))[::7][:12]:
        point = dict(zip(narrowed.names, values, strict=True))
        projected = region.project(point)
        assert projected is not None and tuple(projected.values()) in keys
        best = min(unit_distance(narrowed, point, f) for f in feasible)
        assert unit_distance(narrowed, point, projected) == pytest.approx(best, abs=1e-9)


# -- in a session ------------------------------------------------------------------------------
@pytest.mark.parametrize("strategy", ["nelder-mead", "pro", "random"])
def test_no_point_handed_out_by_a_session_is_infeasible(strategy: str) -> None:
    from harmony_core.session import SessionCore, SessionDefinition

    definition = SessionDefinition.from_dict({
        "name": f"budget-{strategy}",
        "parameters": [{"name": "work_mem", "min": 1, "max": 200},
                       {"name": "maintenance_work_mem", "min": 1, "max": 1024, "step": 8},
                       {"name": "temp_buffers", "min": 1, "max": 1024, "step": 8}],
        "strategy": strategy,
        "constraints": ["work_mem * connections + maintenance_work_mem + temp_buffers <= 1024"],
        "constants": {"connections": 20},
        "objective": {"goal": "maximize"},
        "seed": 5,
    })
    session = SessionCore(definition)
    assert session.space["work_mem"].max == 51  # the session's space really shrank
    handed = 0
    for _ in range(150):
        assignment = session.fetch("c1")
        if assignment is None:
            break
        p = assignment.point
        assert brute_ok(p), p
        handed += 1
        # a throughput that rewards work_mem: pushes the search against the budget
        session.report(assignment.trial_id, 3.0 * p["work_mem"] + 0.1 * p["maintenance_work_mem"])
    assert handed >= 20
    best = session.best()
    assert best is not None and brute_ok(best[0])
