"""CLI subcommand ``harmony server`` (``harmony sessions``, a client, lives in tuner_client).

Every option can also come from the environment: ``HARMONY_HOST``, ``HARMONY_PORT``,
``HARMONY_STORE``, ``HARMONY_STATE_DIR``, ``HARMONY_TOKEN_FILE``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import TYPE_CHECKING

from harmony_base.errors import ConfigError, HarmonyError
from harmony_base.lazy import LazyModule
from harmony_server.ports import DEFAULT_PORT

if TYPE_CHECKING:
    import harmony_server.server as server
else:
    # aiohttp and SQLAlchemy load when the server starts, not for ``harmony server --help``
    server = LazyModule("harmony_server.server")

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


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``server`` on the ``harmony`` command's subparsers."""
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


def run_server_command(args: argparse.Namespace) -> int:
    """``harmony server``: serve until SIGINT/SIGTERM."""
    port = args.port if args.port is not None else _env_int("HARMONY_PORT", DEFAULT_PORT)
    server.run_server(args.host, port, args.store, args.token_file, state_dir=args.state_dir)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m harmony_server``: the ``server`` subcommand on its own."""
    parser = argparse.ArgumentParser(prog="python -m harmony_server")
    sub = parser.add_subparsers(dest="command")
    add_parser(sub)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "server":
        argv = ["server", *argv]
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("HARMONY_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args))
    except HarmonyError as exc:
        sys.stderr.write(f"harmony: error: {exc}\n")
        return 2
