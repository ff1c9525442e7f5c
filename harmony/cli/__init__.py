"""The single console script, ``harmony``: one subcommand per job.

Each subcommand has a light module with ``add_parser(subparsers)`` (its options and help; the
work is imported when the command runs); this module only wires them together, configures
logging, and turns errors into exit codes.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from types import ModuleType

import harmony_server.cli
import tuner_client.cli.demo
import tuner_client.cli.restore
import tuner_client.cli.sessions
import tuner_client.cli.tune
from harmony.cli import (
    bme_parser,
    priordata,
    report,
    synth,
    tpch_parser,
    validate_parser,
    workload_parser,
)
from harmony_base.env import env_default
from harmony_base.errors import ConfigError, HarmonyError
from harmony_base.lazy import LazyFunction
from harmony_base.version import __version__

#: modules that register subcommands, in the order ``harmony --help`` lists them. Each is light:
#: it imports argparse, the standard library, :mod:`harmony_base` and other such modules only,
#: and reaches the command's work through a :class:`~harmony_base.lazy.LazyModule`, so that
#: ``harmony --help`` and ``harmony X --help`` load no heavy library (tests/test_cli_startup.py).
SUBCOMMAND_MODULES: tuple[ModuleType, ...] = (
    harmony_server.cli,           # harmony server
    tuner_client.cli.sessions,    # harmony sessions
    tuner_client.cli.tune,        # harmony tune
    tuner_client.cli.restore,     # harmony restore
    tuner_client.cli.demo,            # harmony demo
    synth,                        # harmony synth
    bme_parser,                   # harmony bme ...
    tpch_parser,                  # harmony tpch ..., harmony pgbench
    workload_parser,              # harmony workload ..., harmony capture
    validate_parser,              # harmony validate
    report,                       # harmony report (reads a store, a server or a file)
    priordata,                    # harmony export, harmony import
)

#: exit codes: 0 ok, 1 unexpected failure, 2 bad input, 3 other Harmony error, 130 interrupted
EXIT_BAD_INPUT = 2
EXIT_HARMONY_ERROR = 3


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harmony",
        description="Harmony for PostgreSQL: find the PostgreSQL configuration that gives the most "
                    "throughput for a workload, safely, on a live server.")
    parser.add_argument("--version", action="version", version=f"harmony {__version__}")
    parser.add_argument("--log-level", default=env_default("log_level", "INFO"),
                        help="logging level (env HARMONY_LOG_LEVEL; default INFO)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMAND_MODULES:
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=str(args.log_level).upper(),
                        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    if isinstance(func, LazyFunction):  # the entry point itself, its module loaded now
        func = func.resolve()
    try:
        return int(func(args) or 0)
    except ConfigError as exc:
        print(f"harmony: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except HarmonyError as exc:
        print(f"harmony: error: {exc}", file=sys.stderr)
        return EXIT_HARMONY_ERROR
    except KeyboardInterrupt:
        print("harmony: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `harmony ... | head`): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
