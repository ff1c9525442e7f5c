"""``harmony demo``: a short real tuning run on the embedded default, default vs tuned.

Starts (or reuses) a private PostgreSQL cluster, loads a tiny TPC-H database, runs the
one-pass flow of ``configs/tpch-demo.yaml`` (kept here too, so an installed package needs
no repository checkout) and prints the default and tuned throughput.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from harmony_base.lazy import LazyModule
from tuner_client.metrics.options import add_metrics_arguments

if TYPE_CHECKING:
    import tuner_client.cli.tune_run as tune_run
    import tuner_client.config as tuner_config
    import tuner_client.servers.pg_binaries as pg_binaries
    from tuner_client.config import TunerConfig
else:
    # the tuner loads when the demo runs, not for ``harmony demo --help``
    tuner_config = LazyModule("tuner_client.config")
    tune_run = LazyModule("tuner_client.cli.tune_run")
    pg_binaries = LazyModule("tuner_client.servers.pg_binaries")

#: the demo's tuner config (identical to configs/tpch-demo.yaml; a test keeps them equal)
DEMO_CONFIG_YAML = Path(__file__).resolve().parents[2] / "configs" / "tpch-demo.yaml"

_FALLBACK_YAML = """\
name: tpch-demo
description: short one-pass demo on the embedded cluster; prints default vs tuned throughput
seed: 1
workload:
  tpch: {scale: 0.01, mix: "2Q1,2Q6,1Q13"}
  statement_timeout_s: 60
measure: {warmup_s: 0.3, samples: 3, aggregate: best, queries: 60, slice_s: 1,
          per_transaction_s: 10}
budget: {os_reserved: 256MB, connections: auto}
offline:
  knobs:
    shared_buffers: {min: 16MB, max: 256MB, step: 8MB}
  strategy: {name: nelder-mead, options: {simplex_size: 2}}
  evaluations: 3
online:
  knobs:
    work_mem: {min: 1MB, max: 64MB, step: 1MB}
    random_page_cost: {min: 0.5, max: 8, step: 0.5}
    max_parallel_workers_per_gather: {min: 0, max: 2}
    jit: {values: [off, on]}
  strategy: {name: nelder-mead, options: {simplex_size: 5}}
  evaluations: 8
flow: {kind: one-pass}
final: {rounds: 2, max_rounds: 4, max_seconds: 30, restart_seconds: 80}
bme: {probe_seconds: 1}
"""


def demo_config() -> TunerConfig:
    """The demo's config: the repository's YAML when present, else the built-in copy."""
    if DEMO_CONFIG_YAML.exists():
        return tuner_config.parse_tuner_config(DEMO_CONFIG_YAML.read_text(),
                                               source=str(DEMO_CONFIG_YAML))
    return tuner_config.parse_tuner_config(_FALLBACK_YAML, source="built-in demo config")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``harmony demo``."""
    parser = subparsers.add_parser(
        "demo", help="a short real tuning run on an embedded PostgreSQL (a few minutes)",
        description="Start a private PostgreSQL with a tiny TPC-H database, tune it for a few "
                    "minutes, and print default vs tuned throughput.")
    parser.add_argument("--state-dir", type=Path, default=os.environ.get("HARMONY_STATE_DIR"),
                        help="where the embedded cluster lives (env HARMONY_STATE_DIR)")
    parser.add_argument("--output", type=Path, default=os.environ.get("HARMONY_OUTPUT"),
                        help="output directory (env HARMONY_OUTPUT; default ./harmony-out/demo)")
    parser.add_argument("--server", default=os.environ.get("HARMONY_SERVER"),
                        help="harmony server URL (env HARMONY_SERVER; default standalone)")
    add_metrics_arguments(parser)
    parser.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    """Entry point of ``harmony demo``."""
    config = demo_config()
    output = args.output or Path("harmony-out") / "demo"
    bin_dir = pg_binaries.find_bin_dir(config.database.bin_dir)
    print(f"demo: PostgreSQL {pg_binaries.server_version(bin_dir)} ({bin_dir})", flush=True)
    result = tune_run.run_with_metrics(config, args, output)
    print(tune_run.format_result(result))
    throughput = result.best.throughput
    if throughput.best is not None and throughput.default is not None:
        print(f"\ndemo: default {throughput.default:.1f} qpm, tuned {throughput.best:.1f} qpm "
              f"({100 * (result.improvement or 0.0):+.1f}%)")
    return 0
