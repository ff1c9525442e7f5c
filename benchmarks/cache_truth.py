"""Where does shared_buffers matter under a memory cgroup? (issue 51, Evidence: a read
workload whose working set lies between a small shared_buffers and the machine's RAM.)

On this 24 GB machine the page cache hides every buffer miss (shared_buffers 128MB vs 1GB on
pgbench -S at scale 50 read 0.98×). Here the embedded cluster runs inside a memory cgroup of
``--limit`` (``LocalCluster(memory_limit_bytes=...)``, restarts included), holding pgbench's
tables at ``--scale`` (about 15 MB of data per scale unit), and pgbench's own select-only
client (``-S``, ``--clients`` clients) compares a small shared_buffers against a larger one
in interleaved rounds (AB, BA, ...), ALTER SYSTEM and a restart between (the truth's way for a
restart knob), ``--warmup-s`` uncounted seconds after each restart, a 95 % t interval over
the rounds' log ratios. Each round also records the buffer hit fraction
(``pg_stat_database``) and the cgroup's memory use, which say why a ratio is what it is.

Double caching: shared_buffers and the page cache share one limit, so a larger
shared_buffers leaves less page cache; the gain appears only where shared_buffers holds most
of the working set and the page cache beside the small one cannot.

    flock /tmp/harmony-bench.lock .venv/bin/python -m benchmarks.cache_truth \
        --limit 1GB --scale 40 --large 600MB --rounds 6 --round-s 60 --tag T

Writes benchmarks/results/cache_truth.<tag>.{json,md}.
"""

from __future__ import annotations

import argparse
import logging
import math
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from benchmarks.accuracy import _LATENCY, _TPS, TRUTH_SEED, _iv, _text, seeded
from benchmarks.evidence.common import machine, write_results
from benchmarks.evidence.restart import uptime
from tuner_client.config.units import parse_bytes
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.stats.paired import interval_from_logs
from workloads.pgbench import find_pgbench

logger = logging.getLogger(__name__)


class PgbenchClient:
    """pgbench's own client on one of its built-in scripts (``options``: ``-S`` select-only,
    ``-M prepared`` TPC-B, ...), fresh connections per round."""

    def __init__(self, dsn: str, clients: int, options: Sequence[str]) -> None:
        self.dsn, self.clients, self.options = dsn, clients, list(options)

    def tps(self, seconds: int, seed: int | None = None) -> tuple[float, list[float | None]]:
        """The run's tps and its mean latency (ms); ``seed``: pgbench's ``--random-seed``."""
        done = subprocess.run(
            [str(find_pgbench()), "-n", *self.options, *seeded(seed), "-c", str(self.clients),
             "-j", "2",
             "-T", str(seconds), self.dsn], capture_output=True, text=True, check=False)
        found = _TPS.search(done.stdout)
        if done.returncode != 0 or found is None:
            raise RuntimeError(f"pgbench {' '.join(self.options)} failed: "
                               f"{done.stderr[-2000:]}")
        latency = _LATENCY.search(done.stdout)
        return float(found.group(1)), [float(latency.group(1)) if latency else None]


def pgbench_select(dsn: str, clients: int) -> PgbenchClient:
    """pgbench's select-only client (``-S``; the simple query protocol, as the tuner's
    pgbench workload runs it)."""
    return PgbenchClient(dsn, clients, ["-S"])


def load_pgbench(dsn: str, scale: int) -> None:
    """pgbench's tables at ``scale``, vacuumed and checkpointed."""
    subprocess.run([str(find_pgbench()), "-i", "-q", "-s", str(scale), dsn], check=True,
                   capture_output=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


def _blocks(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT blks_hit, blks_read FROM pg_stat_database "
                           "WHERE datname = current_database()").fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def cgroup_memory(cluster: LocalCluster) -> dict[str, int] | None:
    """The cluster's memory cgroup: its usage, page cache and shared memory (bytes)."""
    cg = cluster.cgroup_path()
    if cg is None:
        return None
    out: dict[str, int] = {}
    for line in (cg / "memory.stat").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key in ("cache", "rss", "shmem", "mapped_file", "total_inactive_file",
                   "total_active_file"):
            out[key] = int(value)
    for name in ("memory.usage_in_bytes", "memory.max"):
        if (cg / name).exists():
            text = (cg / name).read_text().strip()
            out["usage"] = int(text) if text.isdigit() else -1
            break
    return out


def _set(dsn: str, settings: dict[str, str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, value in settings.items():
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name),
                                                                    sql.Literal(value)))


def restart_truth(cluster: LocalCluster, dsn: str, client: Any, configs: list[dict[str, str]],
                  *, rounds: int, round_s: int, warmup_s: int,
                  restart: Callable[[], None] | None = None) -> dict[str, Any]:
    """Interleaved rounds (AB, BA, ...) of ``configs[0]`` against ``configs[1]`` by the
    workload's own ``client``: ALTER SYSTEM, a restart (``cluster.restart`` unless
    ``restart`` is given), ``warmup_s`` uncounted seconds, then ``round_s`` counted (both arms
    of a round drawing with one seed, :data:`~benchmarks.accuracy.TRUTH_SEED`); a 95 % t
    interval over the rounds' log ratios. Each arm's buffer hit fraction and the cgroup's
    memory at the round's end are recorded beside its tps."""
    before = uptime()
    rows: list[dict[str, Any]] = []
    for r in range(rounds):
        arms: list[dict[str, Any]] = [{}, {}]
        for k in ((0, 1) if r % 2 == 0 else (1, 0)):
            _set(dsn, configs[k])
            (restart or cluster.restart)()
            if warmup_s:
                client.tps(warmup_s)
            hit0, read0 = _blocks(dsn)
            tps, latency = client.tps(round_s, seed=TRUTH_SEED + r)
            hit1, read1 = _blocks(dsn)
            hits, reads = hit1 - hit0, read1 - read0
            arms[k] = {"tps": tps, "latency_ms": latency,
                       "hit_fraction": hits / max(1, hits + reads),
                       "cgroup": cgroup_memory(cluster)}
        ratio = arms[1]["tps"] / arms[0]["tps"]
        rows.append({"round": r, "tps_original": arms[0]["tps"],
                     "tps_candidate": arms[1]["tps"], "ratio": ratio, "arms": arms})
        logger.info("round %d: %.1f vs %.1f tps (hit %.3f vs %.3f): %.3f×", r, arms[0]["tps"],
                    arms[1]["tps"], arms[0]["hit_fraction"], arms[1]["hit_fraction"], ratio)
    logs = [math.log(row["ratio"]) for row in rows]
    return {"configs": configs, "rounds": rows, "round_s": round_s, "warmup_s": warmup_s,
            "interval": _iv(interval_from_logs(logs, level=0.95, method="t")),
            "uptime_before": before, "uptime_after": uptime()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cache_truth")
    parser.add_argument("--limit", default="1GB", help="the memory cgroup's limit")
    parser.add_argument("--scale", type=int, default=40)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--small", default="128MB")
    parser.add_argument("--large", default="600MB")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--round-s", type=int, default=60)
    parser.add_argument("--warmup-s", type=int, default=20)
    parser.add_argument("--tag", default="run")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    limit = parse_bytes(args.limit, what="--limit")
    state = Path(tempfile.mkdtemp(prefix="harmony-bench-cache-", dir="/var/tmp"))
    state.chmod(0o755)
    cluster = LocalCluster(state / "cluster", sync_initdb=False, memory_limit_bytes=limit)
    data: dict[str, Any] = {"machine": machine(), "args": vars(args), "limit_bytes": limit}
    started = time.monotonic()
    try:
        cluster.start()
        if cluster.cgroup_path() is None:
            raise SystemExit("no memory cgroup could be made: run as root with the memory "
                             "controller")
        load_pgbench(cluster.dsn, args.scale)
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
        data["database_bytes"] = int(row[0]) if row else None
        configs = [{"shared_buffers": args.small}, {"shared_buffers": args.large}]
        client = pgbench_select(cluster.dsn, args.clients)
        data["truth"] = restart_truth(cluster, cluster.dsn, client, configs, rounds=args.rounds,
                                      round_s=args.round_s, warmup_s=args.warmup_s)
    finally:
        cluster.stop()
        shutil.rmtree(state, ignore_errors=True)
    data["wall_s"] = round(time.monotonic() - started, 1)
    command = "python -m benchmarks.cache_truth " + " ".join(
        argv if argv is not None else sys.argv[1:])
    jpath, mpath = write_results(f"cache_truth.{args.tag}", data, markdown(data, command))
    print(f"wrote {jpath} and {mpath}")
    return 0


def markdown(data: dict[str, Any], command: str) -> str:
    a, tr = data["args"], data["truth"]
    lines = [f"# shared_buffers under a memory cgroup: {a['small']} vs {a['large']} "
             f"(issue 51)", "", f"Command: `{command}`  ", f"Machine: {data['machine']}  ",
             f"Uptime: {tr['uptime_before']} / {tr['uptime_after']}  ",
             f"Wall-clock: {data['wall_s']} s", "",
             f"Memory cgroup limit {data['limit_bytes'] / 2 ** 20:,.0f} MiB; pgbench scale "
             f"{a['scale']} ({(data.get('database_bytes') or 0) / 2 ** 20:,.0f} MiB database); "
             f"pgbench -S, {a['clients']} clients; {len(tr['rounds'])} rounds of "
             f"{tr['round_s']} s, a restart and {tr['warmup_s']} s uncounted before each arm.",
             "", f"**{a['large']} over {a['small']}: {_text(tr['interval'])}** (95 % t)", "",
             "| round | tps small | hit small | tps large | hit large | ratio |",
             "|---|---|---|---|---|---|"]
    for r in tr["rounds"]:
        s, g = r["arms"]
        lines.append(f"| {r['round']} | {s['tps']:.0f} | {s['hit_fraction']:.3f} | "
                     f"{g['tps']:.0f} | {g['hit_fraction']:.3f} | {r['ratio']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
