"""``harmony bme ...``: the options and help; the commands run from :mod:`bme.cli`, imported
only when one runs (``harmony bme --help`` needs no numpy).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from harmony_base.lazy import LazyModule

if TYPE_CHECKING:
    import bme.cli as bme_commands
else:
    bme_commands = LazyModule("bme.cli")

EXIT_BAD_INPUT = 2


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``harmony bme`` and its subcommands."""
    bme = subparsers.add_parser("bme", help="Buffer Miss Equation: fit, size, partition, "
                                            "reclaim, Mattson stack",
                                description="The Buffer Miss Equation P(M) and its uses.")
    bme.set_defaults(func=lambda args: _usage(bme))
    sub = bme.add_subparsers(dest="bme_command", metavar="SUBCOMMAND")

    p = sub.add_parser("fit", help="fit the equation to a size,miss CSV")
    p.add_argument("data", help="CSV with a header 'size,miss'")
    p.add_argument("--p-star", type=float, default=None, help="fix the cold-miss floor P*")
    _json_flag(p)
    p.set_defaults(func=lambda args: bme_commands.cmd_fit(args))

    p = sub.add_parser("size", help="buffer size reaching a target miss probability")
    p.add_argument("--params", required=True, help="JSON object with p_star, p_c, m_b, m_star")
    p.add_argument("--target", type=float, required=True, help="target miss probability μ")
    _json_flag(p)
    p.set_defaults(func=lambda args: bme_commands.cmd_size(args))

    p = sub.add_parser("partition", help="split a buffer among pools with fitted curves")
    p.add_argument("--total", type=int, required=True, help="total pages to split")
    p.add_argument("--weights", type=_floats, default=None,
                   help="reference shares w1,w2,... (default equal)")
    p.add_argument("--max-miss", type=float, default=None, help="cap on every pool's P")
    p.add_argument("data", nargs="+", help="one size,miss CSV per pool")
    _json_flag(p)
    p.set_defaults(func=lambda args: bme_commands.cmd_partition(args))

    p = sub.add_parser("reclaim", help="fair reclamation of pages from pools")
    p.add_argument("--params", required=True, help="JSON list of parameter objects")
    p.add_argument("--sizes", type=_floats, required=True, help="current sizes m1,m2,...")
    p.add_argument("--delta", type=float, required=True,
                   help="pages to take (negative: pages to give back)")
    p.add_argument("--exact", action="store_true",
                   help="solve for exactly equal P/P* instead of the closed-form β shares")
    p.add_argument("--integer", action="store_true", help="round to whole pages (Σ kept)")
    _json_flag(p)
    p.set_defaults(func=lambda args: bme_commands.cmd_reclaim(args))

    p = sub.add_parser("mattson", help="LRU miss curve of a page-reference trace, and its fit")
    p.add_argument("trace", help="file with one page id per line")
    p.add_argument("--points", type=int, default=40,
                   help="log-spaced curve points to print and fit (0: every size)")
    _json_flag(p)
    p.set_defaults(func=lambda args: bme_commands.cmd_mattson(args))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_BAD_INPUT


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}") from None

