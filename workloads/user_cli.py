"""``harmony workload app-setup|run`` and ``harmony capture``: the user's own workloads."""

from __future__ import annotations

import argparse
import json
import signal
import threading
from pathlib import Path
from types import FrameType

from harmony_base.errors import ConfigError
from workloads.apps import create_database, create_stat_statements, setup_app
from workloads.capture import capture
from workloads.cli import _emit, _require_dsn
from workloads.replay import ReplayWorkload
from workloads.scripted import ScriptedWorkload


def cmd_app_setup(args: argparse.Namespace) -> int:
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


def cmd_run(args: argparse.Namespace) -> int:
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


def cmd_capture(args: argparse.Namespace) -> int:
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
