"""``harmony workload app-setup|run`` and ``harmony capture``: the user's own workloads."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from pathlib import Path
from types import FrameType

from harmony_base.env import env_default
from harmony_base.errors import ConfigError
from workloads.apps import app_names, create_database, create_stat_statements, setup_app
from workloads.capture import capture
from workloads.cli import _add_dsn, _emit, _positive_float, _positive_int, _require_dsn
from workloads.replay import ReplayWorkload
from workloads.scripted import ScriptedWorkload


def _cmd_app_setup(args: argparse.Namespace) -> int:
    dsn = _require_dsn(args)
    if args.create_database:
        create_database(dsn)
    result = setup_app(dsn, args.app, args.scale)
    if args.stat_statements:
        create_stat_statements(dsn)
    verb = "reused" if result.reused else "loaded"
    print(f"{result.name} at scale {result.scale} {verb} in {result.seconds:.1f} s; database "
          f"{result.database_bytes / 2**20:.0f} MiB")
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    dsn = _require_dsn(args)
    if (args.replay is None) == (not args.file):
        raise ConfigError("give script files (file@weight ...) or --replay FILE, not both")
    variables = {}
    for item in args.define or []:
        name, eq, value = item.partition("=")
        if not eq:
            raise ConfigError(f"-D must be name=value, but got {item!r}")
        variables[name] = value
    workload: ScriptedWorkload | ReplayWorkload
    if args.replay is not None:
        workload = ReplayWorkload(dsn, args.replay, clients=args.clients, writes=args.writes)
    else:
        workload = ScriptedWorkload(dsn, args.file, clients=args.clients or 4,
                                    writes=args.writes, variables=variables)
    with workload:
        samples = [workload.sample(args.seconds) for _ in range(args.samples)]
    _emit(samples, {}, args.json, {})
    if not args.json:
        for sample in samples:
            for statement, seconds in sample.per_statement.items():
                print(f"  {statement}: {seconds * 1000:.2f} ms")
    return 0


def _cmd_capture(args: argparse.Namespace) -> int:
    dsn = _require_dsn(args)
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # unwinds through the capture, which restores the logging

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        result = capture(dsn, args.seconds, args.out,
                         log_file=Path(args.log_file) if args.log_file else None, stop=stop)
    finally:
        signal.signal(signal.SIGTERM, previous)
    replay = result.replay
    summary = {"out": str(args.out), "units": len(replay.units),
               "statements": len(replay.statements), "clients": replay.clients,
               "seconds": replay.seconds, "writes": replay.writes}
    print(json.dumps(summary) if args.json else
          f"captured {summary['units']} units of {summary['statements']} statements from "
          f"{replay.clients} sessions in {replay.seconds:.1f} s -> {args.out}"
          + (" (writes: replay with writes: true)" if replay.writes else ""))
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``harmony workload ...`` and ``harmony capture``."""
    workload = subparsers.add_parser("workload", help="example applications and the user's "
                                     "own SQL scripts or captures")
    sub = workload.add_subparsers(dest="workload_command", metavar="ACTION", required=True)
    setup = sub.add_parser("app-setup", help="create and load an example application")
    setup.add_argument("app", choices=app_names(), help="the application (workloads/apps)")
    _add_dsn(setup)
    setup.add_argument("--scale", type=_positive_int,
                       default=int(env_default("app_scale", "1") or 1),
                       help="size (shop: 10 000 customers, 20 000 orders per unit; env "
                            "HARMONY_APP_SCALE; default 1)")
    setup.add_argument("--create-database", action="store_true",
                       help="create the database the DSN names first, if it does not exist")
    setup.add_argument("--stat-statements", action="store_true",
                       help="also CREATE EXTENSION pg_stat_statements (the live mode reads "
                            "it; the server must preload the library)")
    setup.set_defaults(func=_cmd_app_setup)

    run = sub.add_parser("run", help="run pgbench scripts / .sql files or a replay file")
    _add_dsn(run)
    run.add_argument("file", nargs="*", help="pgbench scripts or .sql files, as file@weight")
    run.add_argument("--replay", type=Path, default=None, help="a harmony capture file")
    run.add_argument("--clients", type=_positive_int, default=None, help="connections")
    run.add_argument("--writes", action="store_true", help="allow INSERT/UPDATE/DELETE")
    run.add_argument("-D", "--define", action="append", help="a pgbench variable name=value")
    run.add_argument("--seconds", type=_positive_float, default=10.0, help="sample window (s)")
    run.add_argument("--samples", type=_positive_int, default=1, help="samples to take")
    run.add_argument("--json", action="store_true", help="print the samples as JSON")
    run.set_defaults(func=_cmd_run)

    cap = subparsers.add_parser(
        "capture", help="record a live workload into a replay file",
        description="Record the statements (with their parameters), the mix and the "
                    "concurrency of a live database for some seconds, from the server log. "
                    "The server's logging settings are changed with ALTER SYSTEM for the "
                    "capture only and restored afterwards, also on Ctrl-C or SIGTERM.")
    _add_dsn(cap)
    cap.add_argument("--seconds", type=_positive_float, required=True, help="how long")
    cap.add_argument("--out", type=Path, required=True, help="the replay file to write")
    cap.add_argument("--log-file", default=env_default("log_file"),
                     help="the server's log file on this machine, when logging_collector is "
                          "off (env HARMONY_LOG_FILE)")
    cap.add_argument("--json", action="store_true", help="print the summary as JSON")
    cap.set_defaults(func=_cmd_capture)
