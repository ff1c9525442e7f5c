"""CLI subcommand ``harmony report``: a session's HTML report with its PNGs.

``harmony report SESSION [--store URL | --server URL | --from-xml FILE] [--out DIR]
[--comparison FILE.json] [--bme FILE.json]``; the source defaults as for ``harmony export``.
A server-side tool like ``harmony export`` (it may open the store); the page itself is drawn by
:mod:`harmony.report`, which knows nothing of where the session came from.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from harmony.base.errors import ConfigError
from harmony.cli.priordata import add_source_options, read_prior
from harmony.core.priordata import load

logger = logging.getLogger(__name__)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``report`` on the ``harmony`` command's subparsers."""
    report = subparsers.add_parser(
        "report", help="write a session's HTML report (tuning curve, knobs, comparison, BME)",
        description="Write a self-contained HTML page (PNGs embedded, and written beside it) "
                    "with the tuning curve, knob trajectories, the default vs recommended vs "
                    "tuned comparison and the buffer miss equation fit.")
    report.add_argument("session", help="session name")
    add_source_options(report)
    report.add_argument("--from-xml", default=None, metavar="FILE",
                        help="read the session from an exported file (XML, or CSV/text log) "
                             "instead of a store or server")
    report.add_argument("--out", default=None,
                        help="output directory (default ./report-SESSION)")
    report.add_argument("--comparison", default=None, metavar="FILE.json",
                        help='throughputs to compare, e.g. {"default": 1200, "recommended": '
                             '2100, "tuned": 4800} (default: the session metadata\'s)')
    report.add_argument("--bme", default=None, metavar="FILE.json",
                        help="BME fit: p_star, p_c, m_b, m_star (bytes), optional r2 and points "
                             "[[bytes, miss], ...] (default: the session metadata's)")
    report.set_defaults(func=report_command)


def _json_file(path: str | None, what: str) -> Any:
    if path is None:
        return None
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"--{what} {path}: cannot read it: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"--{what} {path}: malformed JSON: {exc}") from None


def report_command(args: argparse.Namespace) -> int:
    """``harmony report``: read the session, write ``DIR/report.html`` and the PNGs."""
    from harmony.report import write_report

    if args.from_xml is not None:
        if args.store is not None or args.server is not None:
            raise ConfigError("--from-xml reads a file; do not combine it with --store/--server")
        prior = load(args.from_xml)
        if prior.name != args.session:
            raise ConfigError(f"--from-xml {args.from_xml} holds session {prior.name!r}, not "
                              f"{args.session!r}")
    else:
        prior = read_prior(args, args.session)
    out = Path(args.out) if args.out else Path(f"report-{prior.name}")
    page = write_report(prior, out, comparison=_json_file(args.comparison, "comparison"),
                        bme=_json_file(args.bme, "bme"))
    print(f"wrote {page}")
    return 0
