"""``harmony restore``: put a server back from the restore journal a dead run left, and nothing
else (:mod:`tuner_client.crashsafe`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from harmony_base.errors import ConfigError, HarmonyError
from harmony_base.lazy import LazyModule

if TYPE_CHECKING:
    import tuner_client.config as tuner_config
    import tuner_client.crashsafe.clones as clones
    import tuner_client.crashsafe.journal as journal
    import tuner_client.crashsafe.recovery as recovery
    import tuner_client.crashsafe.run as run
else:  # imported when the command runs: ``harmony restore --help`` needs none of them
    tuner_config = LazyModule("tuner_client.config")
    clones = LazyModule("tuner_client.crashsafe.clones")
    journal = LazyModule("tuner_client.crashsafe.journal")
    recovery = LazyModule("tuner_client.crashsafe.recovery")
    run = LazyModule("tuner_client.crashsafe.run")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``harmony restore``."""
    parser = subparsers.add_parser(
        "restore", help="put a server back to its configuration before a tuning run that died",
        description="Restore the original configuration of the servers whose restore journal "
                    "a tuning run left behind (it died before putting them back: kill -9, the "
                    "OOM killer, a reboot). Nothing else is done; a journal whose run still "
                    "lives is skipped, one whose server was changed by hand since is reported "
                    "and not applied (unless --force).")
    parser.add_argument("config", type=Path, nargs="?",
                        help="the tuner config of the run (its server's journal); omit with "
                             "--all")
    parser.add_argument("--all", action="store_true",
                        help="every journal in the journal directory (e.g. at boot)")
    parser.add_argument("--check", action="store_true",
                        help="report what would be restored; change nothing")
    parser.add_argument("--force", action="store_true",
                        help="restore even where postgresql.auto.conf was changed by hand since, "
                             "or the run was on another host")
    parser.add_argument("--journal-dir", type=Path, default=None,
                        help="where the journals are (env HARMONY_JOURNAL_DIR; default "
                             "/var/tmp/harmony-<uid>/journals)")
    parser.add_argument("--state-dir", type=Path,
                        default=os.environ.get("HARMONY_STATE_DIR") or None,
                        help="the embedded cluster's state directory, as given to harmony tune")
    parser.set_defaults(func=run_restore)


def run_restore(args: argparse.Namespace) -> int:
    """Entry point of ``harmony restore``; the CLI maps errors to exit codes."""
    if (args.config is None) == (not args.all):
        raise ConfigError("harmony restore: give a tuner config, or --all for every journal")
    directory = args.journal_dir or journal.journal_dir()
    for path in clones.clone_paths(directory):  # a dead run's scratch clones: nothing to keep
        record = clones.load_clone_record(path)
        if not record.owner_alive():
            print(f"{record.describe()}: its run ended"
                  + ("; would be removed" if args.check else
                     "; removed" if clones.remove_clone(record) else "; NOT removed"))
    if args.all:
        journals = journal.find_journals(directory)
    else:
        config = tuner_config.load_tuner_config(args.config)
        state_dir = Path(args.state_dir) / config.name if args.state_dir else None
        # the server's journal, and the duet's twin's when the config names one
        journals = [j for key in run.config_keys(config, state_dir)
                    for j in journal.find_journals(directory, key)]
    if not journals:
        print(f"nothing to restore: no restore journal in {directory}"
              + ("" if args.all else f" for {args.config}"))
        return 0
    failed = 0
    for leftover in journals:
        print(leftover.describe())
        if leftover.owner.alive() and (leftover.owner.here or not args.force):
            print("  skipped: its run is still alive (its guard restores the server when "
                  "it ends)" if leftover.owner.here else
                  f"  skipped: its run was on host {leftover.owner.host}, where it may still "
                  "be alive; --force restores anyway")
            continue
        report = recovery.inspect(leftover) if args.check else \
            recovery.recover(leftover, force=args.force)
        print(report.text())
        failed += not report.ok
    if failed:
        raise HarmonyError(f"{failed} of {len(journals)} journal(s) not restored; see above")
    return 0
