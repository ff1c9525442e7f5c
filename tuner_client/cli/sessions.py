"""CLI subcommand ``harmony sessions``: a client that lists a server's sessions."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, Any

from harmony_base.lazy import LazyModule
from harmony_base.tokens import read_token_file

if TYPE_CHECKING:
    import tuner_client.api.client as client_api
else:
    # the HTTP client loads when the command runs, not for ``harmony sessions --help``
    client_api = LazyModule("tuner_client.api.client")

#: the server's default port (``harmony server --port``)
DEFAULT_SERVER = "http://127.0.0.1:1979"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``sessions`` on the ``harmony`` command's subparsers."""
    sessions = subparsers.add_parser(
        "sessions", help="list the sessions of a server with their best results")
    sessions.add_argument("--server", default=os.environ.get(
        "HARMONY_SERVER", DEFAULT_SERVER),
        help="server URL (env HARMONY_SERVER)")
    sessions.add_argument("--token-file", default=os.environ.get("HARMONY_TOKEN_FILE"),
                          help="file holding the bearer token (env HARMONY_TOKEN_FILE)")
    sessions.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sessions.set_defaults(func=list_sessions_command)


def list_sessions_command(args: argparse.Namespace) -> int:
    """``harmony sessions``: a table (or JSON) of sessions and their best results."""
    token = read_token_file(args.token_file) if args.token_file else None
    with client_api.connect(args.server, token=token) as client:
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
