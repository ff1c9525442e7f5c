"""``harmony tpch load|run|queries`` and ``harmony pgbench run``: the workloads on their own."""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Any

from harmony_base.env import env_default
from harmony_base.errors import ConfigError, WorkloadError
from workloads.driver import WorkloadDriver
from workloads.mix import parse_mix
from workloads.pgbench import PgbenchWorkload
from workloads.sample import Sample
from workloads.schedule import ScheduledDriver, parse_schedule
from workloads.tpch.load import LoadProgress, load_tpch
from workloads.tpch.queries import QUERY_NAMES, make_query, query_name, validation_query


def _as_config_error(exc: WorkloadError) -> ConfigError:
    return ConfigError(str(exc))


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number > 0, but got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number > 0, but got {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def _add_dsn(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dsn", default=env_default("dsn"),
        help="libpq connection string of the database (env HARMONY_DSN)",
    )  # fmt: skip


def _require_dsn(args: argparse.Namespace) -> str:
    if not args.dsn:
        raise ConfigError("--dsn (or HARMONY_DSN) must name the database, but none was given")
    return str(args.dsn)


def _print_progress(event: LoadProgress) -> None:
    if event.phase == "copy":
        rows = f", {event.rows} rows" if event.rows is not None else ""
        print(f"  copy {event.table}: {event.bytes_copied / 1e6:.1f} MB{rows}", file=sys.stderr)
    elif event.phase == "index":
        print(f"  index {event.table}", file=sys.stderr)
    elif event.phase in ("generate", "analyze"):
        print(f"  {event.phase}", file=sys.stderr)


def _cmd_load(args: argparse.Namespace) -> int:
    dsn = _require_dsn(args)
    if not args.scale > 0:
        raise ConfigError(f"--scale must be > 0, but got {args.scale}")
    result = load_tpch(
        dsn, args.scale, workdir=args.workdir, replace=args.replace,
        progress=None if args.json else _print_progress,
    )  # fmt: skip
    if args.json:
        print(json.dumps(result.__dict__, indent=2))
    else:
        verb = "reused" if result.reused else "loaded"
        print(
            f"TPC-H scale {result.scale:g} {verb} in {result.seconds:.1f} s; database "
            f"{result.database_bytes / 2**20:.0f} MiB; rows: "
            + ", ".join(f"{t} {n}" for t, n in result.rows.items())
        )
    return 0


def _format_sample(sample: Sample, streams: dict[str, int]) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:.1f}"

    lines = [
        f"mix {sample.mix}: {sample.completed} queries in {sample.seconds:.1f} s = "
        f"{sample.qpm:.1f} queries/min, {sample.errors} errors",
        f"{'query':>6} {'streams':>7} {'done':>6} {'errors':>6} {'qpm':>9} "
        f"{'p50 ms':>9} {'p95 ms':>9} {'p99 ms':>9}",
    ]
    for query, stats in sample.per_query.items():
        lines.append(
            f"{query:>6} {streams.get(query, 0):>7} {stats.completed:>6} {stats.errors:>6} "
            f"{stats.qpm:>9.1f} {ms(stats.p50):>9} {ms(stats.p95):>9} {ms(stats.p99):>9}"
        )
    return "\n".join(lines)


def _emit(
    samples: list[Sample], streams: dict[str, int], as_json: bool, extra: dict[str, Any]
) -> None:
    if as_json:
        print(json.dumps({"samples": [s.to_dict() for s in samples], **extra}, indent=2))
        return
    for sample in samples:
        print(_format_sample(sample, streams))
    for key, value in extra.items():
        print(f"{key}: {value}")


def _cmd_run(args: argparse.Namespace) -> int:
    dsn = _require_dsn(args)
    if (args.mix is None) == (args.schedule is None):
        raise ConfigError("give exactly one of --mix (e.g. 2Q6,1Q13) or --schedule")
    if (args.seconds is None) == (args.queries is None):
        raise ConfigError("give exactly one of --seconds or --queries for each sample")
    driver: WorkloadDriver | ScheduledDriver
    try:
        if args.mix is not None:
            mix = parse_mix(args.mix)
            streams = dict(mix.streams)
            driver = WorkloadDriver(
                dsn, mix, seed=args.seed, statement_timeout_s=args.statement_timeout
            )
        else:
            schedule = parse_schedule(args.schedule)
            streams = {}
            for phase in schedule.phases:
                streams.update(dict(phase.mix.streams))
            driver = ScheduledDriver(
                dsn, schedule, seed=args.seed,
                statement_timeout_s=args.statement_timeout, repeat=args.repeat,
            )  # fmt: skip
    except WorkloadError as exc:
        raise _as_config_error(exc) from exc
    samples: list[Sample] = []
    with driver:
        if args.warmup:
            driver.sample(args.warmup)
        cpu0, wall0 = time.process_time(), time.monotonic()
        for _ in range(args.samples):
            samples.append(driver.sample(args.seconds, queries=args.queries))
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    _emit(samples, streams, args.json, {"driver_cpu_fraction": round(cpu / wall, 4)})
    return 0


def _cmd_queries(args: argparse.Namespace) -> int:
    try:
        names = [query_name(q) for q in args.query] if args.query else list(QUERY_NAMES)
    except WorkloadError as exc:
        raise _as_config_error(exc) from exc
    rng = random.Random(args.seed)
    for name in names:
        if args.default:
            instance = validation_query(name, args.scale)
        else:
            instance = make_query(name, rng, args.scale)
        print(f"-- {name} {instance.params}\n{instance.text()};\n")
    return 0


def _cmd_pgbench(args: argparse.Namespace) -> int:
    dsn = _require_dsn(args)
    try:
        workload = PgbenchWorkload(
            dsn, clients=args.clients, scale=args.scale, bin_dir=args.bin_dir,
            threads=args.threads, builtin=args.builtin,
        )  # fmt: skip
    except WorkloadError as exc:
        raise _as_config_error(exc) from exc
    with workload:
        samples = [workload.sample(args.seconds) for _ in range(args.samples)]
    _emit(samples, {"pgbench": args.clients}, args.json, {})
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``harmony tpch ...`` and ``harmony pgbench ...``."""
    tpch = subparsers.add_parser("tpch", help="load TPC-H data, run query mixes, print queries")
    tpch_sub = tpch.add_subparsers(dest="tpch_command", metavar="ACTION", required=True)
    _add_tpch_load(tpch_sub)
    _add_tpch_run(tpch_sub)
    _add_tpch_queries(tpch_sub)
    _add_pgbench(subparsers)


def _add_tpch_load(tpch_sub: Any) -> None:
    load = tpch_sub.add_parser("load", help="generate and load TPC-H data (idempotent)")
    _add_dsn(load)
    load.add_argument(
        "--scale", type=float, default=float(env_default("tpch_scale", "0.1") or 0.1),
        help="TPC-H scale factor, > 0 (env HARMONY_TPCH_SCALE; default 0.1)",
    )  # fmt: skip
    load.add_argument("--workdir", default=env_default("tpch_workdir"),
                      help="keep the generated CSV files here and reuse them "
                           "(env HARMONY_TPCH_WORKDIR)")
    load.add_argument("--replace", action="store_true",
                      help="replace TPC-H data of another scale factor in the database")
    load.add_argument("--json", action="store_true", help="print the result as JSON")
    load.set_defaults(func=_cmd_load)


def _add_tpch_run(tpch_sub: Any) -> None:
    run = tpch_sub.add_parser("run", help="run a query mix or schedule and report throughput")
    _add_dsn(run)
    run.add_argument("--mix", default=env_default("tpch_mix"),
                     help="streams per query, e.g. 4Q6,4Q9,4Q13 (env HARMONY_TPCH_MIX)")
    run.add_argument("--schedule", default=None,
                     help="phases <mix>:<duration>;..., e.g. '12Q6:90m;6Q7,6Q13:30m'")
    run.add_argument("--repeat", action="store_true", help="cycle the schedule's phases")
    run.add_argument("--seconds", type=_positive_float, default=None, help="sample window (s)")
    run.add_argument("--queries", type=_positive_int, default=None,
                     help="fixed-work sample: this many completed queries")
    run.add_argument("--samples", type=_positive_int, default=1, help="samples to take (default 1)")
    run.add_argument("--warmup", type=_positive_float, default=None,
                     help="seconds to run before the first sample")
    run.add_argument("--seed", type=int, default=0, help="seed of the substitution parameters")
    run.add_argument("--statement-timeout", type=_positive_float, default=None,
                     help="cancel queries running longer than this (s); counted as errors")
    run.add_argument("--json", action="store_true", help="print the samples as JSON")
    run.set_defaults(func=_cmd_run)


def _add_tpch_queries(tpch_sub: Any) -> None:
    queries = tpch_sub.add_parser("queries", help="print query instances with fresh parameters")
    queries.add_argument("--query", action="append", help="Q1..Q22 (repeatable; default all)")
    queries.add_argument("--seed", type=int, default=0, help="seed of the substitution parameters")
    queries.add_argument("--scale", type=_positive_float, default=1.0,
                         help="scale factor (Q11's fraction is 0.0001/scale; default 1)")
    queries.add_argument("--default", action="store_true",
                         help="the spec's validation parameters instead of random ones")
    queries.set_defaults(func=_cmd_queries)


def _add_pgbench(subparsers: Any) -> None:
    pgbench = subparsers.add_parser("pgbench", help="run pgbench as an OLTP workload")
    pgbench_sub = pgbench.add_subparsers(dest="pgbench_command", metavar="ACTION", required=True)
    prun = pgbench_sub.add_parser("run", help="initialise if needed, run, report throughput")
    _add_dsn(prun)
    prun.add_argument("--clients", type=_positive_int, default=4, help="connections (default 4)")
    prun.add_argument("--threads", type=_positive_int, default=None, help="pgbench -j")
    prun.add_argument("--scale", type=_positive_int, default=1, help="pgbench scale (default 1)")
    prun.add_argument("--builtin", default="tpcb-like",
                      help="tpcb-like, simple-update or select-only (default tpcb-like)")
    prun.add_argument("--seconds", type=_positive_float, default=10.0, help="sample window (s)")
    prun.add_argument("--samples", type=_positive_int, default=1, help="samples to take")
    prun.add_argument("--bin-dir", default=env_default("pg_bin_dir"),
                      help="directory holding pgbench (env HARMONY_PG_BIN_DIR)")
    prun.add_argument("--json", action="store_true", help="print the samples as JSON")
    prun.set_defaults(func=_cmd_pgbench)
