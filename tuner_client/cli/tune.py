"""``harmony tune CONFIG.yaml``: the options and help; the run is :mod:`tuner_client.cli.tune_run`,
imported only when it starts (``harmony tune --help`` needs none of the tuner).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from harmony_base.lazy import LazyFunction, LazyModule
from tuner_client.metrics.options import add_metrics_arguments

if TYPE_CHECKING:
    import tuner_client.cli.tune_run as tune_run
else:
    tune_run = LazyModule("tuner_client.cli.tune_run")


def _env(name: str) -> str | None:
    return os.environ.get(f"HARMONY_{name.upper()}")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``harmony tune``."""
    parser = subparsers.add_parser(
        "tune", help="tune a PostgreSQL server for a workload (one-pass or multi-pass flow)",
        description="Run the tuning flow a config file describes: offline session "
                    "(shared_buffers, restarts) then online session (reloadable knobs), "
                    "default vs best measured interleaved at the end, ALTER SYSTEM statements "
                    "written. Without a DSN in the config, an embedded local cluster with a "
                    "small TPC-H database is used.")
    parser.add_argument("config", type=Path, help="tuner config YAML (see configs/)")
    parser.add_argument("--server", default=_env("server"),
                        help="URL of a harmony server to host the sessions (env HARMONY_SERVER; "
                             "default: the config's server, else standalone in-process)")
    parser.add_argument("--state-dir", type=Path, default=_env("state_dir"),
                        help="where the embedded cluster lives (env HARMONY_STATE_DIR; default "
                             "/var/tmp/harmony-<uid>/<config name>)")
    parser.add_argument("--output", type=Path, default=_env("output"),
                        help="directory for alter_system.sql, postgresql.conf.fragment, "
                             "trials.jsonl, summary.json (env HARMONY_OUTPUT; default "
                             "./harmony-out/<config name>)")
    parser.add_argument("--replica", default=_env("replica"), metavar="NAME",
                        help="join a run over several replicas as replica NAME: measure the "
                             "replicated sessions the coordinator opens on --server on this "
                             "config's database, and decide nothing (env HARMONY_REPLICA)")
    parser.add_argument("--replica-idle", type=float, default=600.0, metavar="SECONDS",
                        help="with --replica: stop after this long without a session to join "
                             "(default 600)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--plan", action="store_true",
                        help="change nothing: connect read-only, print what the run would do "
                             "(knobs per phase, ranges after the memory budget, restarts, time, "
                             "screening, what is held, knobs the workload's statistics point "
                             "at) and write it to OUTPUT/plan.json")
    add_metrics_arguments(parser)
    parser.set_defaults(func=LazyFunction(tune_run, "run_tune"))
