"""A private PostgreSQL with a tiny TPC-H database, shared by the tuner's measuring and flow tests.

Private (not ``pg_cluster``) because these tests change server-wide settings with ALTER SYSTEM
and restart the server for shared_buffers.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tuner_client.local_cluster import LocalCluster
from workloads.tpch.load import load_tpch


@dataclass
class TpchCluster:
    cluster: LocalCluster
    dsn: str  # the TPC-H database


@pytest.fixture(scope="session")
def tpch_cluster() -> Iterator[TpchCluster]:
    """A started private cluster with TPC-H SF 0.01 in database ``tpch``; destroyed at the end."""
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="harmony-test-tune-", dir="/tmp")),
                           sync_initdb=False)
    try:
        cluster.start()
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE tpch")
        dsn = cluster.dsn_for("tpch")
        load_tpch(dsn, 0.01)
        yield TpchCluster(cluster, dsn)
    finally:
        cluster.destroy()
