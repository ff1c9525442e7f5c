"""``harmony synth``: run a search strategy against a synthetic test function.

Prints the best value found at evaluation counts 1, 2, 4, 8, ... next to the known optimum
(or, with ``--json``, the same as one JSON document).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING

from harmony_base.errors import ConfigError
from harmony_base.lazy import LazyModule

if TYPE_CHECKING:
    import yaml

    import harmony_core.synth as synth
else:
    # the strategies (scipy) load when a search runs, YAML when an option is read, neither
    # for ``harmony synth --help``
    synth = LazyModule("harmony_core.synth")
    yaml = LazyModule("yaml")

#: the names of :data:`harmony_core.synth.FUNCTIONS` and its ``GRIDS``, for ``--help`` (a test
#: keeps them equal)
FUNCTION_NAMES = ("ackley", "michalewicz", "rastrigin", "rosenbrock", "sphere")
GRIDS = ("real", "int")


def _env(name: str, default: str) -> str:
    return os.environ.get(f"HARMONY_SYNTH_{name.upper()}", default)


def _option(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` with VALUE read as YAML (so numbers, booleans and lists work)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"strategy options are KEY=VALUE, got {text!r}")
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise argparse.ArgumentTypeError(f"option {key!r}: cannot read value {value!r}: "
                                         f"{exc}") from None


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``harmony synth``."""
    p = subparsers.add_parser(
        "synth", help="run a search strategy on a synthetic test function",
        description="Drive a strategy (as a session would) against a test function with a known "
                    "optimum and print the best value at 1, 2, 4, 8, ... evaluations. Every option "
                    "can also be set as HARMONY_SYNTH_<OPTION>.")
    p.add_argument("--strategy", default=_env("strategy", "nelder-mead"),
                   help="strategy name (default nelder-mead)")
    p.add_argument("--function", default=_env("function", "rosenbrock"),
                   choices=FUNCTION_NAMES, help="test function (default rosenbrock)")
    p.add_argument("--dim", type=int, default=int(_env("dim", "2")),
                   help="dimensions, 2..16 (default 2)")
    p.add_argument("--evals", type=int, default=int(_env("evals", "400")),
                   help="evaluation budget (default 400)")
    p.add_argument("--grid", default=_env("grid", "real"), choices=GRIDS,
                   help="continuous real box or integer grid (default real)")
    p.add_argument("--parallel", type=int, default=int(_env("parallel", "1")),
                   help="emulated clients measuring at once (default 1)")
    p.add_argument("--noise", type=float, default=float(_env("noise", "0")),
                   help="standard deviation of Gaussian measurement noise (default 0)")
    p.add_argument("--seed", type=int, default=int(_env("seed", "1")), help="seed (default 1)")
    p.add_argument("--restart", action="store_true",
                   default=_env("restart", "") not in ("", "0", "false"),
                   help="restart the strategy whenever it converges, until the budget is used")
    p.add_argument("-o", "--option", dest="options", type=_option, action="append", default=[],
                   metavar="KEY=VALUE", help="a strategy option, e.g. -o simplex_size=6 (repeat)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run one synthetic search and print its progress; 0 on success."""
    options = dict(args.options)
    trace = synth.trace_synthetic(args.strategy, args.function, args.dim, grid=args.grid,
                                  evals=args.evals, seed=args.seed, parallel=args.parallel,
                                  noise=args.noise, strategy_options=options,
                                  restart_on_converge=args.restart)
    problem = trace.problem
    rows = [{"evals": n, "best": value, "gap": value - problem.optimum}
            for n, value in trace.checkpoints()]
    result = {
        "strategy": args.strategy, "function": args.function, "dim": args.dim,
        "grid": args.grid, "parallel": args.parallel, "noise": args.noise, "seed": args.seed,
        "options": options, "optimum": problem.optimum, "evaluations": trace.evaluations,
        "converged": trace.converged, "restarts": trace.restarts,
        "evals_to_1pct": trace.evals_to_within(0.01), "best_point": trace.best_point,
        "progress": rows,
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    out = sys.stdout
    out.write(f"{args.strategy} on {args.function} {args.dim}-D ({args.grid} grid), "
              f"optimum {problem.optimum:.6g}\n")
    out.write(f"{'evals':>7}  {'best':>14}  {'gap':>12}\n")
    for row in rows:
        out.write(f"{row['evals']:>7}  {row['best']:>14.6g}  {row['gap']:>12.3g}\n")
    reached = result["evals_to_1pct"]
    out.write(f"{trace.evaluations} evaluations, "
              f"{'converged' if trace.converged else 'not converged'}"
              f"{f', {trace.restarts} restarts' if trace.restarts else ''}; within 1% of the "
              f"optimum after {reached if reached is not None else '-'} evaluations\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run ``synth`` on its own (``python -m harmony.cli.synth``)."""
    parser = argparse.ArgumentParser(prog="harmony")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["synth", *(argv if argv is not None else sys.argv[1:])])
    try:
        return int(args.func(args))
    except ConfigError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2


if __name__ == "__main__":
    sys.exit(main())
