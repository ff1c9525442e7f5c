"""CLI subcommands ``harmony server`` and ``harmony sessions``.

Every option can also come from the environment: ``HARMONY_HOST``, ``HARMONY_PORT``,
``HARMONY_STORE``, ``HARMONY_STATE_DIR``, ``HARMONY_TOKEN_FILE``, ``HARMONY_SERVER``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

from harmony.errors import ConfigError, HarmonyError
from harmony_server.server import DEFAULT_PORT

logger = logging.getLogger(__name__)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name} must be an integer port, got {raw!r}") \
            from None


def add_parser(subparsers: Any) -> None:
    """Register ``server`` and ``sessions`` on the ``harmony`` command's subparsers."""
    server = subparsers.add_parser(
        "server", help="run the session server",
        description="Run the Harmony session server (HTTP/JSON API, durable store).")
    server.add_argument("--host", default=os.environ.get("HARMONY_HOST", "127.0.0.1"),
                        help="address to bind (default 127.0.0.1; env HARMONY_HOST)")
    server.add_argument("--port", type=int, default=None,
                        help=f"TCP port, 0 for any free one (default {DEFAULT_PORT}; env "
                             "HARMONY_PORT)")
    server.add_argument("--store", default=os.environ.get("HARMONY_STORE"),
                        help="store URL: sqlite:///path or postgresql://user@host/db (default: "
                             "SQLite file in the state dir; env HARMONY_STORE)")
    server.add_argument("--state-dir", default=os.environ.get("HARMONY_STATE_DIR", "state"),
                        help="directory for the default SQLite store (default ./state; env "
                             "HARMONY_STATE_DIR)")
    server.add_argument("--token-file", default=os.environ.get("HARMONY_TOKEN_FILE"),
                        help="file holding a bearer token clients must send (env "
                             "HARMONY_TOKEN_FILE)")
    server.set_defaults(func=run_server_command)

    sessions = subparsers.add_parser(
        "sessions", help="list the sessions of a server with their best results")
    sessions.add_argument("--server", default=os.environ.get(
        "HARMONY_SERVER", f"http://127.0.0.1:{DEFAULT_PORT}"),
        help="server URL (env HARMONY_SERVER)")
    sessions.add_argument("--token-file", default=os.environ.get("HARMONY_TOKEN_FILE"),
                          help="file holding the bearer token (env HARMONY_TOKEN_FILE)")
    sessions.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sessions.set_defaults(func=list_sessions_command)


def run_server_command(args: argparse.Namespace) -> int:
    """``harmony server``: serve until SIGINT/SIGTERM."""
    from harmony_server.server import run_server

    port = args.port if args.port is not None else _env_int("HARMONY_PORT", DEFAULT_PORT)
    run_server(args.host, port, args.store, args.token_file, state_dir=args.state_dir)
    return 0


def list_sessions_command(args: argparse.Namespace) -> int:
    """``harmony sessions``: a table (or JSON) of sessions and their best results."""
    from harmony_server.server import read_token_file
    from tuner_client.client import connect

    token = read_token_file(args.token_file) if args.token_file else None
    with connect(args.server, token=token) as client:
        rows = client.list_sessions()
    if args.json:
        json.dump(rows, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(format_sessions_table(rows))
    return 0


def format_sessions_table(rows: list[dict[str, Any]]) -> str:
    """A plain-text table: name, status, strategy, trials, best value and point."""
    header = ("NAME", "STATUS", "STRATEGY", "TRIALS", "GOAL", "BEST", "BEST POINT")
    lines = [header]
    for r in rows:
        best = r.get("best")
        lines.append((
            str(r["name"]), str(r.get("status", "")), str(r.get("strategy", "")),
            str(r.get("trials", "")), str(r.get("goal", "")),
            f"{best['value']:.6g}" if best else "-",
            ", ".join(f"{k}={v}" for k, v in best["point"].items()) if best else "-"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header) - 1)]
    out = []
    for line in lines:
        out.append("  ".join(c.ljust(w) for c, w in zip(line[:-1], widths, strict=True))
                   + "  " + line[-1])
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m harmony_server``: the ``server`` subcommand on its own."""
    parser = argparse.ArgumentParser(prog="python -m harmony_server")
    sub = parser.add_subparsers(dest="command")
    add_parser(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("server", "sessions"):
        argv = ["server", *argv]
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("HARMONY_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except HarmonyError as exc:
        sys.stderr.write(f"harmony: error: {exc}\n")
        return 2
