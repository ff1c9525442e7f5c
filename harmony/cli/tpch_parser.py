"""``harmony tpch ...`` and ``harmony pgbench ...``: the options and help; the commands run from
:mod:`workloads.cli`, imported only when one runs (``--help`` needs no psycopg).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from harmony_base.env import env_default
from harmony_base.lazy import LazyModule

if TYPE_CHECKING:
    import workloads.cli as tpch_commands
else:
    tpch_commands = LazyModule("workloads.cli")


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, but got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, but got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def add_dsn(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dsn", default=env_default("dsn"),
        help="libpq connection string of the database (env HARMONY_DSN)",
    )  # fmt: skip


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``harmony tpch ...`` and ``harmony pgbench ...``."""
    tpch = subparsers.add_parser("tpch", help="load TPC-H data, run query mixes, print queries")
    tpch_sub = tpch.add_subparsers(dest="tpch_command", metavar="ACTION", required=True)
    _add_tpch_load(tpch_sub)
    _add_tpch_run(tpch_sub)
    _add_tpch_queries(tpch_sub)
    _add_pgbench(subparsers)


def _add_tpch_load(tpch_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    load = tpch_sub.add_parser("load", help="generate and load TPC-H data (idempotent)")
    add_dsn(load)
    load.add_argument(
        "--scale", type=float, default=float(env_default("tpch_scale", "0.1") or 0.1),
        help="TPC-H scale factor, > 0 (env HARMONY_TPCH_SCALE; default 0.1)",
    )  # fmt: skip
    load.add_argument("--workdir", default=env_default("tpch_workdir"),
                      help="keep the generated CSV files here and reuse them "
                           "(env HARMONY_TPCH_WORKDIR)")
    load.add_argument("--replace", action="store_true",
                      help="replace TPC-H data of another scale factor in the database")
    load.add_argument("--json", action="store_true", help="print the result as JSON")
    load.set_defaults(func=lambda args: tpch_commands.cmd_load(args))


def _add_tpch_run(tpch_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = tpch_sub.add_parser("run", help="run a query mix or schedule and report throughput")
    add_dsn(run)
    run.add_argument("--mix", default=env_default("tpch_mix"),
                     help="streams per query, e.g. 4Q6,4Q9,4Q13 (env HARMONY_TPCH_MIX)")
    run.add_argument("--schedule", default=None,
                     help="phases <mix>:<duration>;..., e.g. '12Q6:90m;6Q7,6Q13:30m'")
    run.add_argument("--repeat", action="store_true", help="cycle the schedule's phases")
    run.add_argument("--seconds", type=positive_float, default=None, help="sample window (s)")
    run.add_argument("--queries", type=positive_int, default=None,
                     help="fixed-work sample: this many completed queries")
    run.add_argument("--samples", type=positive_int, default=1, help="samples to take (default 1)")
    run.add_argument("--warmup", type=positive_float, default=None,
                     help="seconds to run before the first sample")
    run.add_argument("--seed", type=int, default=0, help="seed of the substitution parameters")
    run.add_argument("--statement-timeout", type=positive_float, default=None,
                     help="cancel queries running longer than this (s); counted as errors")
    run.add_argument("--json", action="store_true", help="print the samples as JSON")
    run.set_defaults(func=lambda args: tpch_commands.cmd_run(args))


def _add_tpch_queries(tpch_sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    queries = tpch_sub.add_parser("queries", help="print query instances with fresh parameters")
    queries.add_argument("--query", action="append", help="Q1..Q22 (repeatable; default all)")
    queries.add_argument("--seed", type=int, default=0, help="seed of the substitution parameters")
    queries.add_argument("--scale", type=positive_float, default=1.0,
                         help="scale factor (Q11's fraction is 0.0001/scale; default 1)")
    queries.add_argument("--default", action="store_true",
                         help="the spec's validation parameters instead of random ones")
    queries.set_defaults(func=lambda args: tpch_commands.cmd_queries(args))


def _add_pgbench(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pgbench = subparsers.add_parser("pgbench", help="run pgbench as an OLTP workload")
    pgbench_sub = pgbench.add_subparsers(dest="pgbench_command", metavar="ACTION", required=True)
    prun = pgbench_sub.add_parser("run", help="initialise if needed, run, report throughput")
    add_dsn(prun)
    prun.add_argument("--clients", type=positive_int, default=4, help="connections (default 4)")
    prun.add_argument("--threads", type=positive_int, default=None, help="pgbench -j")
    prun.add_argument("--scale", type=positive_int, default=1, help="pgbench scale (default 1)")
    prun.add_argument("--builtin", default="tpcb-like",
                      help="tpcb-like, simple-update or select-only (default tpcb-like)")
    prun.add_argument("--seconds", type=positive_float, default=10.0, help="sample window (s)")
    prun.add_argument("--samples", type=positive_int, default=1, help="samples to take")
    prun.add_argument("--bin-dir", default=env_default("pg_bin_dir"),
                      help="directory holding pgbench (env HARMONY_PG_BIN_DIR)")
    prun.add_argument("--json", action="store_true", help="print the samples as JSON")
    prun.set_defaults(func=lambda args: tpch_commands.cmd_pgbench(args))
