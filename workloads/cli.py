"""``harmony tpch load|run|queries`` and ``harmony pgbench run``: the workloads on their own."""

from __future__ import annotations

import argparse
import json
import random
import sys
import time

from harmony_base.errors import ConfigError, WorkloadError
from harmony_base.jsontypes import JSONObject
from workloads.driver import WorkloadDriver
from workloads.mix import parse_mix
from workloads.pgbench import PgbenchWorkload
from workloads.sample import Sample
from workloads.schedule import ScheduledDriver, parse_schedule
from workloads.tpch.load import LoadProgress, load_tpch
from workloads.tpch.queries import QUERY_NAMES, make_query, query_name, validation_query


def _as_config_error(exc: WorkloadError) -> ConfigError:
    return ConfigError(str(exc))


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


def cmd_load(args: argparse.Namespace) -> int:
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
    samples: list[Sample], streams: dict[str, int], as_json: bool, extra: JSONObject
) -> None:
    if as_json:
        print(json.dumps({"samples": [s.to_dict() for s in samples], **extra}, indent=2))
        return
    for sample in samples:
        print(_format_sample(sample, streams))
    for key, value in extra.items():
        print(f"{key}: {value}")


def cmd_run(args: argparse.Namespace) -> int:
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


def cmd_queries(args: argparse.Namespace) -> int:
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


def cmd_pgbench(args: argparse.Namespace) -> int:
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
