"""Smoke test of the cheapest evidence benchmark: the optimizer comparison on one seed."""

from __future__ import annotations

import math

from benchmarks.evidence.optimizers import (
    OPTIMIZERS,
    budget_constraint,
    markdown,
    measure,
    run_harmony,
    run_optuna,
)
from harmony_core.synth import make_problem


def test_constraint_keeps_the_optimum_feasible_and_cuts_the_box() -> None:
    problem = make_problem("rosenbrock", 3, "int")
    text, limit = budget_constraint(problem)
    assert text == "2 * x0 + x1 + x2 <= 305"  # optimum at index 75: 4 * 75 = 300, plus 5
    assert limit == 305


def test_every_optimizer_runs_its_budget_and_sphere_gets_close() -> None:
    rows = measure(1, 25, dims=(2,), functions=("sphere",))
    assert len(rows) == 2 * len(OPTIMIZERS)  # box and constrained
    for row in rows:
        assert row["evaluations_done"] == [50 * row["parallel"]] or \
            row["optimizer"] == "optuna-tpe" and row["evaluations_done"] == [50]
        gap = row["at"]["50"]["median"]
        assert gap is not None and 0 <= gap < 0.2, (row["optimizer"], gap)
    nm = next(r for r in rows if r["optimizer"] == "nelder-mead" and not r["constrained"])
    assert nm["at"]["50"]["median"] < 0.01  # 1 % of a random point's gap on a 2-d bowl
    text = markdown({"machine": {}, "quick": True, "seeds": 1, "budget_per_dim": 25,
                     "rows": rows})
    assert "| sphere | 2 |" in text and "optuna-tpe" in text


def test_constrained_runs_measure_only_feasible_points() -> None:
    problem = make_problem("sphere", 2, "int")
    best, rounds = run_harmony("pro", {}, problem, True, 30, seed=0, parallel=4)
    assert len(best) == 30 and rounds[-1] <= 30
    assert all(b >= problem.optimum for b in best)
    tpe = run_optuna(problem, True, 20, seed=0)
    assert len(tpe) == 20 and math.isfinite(tpe[-1])
