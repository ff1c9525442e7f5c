"""LocalCluster against a real PostgreSQL: non-root, loopback only, clean restarts, cgroup."""

from __future__ import annotations

import os
import pwd
import tempfile
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from harmony_base.errors import ConfigError, DatabaseError
from tuner_client.servers.cgroups import CGROUP_ROOT
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.pg_binaries import find_bin_dir


def test_shared_cluster_answers_and_runs_unprivileged(pg_cluster: LocalCluster) -> None:
    with psycopg.connect(pg_cluster.dsn) as conn:
        row = conn.execute(
            "SELECT current_user, current_setting('listen_addresses'), "
            "current_setting('port')::int, current_setting('server_encoding')"
        ).fetchone()
    assert row == ("postgres", "127.0.0.1", pg_cluster.port, "UTF8")
    pid = int((pg_cluster.data_dir / "postmaster.pid").read_text().split()[0])
    owner_uid = os.stat(f"/proc/{pid}").st_uid
    if os.geteuid() == 0:
        assert owner_uid != 0
        assert pwd.getpwuid(owner_uid).pw_name == pg_cluster.os_user
    else:
        assert owner_uid == os.geteuid()
    # the unix socket lives in the private state dir
    assert (pg_cluster.socket_dir / f".s.PGSQL.{pg_cluster.port}").exists()


def test_fresh_dsn_is_its_own_database(fresh_dsn: str) -> None:
    with psycopg.connect(fresh_dsn) as conn:
        name = conn.execute("SELECT current_database()").fetchone()
    assert name is not None and name[0].startswith("t_")


def test_restart_leaves_no_options_in_postmaster_opts(own_cluster: LocalCluster) -> None:
    with psycopg.connect(own_cluster.dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET shared_buffers = '24MB'")
        before = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
    own_cluster.restart()
    own_cluster.restart()
    assert own_cluster.is_running()
    opts = own_cluster.postmaster_opts()
    assert opts.strip() != "" and "-c" not in opts.split() and "-o" not in opts.split()
    with psycopg.connect(own_cluster.dsn) as conn:
        after = conn.execute("SELECT pg_postmaster_start_time()").fetchone()
        sb = conn.execute("SELECT current_setting('shared_buffers')").fetchone()
    assert before is not None and after is not None and after[0] > before[0]
    assert sb == ("24MB",)
    own_cluster.stop()
    assert not own_cluster.is_running()
    own_cluster.stop()  # stopping a stopped cluster is a no-op


def test_bad_bin_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="pg_ctl"):
        find_bin_dir(tmp_path)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root switches to an unprivileged user")
def test_state_dir_under_root_is_refused() -> None:
    cluster = LocalCluster(Path("/root/harmony-should-not-exist"))
    with pytest.raises(ConfigError, match="/root"):
        cluster.init()


def _memory_cgroup_writable() -> bool:
    if os.geteuid() != 0:
        return False
    v1 = CGROUP_ROOT / "memory" / "memory.limit_in_bytes"
    v2 = CGROUP_ROOT / "cgroup.controllers"
    return v1.exists() or (v2.exists() and "memory" in v2.read_text())


@pytest.mark.skipif(not _memory_cgroup_writable(), reason="no writable memory cgroup here")
def test_memory_limit_puts_postmaster_in_a_cgroup(
    cluster_factory: Callable[..., LocalCluster],
) -> None:
    limit = 512 * 1024 * 1024
    cluster = cluster_factory("cg", memory_limit_bytes=limit)
    try:
        cg = cluster.cgroup_path()
        assert cg is not None
        pid = int((cluster.data_dir / "postmaster.pid").read_text().split()[0])
        procs = {int(p) for p in (cg / "cgroup.procs").read_text().split()}
        assert pid in procs
        v2 = (cg / "memory.max").exists()
        limit_file = cg / ("memory.max" if v2 else "memory.limit_in_bytes")
        assert int(limit_file.read_text()) == limit
        assert cluster.effective_ram_bytes() == limit
        cluster.stop()
        assert not cg.exists()
    finally:
        cluster.destroy()


def test_context_manager_and_loopback_only_hba(_pg_template: Path) -> None:
    # _pg_template went through initdb (LocalCluster.init) in this session; copy it
    state = Path(tempfile.mkdtemp(prefix="harmony-test-cm-", dir="/tmp"))
    cluster = LocalCluster(state, template_data_dir=_pg_template)
    try:
        with cluster as c:
            assert c.is_running()
            with psycopg.connect(c.dsn) as conn:
                enc = conn.execute("SHOW server_encoding").fetchone()
            assert enc == ("UTF8",)
        assert not cluster.is_running()
        hba = (cluster.data_dir / "pg_hba.conf").read_text()
        assert "127.0.0.1/32 trust" in hba and "0.0.0.0" not in hba and "::1" not in hba
    finally:
        cluster.destroy()
    assert not state.exists()


def test_reopened_cluster_starts_on_its_own_new_port(_pg_template: Path) -> None:
    # a second LocalCluster object on an existing state dir picks a new port (port=None):
    # the config written on start must follow it, so the object's DSN reaches the server
    state = Path(tempfile.mkdtemp(prefix="harmony-test-port-", dir="/tmp"))
    first = LocalCluster(state, template_data_dir=_pg_template, sync_initdb=False)
    try:
        first.start()
        old_port = first.port
        first.stop()
        second = LocalCluster(state)
        while second.port == old_port:  # a free port may be handed out twice; force a change
            second = LocalCluster(state)
        second.start()
        conf = (second.data_dir / "harmony_local.conf").read_text()
        assert f"port = {second.port}\n" in conf
        with psycopg.connect(second.dsn, connect_timeout=10) as conn:
            row = conn.execute("SELECT current_setting('port')::int").fetchone()
        assert row == (second.port,)
        # a third object while the server runs adopts the running port instead of a dead one
        third = LocalCluster(state)
        third.start()
        assert third.port == second.port == third.running_port()
        second.stop()
        assert not third.is_running()
    finally:
        first.destroy()
    assert not state.exists()
