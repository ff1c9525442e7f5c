"""The pg_ctl controller: an existing data directory, restarted with pg_ctl stop + start."""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Mapping
from pathlib import Path

from harmony_base.errors import ConfigError, DatabaseError
from harmony_base.jsontypes import JSONObject
from tuner_client.knobs.catalog import Knob, KnobValue
from tuner_client.servers.controllers.base import AUTO_CONF, Controller
from tuner_client.servers.host_memory import detect_ram_bytes
from tuner_client.servers.pg_binaries import data_major, find_bin_dir


class PgCtlController(Controller, kind="pg_ctl"):
    """An existing data directory, restarted with ``pg_ctl -w -t`` stop + start.

    When the tuner runs as root, pg_ctl runs as the data directory's owner (PostgreSQL
    refuses root). Backups go to ``backup_dir`` (default: the data directory).
    """

    def __init__(self, data_dir: Path, dsn: str, *, bin_dir: Path | None = None,
                 os_user: str | None = None, log_path: Path | None = None,
                 backup_dir: Path | None = None, ram_bytes: int | None = None,
                 precheck_memory: bool = True) -> None:
        self.data_dir = Path(data_dir).absolute()
        if not (self.data_dir / "PG_VERSION").exists():
            raise ConfigError(f"pg_ctl controller: {self.data_dir} is not a PostgreSQL data "
                              "directory (no PG_VERSION file)")
        super().__init__(dsn, backup_dir=backup_dir if backup_dir is not None else self.data_dir)
        # binaries of the data directory's major (the default ones may be another's)
        self.bin_dir = find_bin_dir(bin_dir, major=data_major(self.data_dir))
        self.log_path = Path(log_path) if log_path else self.data_dir / "harmony-pg_ctl.log"
        self.ram_bytes = ram_bytes
        self.precheck_memory = precheck_memory
        st = self.data_dir.stat()
        self._owner = pwd.getpwuid(st.st_uid)
        if os.geteuid() == 0:
            if st.st_uid == 0:
                raise ConfigError(f"pg_ctl controller: {self.data_dir} is owned by root; "
                                  "PostgreSQL cannot run as root")
            self.os_user: str | None = os_user or self._owner.pw_name
        else:
            if st.st_uid != os.geteuid():
                raise ConfigError(
                    f"pg_ctl controller: {self.data_dir} belongs to {self._owner.pw_name!r} "
                    f"but the tuner runs as {pwd.getpwuid(os.geteuid()).pw_name!r}; run it as "
                    "the owner or as root"
                )
            self.os_user = None

    def _write_backup(self, name: str, text: str) -> None:
        super()._write_backup(name, text)
        if self.backup_dir is not None and os.geteuid() == 0:
            # backups inside a data directory must stay readable by its owner (pg_basebackup)
            st = self.data_dir.stat()
            os.chown(self.backup_dir / name, st.st_uid, st.st_gid)

    def _run(self, argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", self.os_user, "--"] if self.os_user else []
        try:
            return subprocess.run(prefix + argv, capture_output=True, text=True, check=False,
                                  timeout=timeout_s, cwd="/",
                                  env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                                       "LC_ALL": "C"})
        except subprocess.TimeoutExpired as exc:
            raise DatabaseError(f"{Path(argv[0]).name} did not finish within "
                                f"{timeout_s:.0f} s") from exc

    def _pg_ctl(self, *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
        return self._run([str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), *args],
                         timeout_s=timeout_s + 30)

    def server_running(self) -> bool:
        return self._pg_ctl("status", timeout_s=10).returncode == 0

    def stop_server(self, timeout_s: float) -> None:
        if not self.server_running():
            return
        t = str(max(1, int(timeout_s)))
        proc = self._pg_ctl("-m", "fast", "-w", "-t", t, "stop", timeout_s=timeout_s)
        if proc.returncode != 0 and self.server_running():
            raise DatabaseError(f"pg_ctl stop failed: {(proc.stderr or proc.stdout).strip()}")

    def start_server(self, timeout_s: float) -> None:
        t = str(max(1, int(timeout_s)))
        proc = self._pg_ctl("-l", str(self.log_path), "-w", "-t", t, "start",
                            timeout_s=timeout_s)
        if proc.returncode != 0:
            raise DatabaseError(f"pg_ctl start failed: {(proc.stderr or proc.stdout).strip()}")
        if not self.wait_until_up(min(timeout_s, 10.0)):
            raise DatabaseError("pg_ctl reported the server started, but it does not accept "
                                f"connections on {self.dsn}")

    def recipe(self) -> JSONObject | None:
        return {"kind": "pg_ctl", "options": {
            "data_dir": str(self.data_dir), "bin_dir": str(self.bin_dir),
            "os_user": self.os_user, "log_path": str(self.log_path),
            "backup_dir": str(self.backup_dir) if self.backup_dir else None,
            "precheck_memory": False}}

    def read_auto_conf(self) -> str | None:
        try:
            return (self.data_dir / AUTO_CONF).read_text()
        except FileNotFoundError:
            return ""

    def write_auto_conf(self, text: str) -> None:
        path = self.data_dir / AUTO_CONF
        tmp = path.with_name(path.name + ".harmony-tmp")
        tmp.write_text(text)
        tmp.chmod(0o600)
        st = self.data_dir.stat()
        if os.geteuid() == 0:
            os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, path)

    def log_mark(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_since(self, mark: int) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(mark)
                return fh.read().decode(errors="replace")
        except OSError:
            return ""

    def effective_ram_bytes(self) -> int:
        return self.ram_bytes if self.ram_bytes is not None else detect_ram_bytes()

    def precheck(self, knobs: Mapping[str, tuple[Knob, KnobValue]]
                 ) -> tuple[str | None, str | None]:
        """``postgres -C shared_memory_size`` on the stopped server (PG ≥ 15), against RAM."""
        proc = self._run([str(self.bin_dir / "postgres"), "-D", str(self.data_dir), "-C",
                          "shared_memory_size"], timeout_s=60)
        if proc.returncode != 0:
            err = (proc.stderr or proc.stdout).strip()
            if "unrecognized configuration parameter" in err:
                return None, None  # PostgreSQL < 15: nothing to pre-check
            return None, f"postgres -C rejected the configuration: {err[-500:]}"
        try:
            need = int(proc.stdout.strip()) * 1024 * 1024  # reported in MB
        except ValueError:
            return None, None
        found = f"shared_memory_size={need // (1024 * 1024)}MB"
        ram = self.effective_ram_bytes()
        if self.precheck_memory and need > ram:
            return found, (f"the server would need {need // 2**20}MB of shared memory "
                           f"(shared_memory_size) but only {ram // 2**20}MB of RAM is available")
        return found, None
