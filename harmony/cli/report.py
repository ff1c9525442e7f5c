"""CLI subcommand ``harmony report``: a session's HTML report with its PNGs.

``harmony report SESSION [--store URL | --server URL | --from-xml FILE] [--out DIR]
[--summary summary.json] [--comparison FILE.json] [--bme FILE.json]``; the source defaults as
for ``harmony export``. A session exported by ``harmony tune`` (``OUT/sessions/NAME.xml``) is
drawn with its run's ``OUT/summary.json`` when that file is there. A server-side tool like
``harmony export`` (it may open the store); the page itself is drawn by
:mod:`harmony_report`, which knows nothing of where the session came from.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harmony.cli.priordata import add_source_options, read_prior
from harmony_base.errors import ConfigError
from harmony_base.lazy import LazyModule

if TYPE_CHECKING:
    import harmony_core.priordata as prior_files
    import harmony_report as report_pages
else:
    # matplotlib loads when a report is drawn, not for ``harmony report --help``
    prior_files = LazyModule("harmony_core.priordata")
    report_pages = LazyModule("harmony_report")

logger = logging.getLogger(__name__)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``report`` on the ``harmony`` command's subparsers."""
    report = subparsers.add_parser(
        "report", help="write a session's HTML report (verdict, race, comparison, curve, BME)",
        description="Write a self-contained HTML page (PNGs embedded, and written beside it) "
                    "opening with the run's verdict, then the final comparison with its "
                    "intervals, the race round by round, the tuning curve in one unit, the "
                    "knob trajectories, the screening, the buffer miss equation fit, the "
                    "guardrail trips and the replicas, each where it applies.")
    report.add_argument("session", help="session name")
    add_source_options(report)
    report.add_argument("--from-xml", default=None, metavar="FILE",
                        help="read the session from an exported file (XML, or CSV/text log) "
                             "instead of a store or server")
    report.add_argument("--out", default=None,
                        help="output directory (default ./report-SESSION)")
    report.add_argument("--summary", default=None, metavar="summary.json",
                        help="the tuning run's summary.json: the decision, its intervals, the "
                             "race and every paired measurement (default: the summary.json "
                             "beside --from-xml's sessions/ directory, when there is one)")
    report.add_argument("--comparison", default=None, metavar="FILE.json",
                        help='means to compare without intervals, e.g. {"default": 1200, '
                             '"tuned": 4800}; a summary.json here counts as --summary '
                             "(default: the session metadata's)")
    report.add_argument("--bme", default=None, metavar="FILE.json",
                        help="BME fit: p_star, p_c, m_b, m_star (bytes), optional r2 and points "
                             "[[bytes, miss], ...] (default: the session metadata's)")
    report.set_defaults(func=report_command)


def _json_file(path: str | Path | None, what: str) -> Any:
    if path is None:
        return None
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigError(f"--{what} {path}: cannot read it: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"--{what} {path}: malformed JSON: {exc}") from None


def run_summary_beside(exported: str | Path) -> Path | None:
    """The summary.json of the run that exported ``OUT/sessions/NAME.xml``, if it is there."""
    path = Path(exported).resolve()
    candidate = path.parent.parent / "summary.json"
    return candidate if path.parent.name == "sessions" and candidate.is_file() else None


def report_command(args: argparse.Namespace) -> int:
    """``harmony report``: read the session, write ``DIR/report.html`` and the PNGs."""
    summary_path: str | Path | None = args.summary
    if args.from_xml is not None:
        if args.store is not None or args.server is not None:
            raise ConfigError("--from-xml reads a file; do not combine it with --store/--server")
        prior = prior_files.load(args.from_xml)
        if prior.name != args.session:
            raise ConfigError(f"--from-xml {args.from_xml} holds session {prior.name!r}, not "
                              f"{args.session!r}")
        if summary_path is None and args.comparison is None:
            summary_path = run_summary_beside(args.from_xml)
            if summary_path is not None:
                logger.info("drawing the run's decision from %s", summary_path)
    else:
        prior = read_prior(args, args.session)
    out = Path(args.out) if args.out else Path(f"report-{prior.name}")
    page = report_pages.write_report(prior, out,
                                     comparison=_json_file(args.comparison, "comparison"),
                                     bme=_json_file(args.bme, "bme"),
                                     summary=_json_file(summary_path, "summary"))
    print(f"wrote {page}")
    return 0
