"""The accuracy table (issue 45, Evidence): on workloads the estimators were not built on, the
tuner's recommendation and interval by its default path, beside the ratio the workload's own
client counts for exactly that recommendation.

Each ``--workload`` gets a private cluster, its data loaded here (the tuner did not create
it), a known-slow original set by ``ALTER SYSTEM``, and a config as a user writes it: the
server by DSN with its pg_ctl (no restarts), the workload, the online knobs, no
``measure.design``. Then ``harmony tune`` is timed, and the truth is ``--rounds`` interleaved
rounds (AB, BA, ...) of ``--round-s`` seconds of the original against the recommendation,
ALTER SYSTEM + reload between, a fresh client per round, a 95 % t interval over the rounds'
log ratios:

- ``long``: a user's ``.sql`` mix on a 1,000,000-row sales table: a point lookup (70), a
  store's week (25) and a report grouping every row by item with ``count(DISTINCT …)`` (5,
  about 3 s a statement here); the original's work_mem 1MB sorts it on disk. Truth: pgbench
  on the same statements and weights, 4 clients.
- ``shop``: the shipped shop application's pgbench scripts (skewed lookups, order-placing
  writes, a reporting join), 8 clients, scale 1; the original's work_mem 64kB and
  random_page_cost 8. Truth: pgbench on the scripts with the same weights and clients.
- ``shop-read``: the same without the writes (lookups and the report, 6:1): a stationary
  workload (with the writes the orders grow, and the original's cost with them).
- ``tpch``: TPC-H SF 0.1, one stream each of Q3, Q5, Q10 and Q12 (not the demo's mix); the
  original is PostgreSQL's defaults. Truth: the TPC-H streams' own completed queries per
  minute (``harmony tpch run``'s driver).
- ``wal`` (issue 51: server-wide knobs, a write-heavy OLTP): pgbench's TPC-B at scale 20, 4
  clients, the original's max_wal_size 32MB (a checkpoint every few seconds, each page's
  first change after it a full-page image); the config tunes max_wal_size,
  checkpoint_timeout, checkpoint_completion_target (reload-time knobs with memory) and
  wal_compression. Truth: pgbench's own TPC-B, same clients; rounds of 60 s or more, since a
  checkpoint started under one setting writes on into the next round. With ``--fresh-data``
  each arm starts from one copy of the data as the tuner left it, restored with a restart
  (its settings kept) and ``--warmup-s`` uncounted: the s26 truth's level fell 2071 → 682
  tps over its rounds, the tables growing under every arm.
- ``cache`` (issue 51: the restart knob shared_buffers): the user's config is the embedded
  cluster under ``database.memory_limit`` (a memory cgroup: the host's page cache cannot hide
  buffer misses) and pgbench's select-only workload, nothing else: the tuner adds
  shared_buffers itself. The setting is where ``benchmarks/cache_truth.py`` found
  shared_buffers to matter. Truth: pgbench -S on the tuner's own embedded cluster, in the
  same cgroup limit, ALTER SYSTEM and a restart before each arm of each round
  (``cache_truth.restart_truth``), ``--warmup-s`` uncounted seconds after each restart.

    flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.accuracy_table \
        --workload long --tag T

Writes benchmarks/results/accuracy_table.<workload>.<tag>.{json,md}.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fcntl
import json
import logging
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import yaml

from benchmarks.accuracy import Pgbench, _text, truth
from benchmarks.cache_truth import PgbenchClient, load_pgbench, pgbench_select, restart_truth
from benchmarks.evidence.common import machine, write_results
from benchmarks.evidence.restart import uptime
from tuner_client.config import tuner_config_from_dict
from tuner_client.config.units import parse_bytes
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.target import EMBEDDED_DBNAME
from workloads.apps import setup_app
from workloads.driver import WorkloadDriver
from workloads.tpch.load import load_tpch

logger = logging.getLogger(__name__)

SALES_ROWS = 1_000_000
LONG_SQL = """\
-- A user's workload: a lookup, a store's week, and a report over every sale.
-- @weight 70
-- @param id = random(1, 1000000)
SELECT store, item, qty, price FROM sales WHERE id = :id;
-- @weight 25
-- @param s = random(1, 2000)
SELECT day, sum(qty * price) FROM sales WHERE store = :s AND day BETWEEN 100 AND 107
GROUP BY day;
-- @weight 5
SELECT item, sum(qty * price) AS revenue, count(DISTINCT store) AS stores FROM sales
GROUP BY item ORDER BY revenue DESC LIMIT 50;
"""
SHOP_FILES = ["workloads/apps/shop/lookup.pgbench@6", "workloads/apps/shop/order.pgbench@3",
              "workloads/apps/shop/report.pgbench@1"]
#: the shop without its order-placing writes: its data stays as loaded, so the ratio the
#: tuner measured and the one its truth measures later are of the same workload (with the
#: writes, orders grow and the original's cost with them: ``shop``, s24)
SHOP_READ_FILES = ["workloads/apps/shop/lookup.pgbench@6", "workloads/apps/shop/report.pgbench@1"]
TPCH_MIX = "1Q3,1Q5,1Q10,1Q12"
TPCH_SCALE = 0.1
ROOT = Path(__file__).resolve().parent.parent
BENCH_LOCK = "/tmp/harmony-bench.lock"


def _load_sales(dsn: str, _: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"""CREATE TABLE sales AS SELECT g AS id,
            (1 + (g::bigint * 7919) % 2000)::int AS store,
            (1 + (g::bigint * 104729) % 50000)::int AS item,
            (g % 365) AS day, 1 + g % 5 AS qty, ((g % 997) / 10.0)::numeric(8, 2) AS price,
            md5(g::text) AS note FROM generate_series(1, {SALES_ROWS}) g""")
        conn.execute("ALTER TABLE sales ADD PRIMARY KEY (id)")
        conn.execute("CREATE INDEX ON sales (store, day)")
        conn.execute("VACUUM ANALYZE sales")
        conn.execute("CHECKPOINT")


def _load_shop(dsn: str, _: Path) -> None:
    setup_app(dsn, "shop", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


#: the ``wal`` row's pgbench scale and clients
WAL_SCALE, WAL_CLIENTS = 20, 4


def _load_pgbench(dsn: str, _: Path) -> None:
    load_pgbench(dsn, WAL_SCALE)


def _load_tpch(dsn: str, state: Path) -> None:
    load_tpch(dsn, TPCH_SCALE, workdir=state / "tpch")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")


class TpchStreams:
    """The TPC-H mix's own client: its streams, fresh per round, completed queries counted."""

    def __init__(self, dsn: str, mix: str) -> None:
        self.dsn, self.mix, self.rounds = dsn, mix, 0

    def tps(self, seconds: int, seed: int | None = None) -> tuple[float, list[float | None]]:
        """Completed queries per second over ``seconds``, and each query's mean latency (ms);
        the streams' ``seed`` (default: one per call)."""
        self.rounds += 1
        with WorkloadDriver(self.dsn, self.mix, seed=self.rounds if seed is None else seed) \
                as driver:
            sample = driver.sample(seconds)
        if sample.errors:
            raise RuntimeError(f"the TPC-H streams failed {sample.errors} queries")
        latency = [None if s.mean is None else 1e3 * s.mean for s in sample.per_query.values()]
        return sample.completed / sample.seconds, latency


@dataclass(frozen=True)
class Workload:
    """One row of the table: how its data is made, the slow original, the user's config
    parts (the workload, the online knobs) and its own client for the truth."""

    load: Callable[[str, Path], None]
    original: dict[str, str]
    workload: Callable[[Path], dict[str, Any]]
    knobs: dict[str, Any]
    client: Callable[[str, Any, Path], Any]
    counts: str


def _long_workload(state: Path) -> dict[str, Any]:
    mix = state / "sales.sql"
    mix.write_text(LONG_SQL)
    return {"scripts": {"files": [str(mix)], "clients": 4}}


WORKLOADS: dict[str, Workload] = {
    "long": Workload(
        _load_sales, {"work_mem": "1MB"}, _long_workload,
        {"work_mem": {"min": "1MB", "max": "256MB"},
         "random_page_cost": {"min": 1, "max": 8, "step": 0.5},
         "jit": {"values": ["off", "on"]},
         "max_parallel_workers_per_gather": {"min": 0, "max": 2}},
        lambda dsn, cfg, state: Pgbench(dsn, cfg.workload.files, state),
        "pgbench's tps on the same statements and weights, 4 clients"),
    "shop": Workload(
        _load_shop, {"work_mem": "64kB", "random_page_cost": "8"},
        lambda state: {"scripts": {"files": [str(ROOT / f) for f in SHOP_FILES], "clients": 8,
                                   "writes": True, "variables": {"scale": 1}}},
        {"work_mem": {"min": "64kB", "max": "64MB"},
         "random_page_cost": {"min": 1, "max": 8, "step": 0.5}},
        lambda dsn, cfg, state: Pgbench(dsn, cfg.workload.files, state, clients=8,
                                        writes=True, variables={"scale": "1"}),
        "pgbench's tps on the shop's scripts and weights, 8 clients"),
    "shop-read": Workload(
        _load_shop, {"work_mem": "64kB", "random_page_cost": "8"},
        lambda state: {"scripts": {"files": [str(ROOT / f) for f in SHOP_READ_FILES],
                                   "clients": 8, "variables": {"scale": 1}}},
        {"work_mem": {"min": "64kB", "max": "64MB"},
         "random_page_cost": {"min": 1, "max": 8, "step": 0.5}},
        lambda dsn, cfg, state: Pgbench(dsn, cfg.workload.files, state, clients=8,
                                        variables={"scale": "1"}),
        "pgbench's tps on the shop's read scripts and weights, 8 clients"),
    "tpch": Workload(
        _load_tpch, {}, lambda state: {"tpch": {"scale": TPCH_SCALE, "mix": TPCH_MIX}},
        {"work_mem": {"min": "1MB", "max": "256MB"},
         "random_page_cost": {"min": 1, "max": 8, "step": 0.5},
         "jit": {"values": ["off", "on"]},
         "max_parallel_workers_per_gather": {"min": 0, "max": 2}},
        lambda dsn, cfg, state: TpchStreams(dsn, TPCH_MIX),
        f"the TPC-H streams' completed queries per second ({TPCH_MIX})"),
    "wal": Workload(
        _load_pgbench, {"max_wal_size": "32MB"},
        lambda state: {"pgbench": {"scale": WAL_SCALE, "clients": WAL_CLIENTS}},
        {"max_wal_size": {"min": "32MB", "max": "4GB"},
         "checkpoint_timeout": {"min": "30s", "max": "30min"},
         "checkpoint_completion_target": {"min": 0.5, "max": 0.9},
         "wal_compression": {"values": ["off", "on"]}},
        lambda dsn, cfg, state: PgbenchClient(dsn, WAL_CLIENTS, ["-M", "prepared"]),
        f"pgbench's own TPC-B tps, scale {WAL_SCALE}, {WAL_CLIENTS} clients"),
}


#: the ``cache`` row: the embedded cluster's memory limit, pgbench's scale and clients
CACHE_LIMIT, CACHE_SCALE, CACHE_CLIENTS = "1GB", 40, 4


def cache_config() -> dict[str, Any]:
    """The ``cache`` row's config as a user writes it: the embedded cluster under a memory
    limit, pgbench's select-only workload, every other choice the tuner's default."""
    return {"name": "my-app", "seed": 1, "database": {"memory_limit": CACHE_LIMIT},
            "workload": {"pgbench": {"scale": CACHE_SCALE, "clients": CACHE_CLIENTS,
                                     "builtin": "select-only"}}}


def run_cache(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """The ``cache`` row: ``harmony tune`` makes and fills its own embedded cluster (under
    ``--state-dir``); the truth then restarts that cluster, in a memory cgroup of the same
    limit, between its arms."""
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-accuracy-cache-", dir="/var/tmp"))
    state.chmod(0o755)  # the cluster's unprivileged OS user must reach it
    raw = cache_config()
    config = state / "my-app.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    data["config"], data["counts"] = raw, (f"pgbench -S's own tps, scale {CACHE_SCALE}, "
                                           f"{CACHE_CLIENTS} clients, in a memory cgroup of "
                                           f"{CACHE_LIMIT}, a restart before each arm")
    cluster = None
    try:
        # one hold for the tune and the truth: the truth measures the cluster the tune left
        with bench_lock():
            data["uptime_start"] = uptime()
            data["wall_s"], data["rc"], summary, data["stderr_tail"] = _tune(
                config, state / "out", "--state-dir", str(state / "harmony"))
            if summary is None:
                return
            found = sorted((state / "harmony").glob("**/cluster/data/PG_VERSION"))
            cluster = LocalCluster(found[0].parent.parent, memory_limit_bytes=parse_bytes(
                CACHE_LIMIT, what="CACHE_LIMIT"))
            cluster.start()
            dsn = cluster.dsn_for(EMBEDDED_DBNAME)
            shown_settings = _shown(data, summary, dsn)
            if shown_settings is None or (summary.get("decision") or {}).get("winner") is None:
                # the row is about shared_buffers: a split race that kept the original shows
                # its session part's best, so the truth takes the restart part's instead
                shown_settings = _restart_shown(data, summary, dsn) or shown_settings
            if shown_settings is not None:
                data["truth"] = restart_truth(
                    cluster, dsn, pgbench_select(dsn, CACHE_CLIENTS),
                    [data["original_settings"], shown_settings], rounds=args.rounds,
                    round_s=args.round_s, warmup_s=args.warmup_s)
            data["uptime_end"] = uptime()
    finally:
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(state, ignore_errors=True)


@contextlib.contextmanager
def bench_lock() -> Iterator[None]:
    """``/tmp/harmony-bench.lock`` held (the ``cache`` row takes it itself: run it without
    an outer ``flock``)."""
    with open(BENCH_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _shown(data: dict[str, Any], summary: dict[str, Any], dsn: str,
           knobs_given: Iterable[str] | None = None) -> dict[str, str] | None:
    """The decision, and the settings of the configuration it shows (its recommendation,
    or the best it kept the original against) with the original's beside them in
    ``data``, over ``knobs_given`` (None: the knobs it changes, and shared_buffers); None
    when it shows none."""
    decision = summary.get("decision") or {}
    shown = decision.get("winner") or decision.get("best")
    data["decision"] = {k: decision.get(k) for k in ("winner", "best", "design", "intervals",
                                                     "text")}
    data["decisions"] = [d for d in summary["decisions"]
                         if "design" in d or "recommend" in d or "measured" in d]
    data["decision_records"] = [r for r in summary.get("decision_records", [])
                                if r.get("phase") == "final"]
    data["best_settings"] = summary["best_settings"]
    data["shown"] = shown
    if shown is None:
        return None
    differing = (summary["best_settings"] if decision.get("winner") is not None
                 else _raced(summary).get(shown))
    if differing is None:
        return None
    knobs = sorted(knobs_given if knobs_given is not None
                   else set(differing) | {"shared_buffers"})
    original = {n: str(v) for n, v in _settings(dsn, knobs).items()}
    data["original_settings"] = original
    data["shown_settings"] = {n: str(differing.get(n, original[n])) for n in knobs}
    return dict(data["shown_settings"])


#: the suffix a split race gives its restart part's labels ("pgtune-restart (restart part)")
RESTART_PART = " (restart part)"


def _restart_shown(data: dict[str, Any], summary: dict[str, Any], dsn: str
                   ) -> dict[str, str] | None:
    """A split race's restart part: its candidate with the highest ratio (its label and
    interval as the decision gives them, at the stage's level), and that candidate's
    shared_buffers on the original's other settings; None when the race had no restart
    part."""
    intervals = (summary.get("decision") or {}).get("intervals") or {}
    parts = {label: iv for label, iv in intervals.items()
             if label.endswith(RESTART_PART) and iv is not None}
    if not parts:
        return None
    label = max(parts, key=lambda k: parts[k]["ratio"])
    base = label.removesuffix(RESTART_PART).removesuffix("-restart")
    value = (_raced(summary).get(base) or {}).get("shared_buffers")
    if value is None:
        return None
    original = {n: str(v) for n, v in _settings(dsn, ["shared_buffers"]).items()}
    data.update(shown=label, original_settings=original,
                shown_settings={"shared_buffers": str(value)})
    return dict(data["shown_settings"])


def user_config(cluster: LocalCluster, dsn: str, spec: Workload, state: Path
                ) -> dict[str, Any]:
    """The config as a user writes it: the server by DSN with its pg_ctl, no design."""
    return {"name": "my-app", "seed": 1,
            "database": {"dsn": dsn, "controller": {
                "kind": "pg_ctl", "options": {"data_dir": str(cluster.data_dir),
                                              "bin_dir": str(cluster.bin_dir)}}},
            "workload": spec.workload(state),
            "online": {"knobs": spec.knobs, "evaluations": 10}}


def _tune(config: Path, out: Path, *extra: str
          ) -> tuple[float, int, dict[str, Any] | None, str]:
    started = time.monotonic()
    # ``python -m harmony`` from the checkout: the code under test (the venv's ``harmony``
    # script imports the installed tree, which may be another checkout)
    run = subprocess.run([sys.executable, "-m", "harmony", "tune", str(config), "--output",
                          str(out), "--json", *extra], capture_output=True, text=True,
                         check=False, cwd=ROOT)
    wall = round(time.monotonic() - started, 1)
    summary = json.loads(run.stdout) if run.returncode == 0 else None
    return wall, run.returncode, summary, run.stderr[-3000:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.accuracy_table")
    parser.add_argument("--workload", choices=sorted([*WORKLOADS, "cache"]), required=True)
    parser.add_argument("--tag", default="run")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--round-s", type=int, default=20)
    parser.add_argument("--warmup-s", type=int, default=20,
                        help="cache and --fresh-data: uncounted seconds after each restart "
                             "of the truth")
    parser.add_argument("--fresh-data", action="store_true",
                        help="each arm of each truth round starts from the data as the tuner "
                             "left it (a copy taken once, restored with a restart before "
                             "every arm): no bloat or checkpoint carried between arms")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    data: dict[str, Any] = {"machine": machine(), "args": vars(args)}
    if args.workload == "cache":
        # run without an outer flock: the tune and the truth each take the lock
        data["original"] = "PostgreSQL's defaults (the embedded cluster as the tuner made it)"
        run_cache(args, data)
        return _write(args, data, argv)
    spec = WORKLOADS[args.workload]
    state = Path(tempfile.mkdtemp(prefix=f"harmony-bench-accuracy-{args.workload}-", dir="/tmp"))
    cluster = LocalCluster(state / "cluster", sync_initdb=False)
    data.update(original=spec.original, counts=spec.counts)
    try:
        cluster.start()
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE app")
        dsn = cluster.dsn_for("app")
        spec.load(dsn, state)
        with psycopg.connect(dsn, autocommit=True) as conn:
            for name, value in spec.original.items():
                conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            conn.execute("SELECT pg_reload_conf()")
        raw = user_config(cluster, dsn, spec, state)
        config = state / "my-app.yaml"
        config.write_text(yaml.safe_dump(raw, sort_keys=False))
        data["config"] = raw
        data["uptime_start"] = uptime()
        data["wall_s"], data["rc"], summary, data["stderr_tail"] = _tune(config, state / "out")
        if summary is not None:
            _record(data, summary, spec, tuner_config_from_dict(raw), dsn, state, args,
                    cluster)
        data["uptime_end"] = uptime()
    finally:
        cluster.stop()
        shutil.rmtree(state, ignore_errors=True)
    return _write(args, data, argv)


def _write(args: argparse.Namespace, data: dict[str, Any], argv: list[str] | None) -> int:
    command = "python -m benchmarks.accuracy_table " + " ".join(
        argv if argv is not None else sys.argv[1:])
    jpath, mpath = write_results(f"accuracy_table.{args.workload}.{args.tag}", data,
                                 markdown(data, command))
    print(f"wrote {jpath} and {mpath}")
    return 0


def _record(data: dict[str, Any], summary: dict[str, Any], spec: Workload, cfg: Any, dsn: str,
            state: Path, args: argparse.Namespace, cluster: LocalCluster) -> None:
    """The decision, and the truth of the configuration it shows (its recommendation, or
    the best it kept the original against) over the original."""
    shown = _shown(data, summary, dsn, set(spec.knobs) | set(spec.original))
    if shown is None:
        return
    client = spec.client(dsn, cfg, state)
    configs = [data["original_settings"], shown]
    if not args.fresh_data:
        data["truth"] = truth(dsn, client, configs, rounds=args.rounds, round_s=args.round_s)
        return
    # the s26 wal truth fell 2071 -> 682 tps over its rounds (the tables growing, a
    # checkpoint started under one arm writing on into the next): every arm starts from one
    # copy of the data instead, its settings restored with it
    snapshot = state / "snapshot"
    cluster.stop()
    subprocess.run(["cp", "-a", str(cluster.data_dir), str(snapshot)], check=True)
    cluster.start()
    data["truth"] = restart_truth(cluster, dsn, client, configs, rounds=args.rounds,
                                  round_s=args.round_s, warmup_s=args.warmup_s,
                                  restart=lambda: fresh_restart(cluster, snapshot))
    data["truth"]["fresh_data"] = True


def fresh_restart(cluster: LocalCluster, snapshot: Path) -> None:
    """Stop ``cluster``, put ``snapshot``'s data back under the settings just written
    (``postgresql.auto.conf`` kept), and start it."""
    cluster.stop()
    auto = (cluster.data_dir / "postgresql.auto.conf").read_bytes()
    stat = (cluster.data_dir / "postgresql.auto.conf").stat()
    shutil.rmtree(cluster.data_dir)
    subprocess.run(["cp", "-a", str(snapshot), str(cluster.data_dir)], check=True)
    target = cluster.data_dir / "postgresql.auto.conf"
    target.write_bytes(auto)
    shutil.chown(target, stat.st_uid, stat.st_gid)
    cluster.start()


def _raced(summary: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Label → the settings that differ from the original: the final race's "raced" record
    (``decision_records``), else its sentence ("final: raced: ...") in older summaries."""
    for record in summary.get("decision_records", []):
        if record.get("phase") == "final" and record.get("kind") == "raced":
            return {k: dict(v) for k, v in (record.get("settings") or {}).items()}
    for line in summary.get("decisions", []):
        if line.startswith("final: raced: "):
            out = {}
            for part in line.removeprefix("final: raced: ").split("; "):
                label, _, settings = part.partition(" ")
                out[label] = ast.literal_eval(settings)
            return out
    return {}


def _settings(dsn: str, names: list[str]) -> dict[str, str]:
    """The values in force of ``names`` with their units, as SHOW gives them ('5min',
    '32MB': a bare '300' for checkpoint_timeout is refused as ambiguous)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT name, current_setting(name) FROM pg_settings "
                            "WHERE name = ANY(%s)", (names,)).fetchall()
    return {str(name): str(value) for name, value in rows}


def markdown(data: dict[str, Any], command: str) -> str:
    decision = data.get("decision") or {}
    shown = data.get("shown")
    iv = (decision.get("intervals") or {}).get(shown) if shown else None
    tr = (data.get("truth") or {}).get("interval")
    lines = [f"# Accuracy table, `{data['args']['workload']}` (issue 45)", "",
             f"Command: `{command}`  ", f"Machine: {data['machine']}  ",
             f"Uptime: {data.get('uptime_start')} / {data.get('uptime_end')}", "",
             f"Original (set by ALTER SYSTEM before the run): {data['original']}; the config "
             f"has no `measure.design`. The truth counts {data['counts']}.", "",
             "| | |", "|---|---|",
             f"| wall-clock of `harmony tune` | {data.get('wall_s')} s (rc {data.get('rc')}) |",
             f"| decision | {decision.get('text') or '–'} |",
             f"| shown ({shown}) | {data.get('shown_settings') or '–'} |",
             f"| design | {decision.get('design')} |",
             f"| tuner's interval, {shown} over the original | {_text(iv) if iv else '–'} |",
             f"| truth: the workload's own client, {shown} over the original | {_text(tr)} |",
             f"| overlap / covers the truth's point | {_agree(iv, tr)} |", ""]
    lines += [f"- {d}" for d in data.get("decisions", [])]
    rounds = (data.get("truth") or {}).get("rounds") or []
    if rounds:
        lines += ["", "| round | original | shown | ratio |", "|---|---|---|---|"]
        lines += [f"| {r['round']} | {r['tps_original']:.2f} | {r['tps_candidate']:.2f} | "
                  f"{r['ratio']:.3f} |" for r in rounds]
    return "\n".join(lines) + "\n"


def _agree(iv: dict[str, Any] | None, tr: dict[str, Any] | None) -> str:
    if not iv or not tr:
        return "–"
    high = iv["high"] if iv["high"] is not None else math.inf
    overlap = iv["low"] <= (tr["high"] or math.inf) and tr["low"] <= high
    covers = iv["low"] <= tr["ratio"] <= high
    return f"{'yes' if overlap else 'no'} / {'yes' if covers else 'no'}"


if __name__ == "__main__":
    raise SystemExit(main())
