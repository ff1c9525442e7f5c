"""Held-out live traffic: sysbench's ``oltp_read_write`` from its own process, for live mode's
benchmarks (issue 51's live row: "held-out sysbench oltp_read_write, 4 threads, traffic the
tuner does not drive" read ±11 % at the end of a 598-s run).

sysbench (Debian's ``sysbench``, built with the PostgreSQL driver) is not a test dependency:
:func:`sysbench_with_traffic` installs it with apt-get when it is missing (root) and says so.
The cluster preloads pg_stat_statements (live mode reads it); ``sysbench ... prepare`` fills
``tables`` tables of ``table_size`` rows in the database ``sbtest``; ``run`` then sends
``threads`` closed-loop clients for up to ``seconds`` while the tuner only observes.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from benchmarks.live_traffic import Shop, observed_cluster
from tuner_client.servers.local_cluster import LocalCluster


def find_sysbench() -> str:
    """sysbench's path; installed from the OS packages when missing and we are root."""
    found = shutil.which("sysbench")
    if found is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "sysbench"], check=True,
                       capture_output=True)
        found = shutil.which("sysbench")
    if found is None:
        raise RuntimeError("sysbench is not installed and apt-get could not install it")
    return found


class SysbenchTraffic:
    """``sysbench oltp_read_write`` against the cluster's ``sbtest`` in its own process."""

    def __init__(self, cluster: LocalCluster, *, threads: int, tables: int, table_size: int,
                 seconds: int) -> None:
        self.args = [find_sysbench(), "oltp_read_write", "--db-driver=pgsql",
                     "--pgsql-host=127.0.0.1", f"--pgsql-port={cluster.port}",
                     "--pgsql-user=postgres", "--pgsql-db=sbtest", f"--tables={tables}",
                     f"--table-size={table_size}", f"--threads={threads}"]
        self.seconds = seconds
        self._proc: subprocess.Popen[str] | None = None

    def prepare(self) -> None:
        subprocess.run([*self.args, "prepare"], check=True, capture_output=True, text=True)

    def start(self) -> SysbenchTraffic:
        self._proc = subprocess.Popen(
            [*self.args, f"--time={self.seconds}", "--report-interval=10", "run"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return self

    def stop(self) -> str:
        """End the load now; what sysbench printed (its 10-s reports, errors)."""
        out = ""
        if self._proc is not None and self._proc.returncode is None:
            if self._proc.poll() is None:
                self._proc.terminate()
            out, _ = self._proc.communicate(timeout=10)
        return out or ""


@contextmanager
def sysbench_with_traffic(prefix: str, *, threads: int = 4, tables: int = 4,
                          table_size: int = 100_000, seconds: int = 3600) -> Iterator[Shop]:
    """A private cluster preloading pg_stat_statements, sysbench's tables in ``sbtest`` and
    its ``oltp_read_write`` running from ``threads`` clients, 5 s in when this yields; on the
    way out the traffic is stopped and the cluster stopped and removed."""
    traffic: SysbenchTraffic | None = None
    with observed_cluster(prefix, "sbtest") as (cluster, dsn):
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            traffic = SysbenchTraffic(cluster, threads=threads, tables=tables,
                                      table_size=table_size, seconds=seconds)
            traffic.prepare()
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE")
            traffic.start()
            time.sleep(5.0)
            yield Shop(cluster, dsn, traffic)  # type: ignore[arg-type]  # the same stop()
        finally:
            if traffic is not None:
                traffic.stop()
