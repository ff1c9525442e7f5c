"""The first simplex of a search that starts at the settings in force (issue 51, capture): a
start at one end of a knob's range puts no vertex twice (the second ring of axis steps goes
to the range's far end), and ``combine`` measures, after that simplex, the one point that
takes every knob's better step at once, so that two knobs which gain only together are found
in the first ten evaluations. The surface is the capture benchmark's in miniature: raising
random_page_cost from 1 gains 17 %, lowering work_mem from 128MB alone 7 %, both 28 %."""

from __future__ import annotations

import math

import pytest
from test_strategies import drive

from harmony_base.errors import ConfigError
from harmony_base.space import IntParam, Point, RealParam, Space
from strategies import make_strategy

SPACE = Space((IntParam("work_mem", 1, 128, unit="MB"),
               RealParam("random_page_cost", 1.0, 8.0, step=0.5),
               IntParam("max_parallel_workers_per_gather", 0, 2)))
#: the slow original, at one end of every range
ORIGINAL: Point = {"work_mem": 128, "random_page_cost": 1.0, "max_parallel_workers_per_gather": 0}


def together(point: Point) -> float:
    """Minus the log-gain over the original: each knob gains alone, both gain more."""
    cost = float(point["random_page_cost"])  # type: ignore[arg-type]
    small = int(point["work_mem"]) <= 4  # type: ignore[call-overload]
    gain = (0.23 if small else 0.17) if cost >= 1.5 else (0.07 if small else 0.0)
    return -gain


def cost_only(point: Point) -> float:
    """Only random_page_cost gains: nothing to combine."""
    return -0.17 if float(point["random_page_cost"]) >= 1.5 else 0.0  # type: ignore[arg-type]


def _search(name: str, combine: bool, objective=together, evals: int = 10) -> list[Point]:
    strategy = make_strategy(name, SPACE, seed=3, simplex_size=6, init_point=ORIGINAL,
                             combine=combine)
    return drive(strategy, objective, evals=evals)


def test_a_start_at_the_ranges_ends_puts_no_vertex_twice() -> None:
    first = _search("nelder-mead", combine=False, evals=6)
    keys = {SPACE.key(p) for p in first}
    # six vertices, six points: the second ring of steps along work_mem and random_page_cost
    # would have stepped back onto the first (both ends are where the original sits)
    assert len(first) == 6 and len(keys) == 6, first
    assert any(p["work_mem"] == 1 and p["random_page_cost"] == 1.0 for p in first), first
    assert any(p["random_page_cost"] == 8.0 and p["work_mem"] == 128 for p in first), first


@pytest.mark.parametrize("name", ["nelder-mead", "pro"])
def test_combine_measures_the_point_two_knobs_gain_together(name: str) -> None:
    handed = _search(name, combine=True)
    combined = handed[6]
    # the 7th point takes work_mem's step to its far end and random_page_cost's better step
    assert combined["work_mem"] == 1 and float(combined["random_page_cost"]) >= 1.5, handed
    assert combined["max_parallel_workers_per_gather"] == 0, handed  # no gain: unchanged
    assert math.isclose(min(together(p) for p in handed), -0.23)
    # the plain simplex's ten points never hold both steps (the single work_mem step read
    # 0.07, below every random_page_cost step's 0.17, and the simplex moved away from it)
    plain = _search(name, combine=False)
    assert min(together(p) for p in plain) == -0.17, plain


def test_combine_adds_nothing_where_one_knob_gains() -> None:
    with_it, without = (_search("nelder-mead", combine=c, objective=cost_only) for c in (True,
                                                                                         False))
    assert with_it == without


def test_combine_must_be_a_boolean() -> None:
    with pytest.raises(ConfigError, match="combine.*true or false.*'yes'"):
        make_strategy("nelder-mead", SPACE, init_point=ORIGINAL, combine="yes")
