"""apply_online_knobs against a real server: applied, verified, overrides detected, reset."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql

from harmony_base.errors import ConfigError, KnobApplyError
from tuner_client.knobs.apply import apply_online_knobs, reload_and_wait, reset_knobs
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.servers.local_cluster import LocalCluster

MB = 1024 * 1024


@pytest.fixture(scope="module")
def cluster(cluster_factory: Callable[..., LocalCluster]) -> Iterator[LocalCluster]:
    """A private cluster for this module: ALTER SYSTEM here must not leak into shared tests."""
    c = cluster_factory("apply")
    try:
        yield c
    finally:
        c.destroy()


@pytest.fixture
def conn(cluster: LocalCluster) -> Iterator[psycopg.Connection]:
    with psycopg.connect(cluster.dsn, autocommit=True) as c:
        yield c
        c.execute("ALTER SYSTEM RESET ALL")
        c.execute("SELECT pg_reload_conf()")


def _new_session_value(dsn: str, name: str) -> tuple[str, str]:
    with psycopg.connect(dsn) as c:
        row = c.execute(
            "SELECT current_setting(name), source FROM pg_settings WHERE name = %s", [name]
        ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_online_knobs_applied_and_verified(cluster: LocalCluster, conn: psycopg.Connection) -> None:
    catalog = KnobCatalog.from_connection(conn)
    report = apply_online_knobs(conn, catalog, {
        "work_mem": "64MB",
        "maintenance_work_mem": 128 * MB,  # canonical bytes work too
        "effective_cache_size": "2GB",
        "random_page_cost": 1.1,
        "temp_buffers": "16MB",
        "jit": False,
    })
    assert report.requested == {
        "work_mem": "64MB", "maintenance_work_mem": "128MB", "effective_cache_size": "2GB",
        "random_page_cost": "1.1", "temp_buffers": "16MB", "jit": "off",
    }
    assert report.in_force == report.requested
    assert set(report.changed) == set(report.requested)
    assert report.elapsed_s < 5.0
    assert _new_session_value(cluster.dsn, "work_mem") == ("64MB", "configuration file")
    assert _new_session_value(cluster.dsn, "random_page_cost") == ("1.1", "configuration file")
    auto_conf = (cluster.data_dir / "postgresql.auto.conf").read_text()
    assert "work_mem = '64MB'" in auto_conf and "effective_cache_size = '2GB'" in auto_conf
    # applying the same values again changes nothing
    again = apply_online_knobs(conn, catalog, {"work_mem": "64MB"})
    assert again.changed == []


def test_reset_knobs_restores_defaults(cluster: LocalCluster, conn: psycopg.Connection) -> None:
    catalog = KnobCatalog.from_connection(conn)
    apply_online_knobs(conn, catalog, {"work_mem": "32MB"})
    assert _new_session_value(cluster.dsn, "work_mem")[0] == "32MB"
    reset_knobs(conn, ["work_mem"], catalog)
    deadline = time.monotonic() + 5
    while _new_session_value(cluster.dsn, "work_mem")[0] != "4MB" and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _new_session_value(cluster.dsn, "work_mem") == ("4MB", "default")
    assert "work_mem" not in (cluster.data_dir / "postgresql.auto.conf").read_text()


def test_reload_and_wait_returns_once_this_session_sees_the_files(
        conn: psycopg.Connection) -> None:
    """The restore path reads settings right after a reload in the same session; every read
    after reload_and_wait must already show the new file, and its load time is past the
    stamp taken before the reload."""
    for value in ("6MB", "7MB", "8MB", "9MB", "10MB"):
        conn.execute(sql.SQL("ALTER SYSTEM SET work_mem = {}").format(sql.Literal(value)))
        before = conn.execute("SELECT clock_timestamp()").fetchone()
        assert reload_and_wait(conn, timeout_s=10) is True
        row = conn.execute("SELECT current_setting('work_mem'), pg_conf_load_time() >= %s",
                           [before[0] if before else None]).fetchone()
        assert row == (value, True)


def test_bad_requests_change_nothing(cluster: LocalCluster, conn: psycopg.Connection) -> None:
    catalog = KnobCatalog.from_connection(conn)
    auto_conf = cluster.data_dir / "postgresql.auto.conf"
    before = auto_conf.read_text()
    with pytest.raises(ConfigError, match="did you mean 'work_mem'"):
        apply_online_knobs(conn, catalog, {"work_mme": "64MB"})
    with pytest.raises(ConfigError, match="shared_buffers needs a server restart"):
        apply_online_knobs(conn, catalog, {"work_mem": "8MB", "shared_buffers": "256MB"})
    with pytest.raises(ConfigError, match="work_mem must be between 64kB and"):
        apply_online_knobs(conn, catalog, {"work_mem": "5TB"})
    with pytest.raises(ConfigError, match="block_size"):
        apply_online_knobs(conn, catalog, {"block_size": 8192})
    assert auto_conf.read_text() == before


def test_open_transaction_is_refused(cluster: LocalCluster) -> None:
    with psycopg.connect(cluster.dsn) as c:
        catalog = KnobCatalog.from_connection(c)
        with pytest.raises(KnobApplyError, match="inside a transaction"):
            apply_online_knobs(c, catalog, {"work_mem": "8MB"})


#: the reload wait of the override test: far above a reload on a loaded machine
RELOAD_WAIT_S = 60.0


def test_database_setting_override_is_detected(cluster: LocalCluster,
                                               conn: psycopg.Connection) -> None:
    conn.execute("CREATE DATABASE overridden")
    try:
        conn.execute("ALTER DATABASE overridden SET work_mem = '8MB'")
        with psycopg.connect(cluster.dsn_for("overridden"), autocommit=True) as c:
            catalog = KnobCatalog.from_connection(c)
            started = time.monotonic()
            with pytest.raises(KnobApplyError) as err:
                apply_online_knobs(c, catalog, {"work_mem": "64MB"}, timeout_s=RELOAD_WAIT_S)
            elapsed = time.monotonic() - started
        msg = str(err.value)
        assert "work_mem is overridden" in msg and "8MB" in msg and "'database'" in msg
        assert "ALTER DATABASE" in msg
        # detected as soon as the reload landed, not after the timeout (a long one, so that a
        # loaded machine's slow reload is not mistaken for waiting it out)
        assert elapsed < RELOAD_WAIT_S / 2, elapsed
    finally:
        conn.execute(sql.SQL("DROP DATABASE overridden WITH (FORCE)"))


def test_command_line_override_is_detected(cluster: LocalCluster) -> None:
    own_cluster = cluster  # restarted here; the module's last test
    own_cluster.stop()
    # what `pg_ctl restart -o "-c work_mem=8MB"` would leave behind
    proc = own_cluster.run([str(own_cluster.bin_dir / "pg_ctl"), "-D", str(own_cluster.data_dir),
                            "-l", str(own_cluster.log_path), "-w", "-o", "-c work_mem=8MB",
                            "start"])
    assert proc.returncode == 0, proc.stderr
    assert "work_mem=8MB" in own_cluster.postmaster_opts()
    with psycopg.connect(own_cluster.dsn, autocommit=True) as c:
        catalog = KnobCatalog.from_connection(c)
        with pytest.raises(KnobApplyError, match=r"work_mem is overridden.*'command line'"):
            apply_online_knobs(c, catalog, {"work_mem": "64MB"})
    # our restart is stop + start without -o: the saved option is gone afterwards
    own_cluster.restart()
    assert "-c" not in own_cluster.postmaster_opts().split()
    with psycopg.connect(own_cluster.dsn, autocommit=True) as c:
        report = apply_online_knobs(c, catalog, {"work_mem": "64MB"})
        c.execute("ALTER SYSTEM RESET ALL")
    assert report.in_force == {"work_mem": "64MB"}
