"""Application-like traffic from a separate process, for live mode's tests and benchmarks.

A small shop schema (``items`` looked up by a Zipf-skewed key, ``orders`` appended to) and
pgbench custom scripts run as an independent ``pgbench`` process: the tuner only observes it,
as it would observe a real application. The shop example of ``workloads/apps/shop/`` (issue
17, scripted part) is richer; this one is self-contained so live mode can be tested alone.
:func:`shop_with_traffic` is the live benchmarks' set-up: a private cluster that preloads
pg_stat_statements, the shop in it and the traffic running.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.servers.controllers import LocalController
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.target import Target
from workloads.pgbench import find_pgbench

SCRIPTS = {
    "lookup": "\\set id random_zipfian(1, {rows}, 1.1)\n"
              "SELECT count(*), sum(val) FROM items WHERE id BETWEEN :id AND :id + 200;\n",
    "order": "\\set id random_zipfian(1, {rows}, 1.1)\n"
             "INSERT INTO orders (item, qty) VALUES (:id, 1);\n",
    "report": "SELECT val % 50 AS bucket, count(*), sum(val) FROM items "
              "WHERE id <= {report_rows} GROUP BY 1 ORDER BY 3 DESC LIMIT 5;\n",
}


#: the live benchmarks' shop (items) and traffic (scripts and their weights)
BENCH_ROWS = 200_000
BENCH_WEIGHTS = {"lookup": 10, "order": 3, "report": 1}


def create_shop(dsn: str, rows: int = 100_000) -> None:
    """(Re)create the tables, fill ``items`` and create pg_stat_statements if missing."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS items, orders")
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, val int NOT NULL, pad text)")
        conn.execute("INSERT INTO items SELECT g, (g * 7919) %% 100000, repeat('x', 80) "
                     "FROM generate_series(1, %s) g", [rows])
        conn.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, item int NOT NULL, "
                     "qty int NOT NULL, at timestamptz NOT NULL DEFAULT now())")
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("VACUUM ANALYZE items")


@dataclass
class TrafficResult:
    """What pgbench reported when it finished."""

    processed: int
    failed: int
    per_script: dict[str, int] = field(default_factory=dict)
    returncode: int = 0
    output: str = ""


class Traffic:
    """``pgbench -T seconds`` of weighted scripts against ``dsn`` in its own process.

    ``weights`` maps script names of :data:`SCRIPTS` to pgbench weights; ``rate`` (per
    second, all clients) makes the load open-loop like an application's (``pgbench -R``).
    ``threads`` (pgbench ``-j``, one per client by default): pgbench adds up its per-script
    counts across threads without a lock, so a count that must be exact needs ``threads=1``.
    """

    def __init__(self, dsn: str, weights: dict[str, int], *, seconds: int, clients: int = 2,
                 rate: float | None = None, rows: int = 100_000,
                 threads: int | None = None) -> None:
        self.dsn, self.weights, self.seconds = dsn, dict(weights), seconds
        self.clients, self.rate, self.rows = clients, rate, rows
        self.threads = clients if threads is None else threads
        self._dir = tempfile.TemporaryDirectory(prefix="harmony-traffic-")
        self._proc: subprocess.Popen[str] | None = None

    def start(self) -> Traffic:
        argv = [str(find_pgbench()), "-n", "-c", str(self.clients), "-j", str(self.threads),
                "-T", str(self.seconds)]
        if self.rate is not None:
            argv += ["-R", str(self.rate)]
        for name, weight in self.weights.items():
            path = Path(self._dir.name) / f"{name}.sql"
            path.write_text(SCRIPTS[name].format(rows=self.rows,
                                                 report_rows=max(1, self.rows // 5)))
            argv += ["-f", f"{path}@{weight}"]
        self._proc = subprocess.Popen([*argv, self.dsn], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
        return self

    def wait(self, timeout_s: float | None = None) -> TrafficResult:
        """Wait for pgbench to finish and parse its report."""
        assert self._proc is not None
        out, _ = self._proc.communicate(timeout=timeout_s)
        self._dir.cleanup()
        processed = re.search(r"number of transactions actually processed: (\d+)", out)
        failed = re.search(r"number of failed transactions: (\d+)", out)
        per_script = {}
        for name, count in re.findall(r"SQL script \d+: \S*/(\w+)\.sql\n(?:.*\n)*?"
                                      r" - (\d+) transactions", out):
            per_script[name] = int(count)
        return TrafficResult(processed=int(processed.group(1)) if processed else 0,
                             failed=int(failed.group(1)) if failed else 0,
                             per_script=per_script, returncode=self._proc.returncode,
                             output=out)

    def stop(self) -> str:
        """End the load now; returns what pgbench printed so far (errors, aborted clients;
        no summary)."""
        out = ""
        if self._proc is not None and self._proc.returncode is None:
            if self._proc.poll() is None:
                self._proc.terminate()
            out, _ = self._proc.communicate(timeout=10)  # reaps it and closes the pipe
        self._dir.cleanup()
        return out or ""


@dataclass
class Shop:
    """A private cluster holding the shop in its database ``shop`` (``dsn``), and the
    traffic running on it."""

    cluster: LocalCluster
    dsn: str
    traffic: Traffic

    def target(self) -> Target:
        """The tuner's target: the shop's database, its catalog read from the server,
        restarts through the local controller."""
        with psycopg.connect(self.dsn) as conn:
            catalog = KnobCatalog.from_connection(conn)
        return Target(dsn=self.dsn, catalog=catalog, controller=LocalController(self.cluster),
                      cluster=None, ram_bytes=None)


@contextmanager
def observed_cluster(prefix: str, dbname: str) -> Iterator[tuple[LocalCluster, str]]:
    """A private cluster (its directory under /tmp named from ``prefix``) that preloads
    pg_stat_statements (live mode reads it), with the database ``dbname``; its DSN. On the
    way out the cluster is stopped and removed."""
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp")),
                           sync_initdb=False)
    try:
        cluster.init()
        conf = cluster.data_dir / "postgresql.conf"
        conf.write_text(conf.read_text() + "\nshared_preload_libraries = 'pg_stat_statements'\n")
        cluster.start()
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {dbname}")
        yield cluster, cluster.dsn_for(dbname)
    finally:
        cluster.stop(mode="fast")
        cluster.destroy()


@contextmanager
def shop_with_traffic(prefix: str, *, rows: int = BENCH_ROWS,
                      weights: dict[str, int] | None = None, clients: int = 2,
                      seconds: int = 3600) -> Iterator[Shop]:
    """A private cluster (:func:`observed_cluster`), the shop of ``rows`` items in its
    database ``shop``, and :class:`Traffic` of ``weights`` (default :data:`BENCH_WEIGHTS`)
    from ``clients`` for up to ``seconds``, 3 s in when this yields; on the way out the
    traffic is stopped, then the cluster stopped and removed."""
    traffic: Traffic | None = None
    with observed_cluster(prefix, "shop") as (cluster, dsn):
        try:
            create_shop(dsn, rows=rows)
            traffic = Traffic(dsn, weights or BENCH_WEIGHTS, seconds=seconds, clients=clients,
                              rows=rows).start()
            time.sleep(3.0)
            yield Shop(cluster, dsn, traffic)
        finally:
            if traffic is not None:
                traffic.stop()


def error_lines(output: str) -> list[str]:
    """pgbench's lines of ``output`` that report an error or an aborted client."""
    return [line for line in output.splitlines()
            if "ERROR" in line or "aborted" in line or "FATAL" in line]
