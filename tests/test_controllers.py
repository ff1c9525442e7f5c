"""Controllers against real servers: offline restarts verified, impossible ones rolled back."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from harmony_base.errors import ConfigError, DatabaseError
from tuner_client.servers.controllers import (
    CommandController,
    Controller,
    LocalController,
    PgCtlController,
    make_controller,
)
from tuner_client.servers.local_cluster import LocalCluster

REPO = Path(__file__).resolve().parents[1]

#: a hang guard for a Python subprocess of this project (its imports are ~3 s of CPU, but one
#: took over 120 s of wall clock at a load average of ~33 and 309 s at ~75); the test's own
#: timeout is set above it
SUBPROCESS_S = 600.0


def _shown(dsn: str, name: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT current_setting(%s)", [name]).fetchone()
    assert row is not None
    return str(row[0])


def _too_big_for_this_machine() -> str:
    """A shared_buffers that cannot be mapped here: 4× (RAM + swap), capped by PG's maximum."""
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    kb = int(info["MemTotal"].split()[0]) + int(info["SwapTotal"].split()[0])
    gb = min(7 * 1024, max(1, 4 * kb // (1024 * 1024)))
    return f"{gb}GB"


def test_restarts_verified_for_local_pg_ctl_and_command_controllers(
    own_cluster: LocalCluster,
) -> None:
    ctl = LocalController(own_cluster)
    report = ctl.restart_with({"shared_buffers": "48MB"}, timeout_s=30)
    assert report.ok and report.reason is None and not report.rolled_back
    assert report.requested == {"shared_buffers": "48MB"}
    assert report.in_force == {"shared_buffers": "48MB"}
    assert 0 < report.restart_s < 30
    assert report.precheck is not None and report.precheck.startswith("shared_memory_size=")
    assert _shown(own_cluster.dsn, "shared_buffers") == "48MB"
    assert "-c" not in own_cluster.postmaster_opts().split()
    last_good = own_cluster.state_dir / "postgresql.auto.conf.last-good"
    assert "shared_buffers = '48MB'" in last_good.read_text()
    original = own_cluster.state_dir / "postgresql.auto.conf.original"
    assert "shared_buffers" not in original.read_text()
    # canonical bytes work as well; several knobs at once (an online one rides along)
    report = ctl.restart_with({"shared_buffers": 40 * 2**20, "work_mem": "16MB"}, timeout_s=30)
    assert report.ok and report.in_force == {"shared_buffers": "40MB", "work_mem": "16MB"}
    assert ctl.restarts == 2 and ctl.failures == 0
    # an interrupted restart: a bad value written, server stopped, tuner gone -> recovered
    with psycopg.connect(own_cluster.dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET shared_buffers = '7TB'")
    own_cluster.stop()
    ctl.ensure_running(timeout_s=30)
    assert own_cluster.is_running()
    assert _shown(own_cluster.dsn, "shared_buffers") == "40MB"
    # the same data directory driven by the pg_ctl controller (run as its owner when root)
    pg = PgCtlController(own_cluster.data_dir, own_cluster.dsn, log_path=own_cluster.log_path)
    assert pg.os_user == own_cluster.os_user
    report = pg.restart_with({"shared_buffers": "32MB"}, timeout_s=30)
    assert report.ok, report.reason
    assert _shown(own_cluster.dsn, "shared_buffers") == "32MB"
    backup = own_cluster.data_dir / "postgresql.auto.conf.last-good"
    assert os.stat(backup).st_uid == os.stat(own_cluster.data_dir).st_uid
    # and by a user-given stop/start command pair with a health check
    prefix = " ".join(shlex.quote(p) for p in own_cluster.command_prefix())
    pg_ctl_cmd = f"{prefix} {own_cluster.bin_dir / 'pg_ctl'} -D {own_cluster.data_dir}"
    cmd = CommandController(
        own_cluster.dsn,
        stop_command=f"{pg_ctl_cmd} -m fast -w stop",
        start_command=f"{pg_ctl_cmd} -l {own_cluster.log_path} -w start",
        health_command=f"{own_cluster.bin_dir / 'pg_isready'} -h 127.0.0.1 "
                       f"-p {own_cluster.port}",
        auto_conf_path=own_cluster.data_dir / "postgresql.auto.conf",
    )
    report = cmd.restart_with({"shared_buffers": "24MB"}, timeout_s=30)
    assert report.ok and report.in_force == {"shared_buffers": "24MB"}
    if Path("/proc/sys/vm/overcommit_memory").read_text().strip() != "1":
        # no pre-check here: the start fails and is rolled back through the same commands
        report = cmd.restart_with({"shared_buffers": _too_big_for_this_machine()}, timeout_s=30)
        assert not report.ok and report.rolled_back
        assert report.in_force == {"shared_buffers": "24MB"}
    assert own_cluster.is_running()


def test_impossible_shared_buffers_is_rolled_back(own_cluster: LocalCluster) -> None:
    if Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1":
        pytest.skip("vm.overcommit_memory=1: any shared memory size maps, nothing fails")
    huge = _too_big_for_this_machine()
    # 1. the pre-check (postgres -C shared_memory_size) refuses it before any start attempt
    ctl = LocalController(own_cluster)
    report = ctl.restart_with({"shared_buffers": huge}, timeout_s=30)
    assert not report.ok and report.rolled_back
    assert report.reason is not None and report.reason.startswith("pre-check:")
    assert "shared_memory_size" in report.reason
    assert report.in_force == {"shared_buffers": "128MB"}
    assert own_cluster.is_running() and _shown(own_cluster.dsn, "shared_buffers") == "128MB"
    # 2. without the pre-check the start really fails; rolled back to the previous value
    ctl = LocalController(own_cluster, precheck_memory=False)
    assert ctl.restart_with({"shared_buffers": "64MB"}, timeout_s=30).ok
    report = ctl.restart_with({"shared_buffers": huge}, timeout_s=30)
    assert not report.ok and report.rolled_back and ctl.failures == 1
    assert report.reason is not None and "server did not start" in report.reason
    assert "could not map anonymous shared memory" in report.reason
    assert report.in_force == {"shared_buffers": "64MB"}
    assert own_cluster.is_running() and _shown(own_cluster.dsn, "shared_buffers") == "64MB"
    auto_conf = (own_cluster.data_dir / "postgresql.auto.conf").read_text()
    assert huge not in auto_conf and "shared_buffers = '64MB'" in auto_conf


@pytest.mark.timeout(SUBPROCESS_S + 120)
def test_signal_during_restart_is_held_until_server_is_back(own_cluster: LocalCluster) -> None:
    script = textwrap.dedent(f"""
        import os, signal, sys
        from pathlib import Path
        from tuner_client.servers.controllers import LocalController
        from tuner_client.servers.local_cluster import LocalCluster

        class Interrupted(LocalController):
            def stop_server(self, timeout_s):
                os.kill(os.getpid(), signal.SIGTERM)  # SIGTERM arrives mid-restart
                super().stop_server(timeout_s)

        cluster = LocalCluster(Path({str(own_cluster.state_dir)!r}), port={own_cluster.port})
        ctl = Interrupted(cluster)
        with ctl.safe_restart_guard():
            ctl.restart_with({{"shared_buffers": "40MB"}}, timeout_s=30)
            print("not reached")
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=SUBPROCESS_S, check=False)
    assert proc.returncode == 128 + 15, proc.stderr
    assert "not reached" not in proc.stdout
    assert own_cluster.is_running()
    assert _shown(own_cluster.dsn, "shared_buffers") == "40MB"


def test_registry_and_construction_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    assert set(Controller.registry) >= {"local", "pg_ctl", "docker", "command"}
    with pytest.raises(ConfigError, match="unknown controller kind 'systemd'"):
        make_controller("systemd")
    with pytest.raises(ConfigError, match="not a PostgreSQL data directory"):
        make_controller("pg_ctl", data_dir=tmp_path, dsn="host=127.0.0.1")
    with pytest.raises(ConfigError, match="restart_command"):
        CommandController("host=127.0.0.1")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(DatabaseError, match="no Docker engine reachable"):
        make_controller("docker", container="pg", dsn="host=127.0.0.1")


def test_restart_after_a_backend_crash_waits_for_recovery(own_cluster: LocalCluster,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    """A backend killed with SIGKILL (what the OOM killer does) sends the server into crash
    recovery; the next restart waits for it instead of rolling back a server mid-recovery."""
    import logging
    import signal
    import time

    ctl = LocalController(own_cluster)
    with psycopg.connect(own_cluster.dsn, autocommit=True) as victim:
        pid = victim.info.backend_pid
        os.kill(pid, signal.SIGKILL)  # the tests run as root; the backend is the harmony user's
        time.sleep(0.05)
        with caplog.at_level(logging.INFO, logger="tuner_client.servers.controllers"):
            started = time.monotonic()
            report = ctl.restart_with({"shared_buffers": "48MB"}, timeout_s=60)
            took = time.monotonic() - started
    assert report.ok, report.reason
    assert "PostgreSQL was recovering (a crash-restart); it is up again" in caplog.text
    assert "restoring the last good configuration" not in caplog.text
    assert took < 30
    assert _shown(own_cluster.dsn, "shared_buffers") == "48MB"
    log = own_cluster.log_path.read_text(errors="replace")
    # "server process (PID n)" up to PostgreSQL 15, "client backend (PID n)" from 16 on
    assert re.search(rf"(server process|client backend) \(PID {pid}\) was terminated by "
                     rf"signal 9", log), log[-2000:]
