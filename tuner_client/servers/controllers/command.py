"""The command controller: user-given stop/start/restart and health commands (systemd etc.)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from harmony_base.errors import ConfigError, DatabaseError
from harmony_base.jsontypes import JSONObject
from tuner_client.servers.controllers.base import Controller


class CommandController(Controller, kind="command"):
    """A user-given restart command (systemd etc.) plus a health check.

    ``restart_command`` (or ``stop_command`` + ``start_command``) is split with shlex and run
    without a shell. Health: ``health_command`` exiting 0, else a successful connection.
    Rollback needs ``auto_conf_path`` (the server's postgresql.auto.conf on this machine).
    """

    def __init__(self, dsn: str, *, restart_command: str | None = None,
                 stop_command: str | None = None, start_command: str | None = None,
                 health_command: str | None = None, auto_conf_path: Path | None = None,
                 backup_dir: Path | None = None) -> None:
        super().__init__(dsn, backup_dir=backup_dir)
        if restart_command is None and (stop_command is None or start_command is None):
            raise ConfigError("command controller: give restart_command, or both stop_command "
                              "and start_command")
        self.restart_command = restart_command
        self.stop_command = stop_command
        self.start_command = start_command
        self.health_command = health_command
        self.auto_conf_path = Path(auto_conf_path) if auto_conf_path else None

    def recipe(self) -> JSONObject | None:
        return {"kind": "command", "options": {
            "restart_command": self.restart_command, "stop_command": self.stop_command,
            "start_command": self.start_command, "health_command": self.health_command,
            "auto_conf_path": str(self.auto_conf_path) if self.auto_conf_path else None,
            "backup_dir": str(self.backup_dir) if self.backup_dir else None}}

    def _run(self, command: str, timeout_s: float) -> None:
        try:
            proc = subprocess.run(shlex.split(command), capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise DatabaseError(f"{command!r} did not finish within {timeout_s:.0f} s") from exc
        except OSError as exc:
            raise DatabaseError(f"could not run {command!r}: {exc}") from exc
        if proc.returncode != 0:
            raise DatabaseError(f"{command!r} exited {proc.returncode}: "
                                f"{(proc.stderr or proc.stdout).strip()[-500:]}")

    def is_up(self) -> bool:
        if self.health_command is None:
            return super().is_up()
        try:
            self._run(self.health_command, 30)
            return True
        except DatabaseError:
            return False

    def stop_server(self, timeout_s: float) -> None:
        if self.stop_command is not None:
            self._run(self.stop_command, timeout_s + 30)

    def start_server(self, timeout_s: float) -> None:
        command = self.start_command if self.stop_command is not None else self.restart_command
        assert command is not None  # guaranteed by __init__
        self._run(command, timeout_s + 30)
        if not self.wait_until_up(timeout_s):
            raise DatabaseError(f"the server is not healthy {timeout_s:.0f} s after {command!r}")

    def read_auto_conf(self) -> str | None:
        if self.auto_conf_path is None:
            return None
        return self.auto_conf_path.read_text() if self.auto_conf_path.exists() else ""

    def write_auto_conf(self, text: str) -> None:
        if self.auto_conf_path is None:
            raise DatabaseError("command controller: cannot restore postgresql.auto.conf "
                                "without auto_conf_path")
        st = self.auto_conf_path.stat() if self.auto_conf_path.exists() else None
        tmp = self.auto_conf_path.with_name(self.auto_conf_path.name + ".harmony-tmp")
        tmp.write_text(text)
        tmp.chmod(0o600)
        if st is not None and os.geteuid() == 0:
            os.chown(tmp, st.st_uid, st.st_gid)
        os.replace(tmp, self.auto_conf_path)
