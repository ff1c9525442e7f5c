"""The memory limit of the embedded cluster (``database.memory_limit``) holds across restarts
and for the duet's clone (made and run in a cgroup of its own with the same limit, in a real
tuning run's final race too): otherwise the page cache the server filled stays cached outside any
limit and a restart knob's race measures a machine with the host's RAM (issue 51). A real
tuning run's duet under the limit is ``test_final_duet``'s whole run, which runs its server in
such a cgroup wherever this module runs."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from duet_fixtures import clone_parent  # noqa: F401  (fixture)

from tuner_client.duet.clone import make_clone
from tuner_client.servers.cgroups import CGROUP_ROOT
from tuner_client.servers.local_cluster import LocalCluster

LIMIT = 512 * 2 ** 20

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not (CGROUP_ROOT / "memory" / "memory.limit_in_bytes").exists(),
    reason="needs root and the cgroup v1 memory controller")


def _cache(cg: Path) -> int:
    """The page cache of files charged to the memory cgroup ``cg`` (bytes; v1's ``cache``
    less ``shmem``, the shared memory that a stop frees)."""
    stat = dict(line.split() for line in (cg / "memory.stat").read_text().splitlines())
    return int(stat["cache"]) - int(stat["shmem"])


def _postmaster(cluster: LocalCluster) -> int:
    return int((cluster.data_dir / "postmaster.pid").read_text().split()[0])


def _fill(cluster: LocalCluster) -> str:
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench")
    dsn = cluster.dsn_for("bench")
    subprocess.run([str(cluster.bin_dir / "pgbench"), "-i", "-q", "-s", "3", dsn], check=True,
                   capture_output=True)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    return dsn


def test_a_restart_keeps_the_server_and_its_page_cache_in_its_memory_cgroup(
        cluster_factory: Callable[..., LocalCluster]) -> None:
    cluster = cluster_factory("cg-restart", memory_limit_bytes=LIMIT)
    _fill(cluster)
    cg = cluster.cgroup_path()
    assert cg is not None
    before = _cache(cg)
    assert before > 40 * 2 ** 20  # pgbench's 3 scale units, written through this cgroup
    cluster.restart()
    # the same cgroup, the new postmaster in it, and the cache still charged to it (a new
    # cgroup read 39 of 351 MB after a restart: the rest was cached outside any limit)
    assert cluster.cgroup_path() == cg
    assert _postmaster(cluster) in {int(p) for p in (cg / "cgroup.procs").read_text().split()}
    assert int((cg / "memory.limit_in_bytes").read_text()) == LIMIT
    assert _cache(cg) >= 0.8 * before
    cluster.stop()
    assert not cg.exists()


def test_the_clone_of_a_limited_cluster_runs_and_copies_under_the_same_limit(
        cluster_factory: Callable[..., LocalCluster], tmp_path: Path,
        clone_parent: Path) -> None:  # noqa: F811
    server = cluster_factory("cg-clone", memory_limit_bytes=LIMIT)
    dsn = _fill(server)
    clone = make_clone(dsn, journals=tmp_path / "journals", mark="cg-clone",
                       parent=clone_parent, memory_limit_bytes=LIMIT)
    cg = clone.cluster.cgroup_path()
    try:
        assert cg is not None and cg != server.cgroup_path()
        assert int((cg / "memory.limit_in_bytes").read_text()) == LIMIT
        procs = {int(p) for p in (cg / "cgroup.procs").read_text().split()}
        assert _postmaster(clone.cluster) in procs
        # the copy was made inside the clone's cgroup: its page cache is charged there
        # (at least the pgbench data, about 45 MB), not to the tuner outside any limit
        assert _cache(cg) >= 0.8 * clone.size_bytes
        clone.apply({"shared_buffers": "64MB"})  # a restart stays in the cgroup
        assert clone.cluster.cgroup_path() == cg
        assert _postmaster(clone.cluster) in {
            int(p) for p in (cg / "cgroup.procs").read_text().split()}
    finally:
        clone.remove()
    assert not cg.exists()
