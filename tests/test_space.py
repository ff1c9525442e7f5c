"""Typed search spaces: validation, grids, snapping, unit-cube maps (with property tests)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harmony_base.errors import ConfigError
from harmony_base.space import EnumParam, IntParam, RealParam, Space, space_from_dicts

# -- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize("make, words", [
    (lambda: IntParam("work_mem", 10, 5), ["work_mem", "min", "max", "10", "5"]),
    (lambda: RealParam("rpc", 3.0, 1.0), ["rpc", "min", "max"]),
    (lambda: IntParam("work_mem", 0, 10, step=0), ["work_mem", "step", "> 0", "0"]),
    (lambda: IntParam("work_mem", 0, 10, step=-2), ["work_mem", "step", "-2"]),
    (lambda: RealParam("rpc", 0.0, 1.0, step=-0.1), ["rpc", "step", "-0.1"]),
    (lambda: IntParam("work_mem", 0, 10, step=11), ["work_mem", "step 11", "larger than the"]),
    (lambda: RealParam("rpc", 0.0, 1.0, step=2.5), ["rpc", "step 2.5", "larger than the range"]),
    (lambda: IntParam("work_mem", 0, 10, log=True), ["work_mem", "log", "min > 0"]),
    (lambda: IntParam("work_mem", 0, 10, step=1.5), ["work_mem", "integer"]),  # type: ignore[arg-type]
    (lambda: RealParam("rpc", 0.0, math.inf), ["rpc", "finite"]),
    (lambda: IntParam("work_mem", 0, 10, default=11), ["work_mem", "default 11", "outside"]),
    # found by the API fuzz: a text default reached a numeric comparison (a 500)
    (lambda: RealParam("rpc", 0.0, 1.0, default="x"),  # type: ignore[arg-type]
     ["rpc", "default", "finite number", "'x'"]),
    (lambda: EnumParam("mode", ()), ["mode", "at least one value"]),
    (lambda: EnumParam("mode", ("a", "a")), ["mode", "distinct"]),
    (lambda: Space(()), ["at least one parameter"]),
    (lambda: Space((IntParam("a", 0, 1), IntParam("a", 0, 2))), ["'a'", "twice"]),
    (lambda: space_from_dicts([{"name": "a", "type": "float", "min": 0, "max": 1}]),
     ["'a'", "type", "float"]),
])
def test_bad_parameters_raise_config_error_naming_the_parameter(make, words) -> None:
    with pytest.raises(ConfigError) as info:
        make()
    for word in words:
        assert word in str(info.value)


def test_unknown_parameter_and_mismatched_point_are_errors() -> None:
    space = Space((IntParam("a", 0, 10), IntParam("b", 0, 10)))
    with pytest.raises(ConfigError, match="unknown parameter 'c'"):
        space["c"]
    with pytest.raises(ConfigError, match=r"missing \['b'\].*unknown \['c'\]"):
        space.snap({"a": 1, "c": 2})


# -- grids and snapping -----------------------------------------------------------------


def test_integer_width_not_a_multiple_of_the_step() -> None:
    p = IntParam("a", 0, 10, step=3)
    assert (p.size, p.upper) == (4, 9)
    assert [p.value_at(i) for i in range(p.size)] == [0, 3, 6, 9]
    assert (p.snap(10), p.snap(11), p.snap(-5), p.snap(4.4), p.snap(4.6)) == (9, 9, 0, 3, 6)


def test_real_grid_values_are_free_of_binary_noise_and_inside_bounds() -> None:
    p = RealParam("r", 0.0, 1.0, step=0.3)
    assert [p.value_at(i) for i in range(p.size)] == [0.0, 0.3, 0.6, 0.9]
    assert p.upper == 0.9
    assert p.snap(0.95) == 0.9
    q = RealParam("q", 0.1, 0.7, step=0.1)
    assert q.size == 7 and q.value_at(6) == 0.7 and q.snap(0.3000001) == 0.3


def test_continuous_real_clips_but_does_not_round() -> None:
    p = RealParam("r", -1.0, 1.0)
    assert (p.snap(0.123456789), p.snap(3.0), p.snap(-7.0)) == (0.123456789, 1.0, -1.0)


def test_log_scale_maps_geometrically_to_the_unit_interval() -> None:
    space = Space((IntParam("m", 1, 1024, log=True), RealParam("r", 0.1, 10.0, log=True)))
    u = space.to_unit({"m": 32, "r": 1.0})
    assert u == pytest.approx([0.5, 0.5])
    assert space.from_unit([0.5, 0.5]) == {"m": 32, "r": pytest.approx(1.0)}
    assert space.from_unit([1.0, 0.0]) == {"m": 1024, "r": 0.1}


def test_enumerations_are_snapped_by_index_and_rejected_when_unknown() -> None:
    space = Space((EnumParam("mode", ("off", "on", "auto")),))
    assert space.from_unit([0.0]) == {"mode": "off"}
    assert space.from_unit([0.6]) == {"mode": "on"}
    assert space.to_unit({"mode": "auto"}) == pytest.approx([1.0])
    with pytest.raises(ConfigError, match="'mode'.*'maybe'"):
        space.snap({"mode": "maybe"})


def test_iter_grid_is_odometer_order_and_covers_the_grid_once() -> None:
    space = Space((IntParam("a", 0, 2), EnumParam("b", ("x", "y")), RealParam("c", 0, 1, 0.5)))
    points = list(space.iter_grid())
    assert len(points) == space.grid_size() == 3 * 2 * 3
    assert points[:4] == [{"a": 0, "b": "x", "c": 0.0}, {"a": 0, "b": "x", "c": 0.5},
                          {"a": 0, "b": "x", "c": 1.0}, {"a": 0, "b": "y", "c": 0.0}]
    assert len({space.key(p) for p in points}) == len(points)


def test_iter_grid_of_a_continuous_space_is_an_error_naming_the_parameter() -> None:
    with pytest.raises(ConfigError, match=r"\['r'\].*continuous"):
        list(Space((IntParam("a", 0, 2), RealParam("r", 0.0, 1.0))).iter_grid())


def test_narrowed_space_keeps_steps_and_defaults_inside() -> None:
    space = Space((IntParam("a", 0, 100, step=5, default=50), IntParam("b", 0, 10)))
    narrow = space.narrowed({"a": (10, 40), "b": (3, 3)})
    assert (narrow["a"].min, narrow["a"].max, narrow["a"].step) == (10, 40, 5)  # type: ignore[union-attr]
    assert narrow["a"].default is None  # 50 is outside 10..40
    assert narrow["b"].size == 1


# -- property tests: points never leave the space ----------------------------------------

@st.composite
def params(draw: st.DrawFn, name: str) -> IntParam | RealParam | EnumParam:
    kind = draw(st.sampled_from(["int", "int-log", "real", "real-step", "real-log", "enum"]))
    if kind == "enum":
        n = draw(st.integers(1, 5))
        return EnumParam(name, tuple(f"v{i}" for i in range(n)))
    if kind.startswith("int"):
        lo = draw(st.integers(1 if kind == "int-log" else -1000, 1000))
        width = draw(st.integers(0, 5000))
        step = draw(st.integers(1, max(1, width)))
        return IntParam(name, lo, lo + width, step=step, log=kind == "int-log")
    low = draw(st.floats(1e-3 if kind == "real-log" else -1e3, 1e3))
    high = low + draw(st.floats(0.0, 1e4))
    span = high - low  # as the parameter will compute it, rounding included
    real_step = draw(st.floats(1e-3, span)) if kind == "real-step" and span > 1e-3 else 0.0
    return RealParam(name, low, high, step=real_step, log=kind == "real-log")


@st.composite
def spaces(draw: st.DrawFn) -> Space:
    n = draw(st.integers(1, 5))
    return Space(tuple(draw(params(f"p{i}")) for i in range(n)))


def _inside(space: Space, point: dict) -> bool:
    for p in space.params:
        v = point[p.name]
        if isinstance(p, EnumParam):
            if v not in p.values:
                return False
        elif not p.min <= v <= p.max:
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(space=spaces(), data=st.data())
def test_from_unit_points_are_on_the_grid_and_inside_the_bounds(space: Space, data) -> None:
    u = data.draw(st.lists(st.floats(-0.5, 1.5), min_size=space.dim, max_size=space.dim))
    point = space.from_unit(u)
    assert _inside(space, point)
    assert space.contains(point)
    assert space.snap(point) == point
    back = space.to_unit(point)
    assert np.all((back >= -1e-9) & (back <= 1 + 1e-9))


@settings(max_examples=200, deadline=None)
@given(space=spaces(), seed=st.integers(0, 2**32 - 1))
def test_random_points_and_grid_ends_are_inside(space: Space, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(5):
        assert space.contains(space.random_point(rng))
    for corner in (np.zeros(space.dim), np.ones(space.dim)):
        point = space.from_unit(corner)
        assert _inside(space, point) and space.contains(point)
    assert space.contains(space.default_point())
