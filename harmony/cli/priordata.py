"""CLI subcommands ``harmony export`` and ``harmony import`` (prior data files).

Server-side tools: they open the server's store (``--store`` / ``--state-dir``), which only
``harmony_server`` may do; ``--server URL`` reads a running server over HTTP instead.

``harmony export SESSION [--store URL | --server URL] [--format xml|csv|text|all] [--out PATH]``
writes a session's trials and metadata; ``harmony import FILE... [--store URL] [--rename NAME]``
stores prior data files as ``imported`` sessions (for reports and warm starts). Options also
come from ``HARMONY_STORE``, ``HARMONY_SERVER``, ``HARMONY_STATE_DIR``, ``HARMONY_TOKEN_FILE``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from harmony_base.errors import ConfigError
from harmony_base.lazy import LazyModule
from harmony_base.tokens import read_token_file

if TYPE_CHECKING:
    import harmony_core.priordata as prior_files
    import harmony_server.priordata_store as prior_store
    import harmony_server.store as server_store
    import tuner_client.api.priordata_remote as prior_remote
    from harmony_core.priordata import PriorSession
    from harmony_server.store import Store
else:
    # the store (SQLAlchemy), the HTTP client and the formats load when a command runs, not
    # for ``--help``
    prior_files = LazyModule("harmony_core.priordata")
    prior_store = LazyModule("harmony_server.priordata_store")
    server_store = LazyModule("harmony_server.store")
    prior_remote = LazyModule("tuner_client.api.priordata_remote")

#: the keys of :data:`harmony_core.priordata.FORMATS`, for ``--help`` (a test keeps them equal)
FORMAT_NAMES = ("xml", "csv", "text")

logger = logging.getLogger(__name__)


def add_source_options(parser: argparse.ArgumentParser, *, server: bool = True) -> None:
    """``--store URL`` / ``--server URL`` (exclusive), ``--state-dir``, ``--token-file``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--store", default=None,
                       help="store URL, sqlite:///path or postgresql://... (env HARMONY_STORE; "
                            "default: the SQLite store in --state-dir)")
    if server:
        group.add_argument("--server", default=None,
                           help="URL of a running server to read from (env HARMONY_SERVER)")
        parser.add_argument("--token-file", default=os.environ.get("HARMONY_TOKEN_FILE"),
                            help="bearer token file for --server (env HARMONY_TOKEN_FILE)")
    parser.add_argument("--state-dir", default=os.environ.get("HARMONY_STATE_DIR", "state"),
                        help="directory of the default SQLite store (env HARMONY_STATE_DIR; "
                             "default ./state)")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``export`` and ``import`` on the ``harmony`` command's subparsers."""
    export = subparsers.add_parser(
        "export", help="export a session's trials and metadata (XML, CSV, text log)",
        description="Export a session's trials and metadata (definition, hosts, parameters "
                    "and ranges, start time) as XML, CSV or a text log.")
    export.add_argument("session", help="session name")
    add_source_options(export)
    export.add_argument("--format", choices=[*FORMAT_NAMES, "all"], default=None,
                        help="xml, csv, text or all (default: from --out's extension, else xml)")
    export.add_argument("--out", default=None,
                        help="output file, or a directory with --format all, or - for stdout "
                             "(default ./SESSION.xml)")
    export.set_defaults(func=export_command)

    imp = subparsers.add_parser(
        "import", help="store prior data files as sessions (for reports and warm starts)",
        description="Read prior data files (format detected from the content) and store each "
                    "as an 'imported' session, which the server does not run but reports and "
                    "warm starts use.")
    imp.add_argument("files", nargs="+", help="prior data files (.xml, .csv, .log)")
    add_source_options(imp, server=False)
    imp.add_argument("--rename", default=None,
                     help="store the (single) imported session under this name")
    imp.set_defaults(func=import_command)


def store_url(args: argparse.Namespace) -> str:
    """The store named by ``--store``, ``HARMONY_STORE``, or the default in the state dir."""
    return (args.store or os.environ.get("HARMONY_STORE")
            or server_store.default_store_url(args.state_dir))


@contextmanager
def open_store(args: argparse.Namespace, *, must_exist: bool = True) -> Iterator[Store]:
    """The server's store, opened for the length of one command."""
    url = store_url(args)
    if must_exist and url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///"):])
        if not path.exists():
            raise ConfigError(f"no store at {path}: pass --store URL, --server URL, or the "
                              f"--state-dir the server used")
    store = server_store.Store(url)
    try:
        yield store
    finally:
        store.close()


def read_prior(args: argparse.Namespace, name: str) -> PriorSession:
    """Session ``name`` from ``--server`` (or HARMONY_SERVER when no --store) or the store."""
    server = getattr(args, "server", None)
    if server is None and args.store is None and not os.environ.get("HARMONY_STORE"):
        server = os.environ.get("HARMONY_SERVER")
    if server:
        token = read_token_file(args.token_file) if getattr(args, "token_file", None) else None
        return prior_remote.prior_from_server(server, name, token=token)
    with open_store(args) as store:
        return prior_store.prior_from_store(store, name)


def export_command(args: argparse.Namespace) -> int:
    """``harmony export``: write one session in one or all formats."""
    prior = read_prior(args, args.session)
    if args.out == "-":
        sys.stdout.write(prior_files.dumps(prior, args.format if args.format not in (None, "all")
                               else "xml"))
        return 0
    if args.format == "all":
        directory = Path(args.out or ".")
        for fmt, ext in prior_files.FORMATS.items():
            path = prior_files.dump(prior, directory / f"{prior.name}{ext}", fmt)
            print(f"wrote {path}")
        return 0
    if args.out is None:
        fmt = args.format or "xml"
        out = Path(f"{prior.name}{prior_files.FORMATS[fmt]}")
    else:
        out = Path(args.out)
        fmt = args.format or prior_files.format_for_path(out)
    path = prior_files.dump(prior, out, fmt)
    print(f"wrote {path} ({len(prior.trials)} trials, {fmt})")
    return 0


def import_command(args: argparse.Namespace) -> int:
    """``harmony import``: store each file as an ``imported`` session."""
    if args.rename and len(args.files) > 1:
        raise ConfigError("--rename takes a single file; got "
                          f"{len(args.files)} files")
    priors = [prior_files.load(f) for f in args.files]  # read them all before writing any
    with open_store(args, must_exist=False) as store:
        for prior in priors:
            name = prior_store.import_into_store(store, prior, name=args.rename)
            print(f"imported {name} ({len(prior.trials)} trials)")
    return 0
