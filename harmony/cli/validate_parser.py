"""``harmony validate FILE...``: the options and help; the checks are :mod:`harmony.cli.define`,
imported only when they run (``harmony validate --help`` needs no schema, catalog or psycopg).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from harmony_base.lazy import LazyModule

if TYPE_CHECKING:
    import harmony.cli.define as define
else:
    define = LazyModule("harmony.cli.define")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``harmony validate``."""
    parser = subparsers.add_parser(
        "validate", help="validate session definitions and tuner configs",
        description="Validate session definitions (schema, strategy, plugins, the possibly "
                    "constraint-narrowed search space) and tuner configs (schema, knobs "
                    "against the server's catalog, units, ranges, the memory budget) without "
                    "changing anything.")
    parser.add_argument("files", nargs="+", help="session definition or tuner config YAML files")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=lambda args: define.run_validate(args))
