"""``harmony workload ...`` and ``harmony capture``: the options and help; the commands run from
:mod:`workloads.user_cli`, imported only when one runs (``--help`` needs no psycopg).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from harmony.cli.tpch_parser import add_dsn, positive_float, positive_int
from harmony_base.env import env_default
from harmony_base.lazy import LazyModule

if TYPE_CHECKING:
    import workloads.user_cli as workload_commands
else:
    workload_commands = LazyModule("workloads.user_cli")


def app_names() -> list[str]:
    """The shipped example applications, as :func:`workloads.apps.app_names` lists them, found
    without running the ``workloads`` package (it loads psycopg)."""
    spec = importlib.util.find_spec("workloads")
    if spec is None or spec.origin is None:
        return []
    apps = Path(spec.origin).parent / "apps"
    return sorted(p.parent.name for p in apps.glob("*/schema.sql"))


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``harmony workload ...`` and ``harmony capture``."""
    workload = subparsers.add_parser("workload", help="example applications and the user's "
                                     "own SQL scripts or captures")
    sub = workload.add_subparsers(dest="workload_command", metavar="ACTION", required=True)
    setup = sub.add_parser("app-setup", help="create and load an example application")
    setup.add_argument("app", choices=app_names(), help="the application (workloads/apps)")
    add_dsn(setup)
    setup.add_argument("--scale", type=positive_int,
                       default=int(env_default("app_scale", "1") or 1),
                       help="size (shop: 10 000 customers, 20 000 orders per unit; env "
                            "HARMONY_APP_SCALE; default 1)")
    setup.add_argument("--create-database", action="store_true",
                       help="create the database the DSN names first, if it does not exist")
    setup.add_argument("--stat-statements", action="store_true",
                       help="also CREATE EXTENSION pg_stat_statements (the live mode reads "
                            "it; the server must preload the library)")
    setup.set_defaults(func=lambda args: workload_commands.cmd_app_setup(args))

    run = sub.add_parser("run", help="run pgbench scripts / .sql files or a replay file")
    add_dsn(run)
    run.add_argument("file", nargs="*", help="pgbench scripts or .sql files, as file@weight")
    run.add_argument("--replay", type=Path, default=None, help="a harmony capture file")
    run.add_argument("--clients", type=positive_int, default=None, help="connections")
    run.add_argument("--writes", action="store_true", help="allow INSERT/UPDATE/DELETE")
    run.add_argument("-D", "--define", action="append", help="a pgbench variable name=value")
    run.add_argument("--seconds", type=positive_float, default=10.0, help="sample window (s)")
    run.add_argument("--samples", type=positive_int, default=1, help="samples to take")
    run.add_argument("--json", action="store_true", help="print the samples as JSON")
    run.set_defaults(func=lambda args: workload_commands.cmd_run(args))

    cap = subparsers.add_parser(
        "capture", help="record a live workload into a replay file",
        description="Record the statements (with their parameters), the mix and the "
                    "concurrency of a live database for some seconds, from the server log. "
                    "The server's logging settings are changed with ALTER SYSTEM for the "
                    "capture only and restored afterwards, also on Ctrl-C or SIGTERM.")
    add_dsn(cap)
    cap.add_argument("--seconds", type=positive_float, required=True, help="how long")
    cap.add_argument("--out", type=Path, required=True, help="the replay file to write")
    cap.add_argument("--log-file", default=env_default("log_file"),
                     help="the server's log file on this machine, when logging_collector is "
                          "off (env HARMONY_LOG_FILE)")
    cap.add_argument("--json", action="store_true", help="print the summary as JSON")
    cap.set_defaults(func=lambda args: workload_commands.cmd_capture(args))
