"""Synthetic test functions, the ask/tell harness, and ``harmony synth``."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from harmony.cli import synth as synth_cli
from harmony_base.errors import ConfigError
from harmony_core.synth import FUNCTIONS, make_problem, run_synthetic, trace_synthetic


@pytest.mark.parametrize("name, point, value", [
    ("sphere", [0.0, 0.0, 0.0], 0.0),
    ("sphere", [1.0, 2.0], 5.0),
    ("rosenbrock", [1.0, 1.0, 1.0, 1.0], 0.0),
    ("rosenbrock", [0.0, 0.0], 1.0),
    ("ackley", [0.0, 0.0], 0.0),
    ("rastrigin", [0.0] * 6, 0.0),
    ("rastrigin", [1.0, 0.0], 1.0),
])
def test_functions_at_known_points(name: str, point: list[float], value: float) -> None:
    assert FUNCTIONS[name].evaluate(np.array(point)) == pytest.approx(value, abs=1e-12)


@pytest.mark.parametrize("dim, optimum", [(2, -1.8013), (5, -4.687658), (10, -9.66015)])
def test_michalewicz_optimum_matches_the_published_values(dim: int, optimum: float) -> None:
    assert make_problem("michalewicz", dim, "real").optimum == pytest.approx(optimum, abs=2e-4)
    # the integer grid's optimum is a grid point's value, so no better than the real one
    assert make_problem("michalewicz", dim, "int").optimum >= optimum - 2e-4


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_integer_grid_contains_the_optimum(name: str) -> None:
    problem = make_problem(name, 3, "int")
    f = problem.function
    if f.argmin is not None:
        index = (f.argmin - f.lower) / (f.upper - f.lower) * f.levels
        assert index == pytest.approx(round(index))
        point = {n: round(index) for n in problem.space.names}
        assert problem(point) == pytest.approx(problem.optimum, abs=1e-12)
    assert problem.typical_gap() > 0


@pytest.mark.parametrize("kwargs, words", [
    ({"function": "himmelblau"}, ["himmelblau", "sphere"]),
    ({"dim": 1}, ["dimension", "2..16", "1"]),
    ({"dim": 17}, ["dimension", "17"]),
    ({"grid": "hex"}, ["grid", "'hex'"]),
    ({"evals": 0}, ["evals", "0"]),
    ({"parallel": 0}, ["parallel", "0"]),
    ({"noise": -1.0}, ["noise", "-1.0"]),
    ({"strategy": "hill-climb"}, ["unknown strategy 'hill-climb'"]),
])
def test_bad_synthetic_input_is_a_config_error(kwargs: dict, words: list[str]) -> None:
    args = {"strategy": "random", "function": "sphere", "dim": 2, "evals": 10, **kwargs}
    with pytest.raises(ConfigError) as info:
        trace_synthetic(args.pop("strategy"), args.pop("function"), args.pop("dim"), **args)
    for word in words:
        assert word in str(info.value)


def test_checkpoints_are_powers_of_two_and_the_last_evaluation() -> None:
    progress = run_synthetic("random", "sphere", 3, evals=100, seed=2)
    assert [n for n, _ in progress] == [1, 2, 4, 8, 16, 32, 64, 100]
    values = [v for _, v in progress]
    assert values == sorted(values, reverse=True) and values[-1] >= 0.0


def test_nelder_mead_reaches_rosenbrock_2d_through_the_harness() -> None:
    trace = trace_synthetic("nelder-mead", "rosenbrock", 2, evals=400, seed=1)
    assert trace.best[-1] < 1e-3
    first = next(i + 1 for i, v in enumerate(trace.best) if v < 1e-3)
    assert first <= 400


def test_pro_with_parallel_clients_on_an_integer_sphere() -> None:
    trace = trace_synthetic("pro", "sphere", 5, grid="int", evals=2000, seed=3, parallel=4,
                            strategy_options={"restart_patience": 2})
    assert trace.best[-1] == 0.0
    assert trace.best_point == {f"x{i}": 50 for i in range(5)}
    # two restarts in a row that find nothing better end the search before its budget
    assert trace.converged and trace.evaluations < 2000


def test_noise_is_seeded_and_the_trace_shows_true_values() -> None:
    a = trace_synthetic("nelder-mead", "sphere", 2, evals=150, seed=4, noise=0.5)
    b = trace_synthetic("nelder-mead", "sphere", 2, evals=150, seed=4, noise=0.5)
    c = trace_synthetic("nelder-mead", "sphere", 2, evals=150, seed=4)
    assert a.best == b.best and a.best != c.best
    assert a.best_point is not None
    assert a.best[-1] == pytest.approx(a.problem(a.best_point))


def test_restart_on_converge_uses_the_whole_budget() -> None:
    # a plain Nelder-Mead (no restarts of its own) converges early on the rastrigin grid; the
    # harness's restart_on_converge keeps it going until the budget
    plain = {"reexpand": False}
    once = trace_synthetic("nelder-mead", "rastrigin", 2, grid="int", evals=600, seed=5,
                           strategy_options=plain)
    again = trace_synthetic("nelder-mead", "rastrigin", 2, grid="int", evals=600, seed=5,
                            restart_on_converge=True, strategy_options=plain)
    assert once.evaluations < 600 and once.converged
    assert again.evaluations == 600 and again.restarts >= 1
    assert again.best[-1] <= once.best[-1]


def test_stop_within_ends_the_run_at_the_target() -> None:
    trace = trace_synthetic("nelder-mead", "sphere", 4, evals=1000, seed=6, stop_within=0.01)
    n = trace.evals_to_within(0.01)
    assert n is not None and trace.evaluations == n


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harmony")
    synth_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser


def test_cli_prints_a_table_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["synth", "--strategy", "nelder-mead", "--function", "rosenbrock",
                                 "--dim", "2", "--evals", "64"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "optimum 0" in out and "     64" in out

    args = _parser().parse_args(["synth", "--strategy", "pro", "--function", "sphere", "--dim",
                                 "3", "--grid", "int", "--parallel", "4", "--noise", "0.01",
                                 "--seed", "1", "--evals", "50", "-o", "simplex_size=6",
                                 "--json"])
    assert args.func(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["options"] == {"simplex_size": 6} and doc["parallel"] == 4
    assert [row["evals"] for row in doc["progress"]][:3] == [1, 2, 4]
    assert doc["evaluations"] <= 50


def test_cli_main_turns_bad_input_into_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert synth_cli.main(["--strategy", "nm", "--evals", "5"]) == 2
    assert "unknown strategy 'nm'" in capsys.readouterr().err
