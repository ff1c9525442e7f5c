"""The docker controller: a PostgreSQL container, restarted through the Docker SDK."""

from __future__ import annotations

import io
import logging
import os
import tarfile
import time
from pathlib import Path
from typing import Any

from harmony_base.errors import ConfigError, DatabaseError
from harmony_base.jsontypes import JSONObject
from tuner_client.servers.controllers.base import AUTO_CONF, Controller

logger = logging.getLogger(__name__)


class DockerController(Controller, kind="docker"):
    """A PostgreSQL container restarted through the Docker SDK (``docker`` package).

    ``postgresql.auto.conf`` is copied out of / into the container with the archive API,
    which also works while the container is stopped.
    """

    def __init__(self, container: str, dsn: str, *,
                 data_dir: str = "/var/lib/postgresql/data", client: Any = None,
                 backup_dir: Path | None = None) -> None:
        super().__init__(dsn, backup_dir=backup_dir)
        self.container_name = container
        self.data_dir = data_dir.rstrip("/")
        try:
            import docker
            import docker.errors
        except ImportError as exc:  # pragma: no cover - docker is a declared dependency
            raise ConfigError("the docker controller needs the 'docker' package") from exc
        self._errors = docker.errors
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        if client is None and host.startswith("unix://") and not Path(host[7:]).exists():
            # checked here: the SDK leaks its socket when the engine's socket is missing
            raise DatabaseError(f"docker controller: no Docker engine reachable (DOCKER_HOST="
                                f"{host}: socket {host[7:]} does not exist)")
        self.client = None
        try:
            self.client = client if client is not None else docker.from_env()
            self.client.ping()
        except Exception as exc:  # the SDK raises DockerException or requests errors
            if self.client is not None and client is None:
                self.client.close()
            raise DatabaseError(
                "docker controller: no Docker engine reachable (DOCKER_HOST="
                f"{os.environ.get('DOCKER_HOST', 'unset, default unix socket')}): {exc}"
            ) from exc
        try:
            self.container = self.client.containers.get(container)
        except self._errors.NotFound as exc:
            raise ConfigError(f"docker controller: no container named {container!r}") from exc

    def stop_server(self, timeout_s: float) -> None:
        self.container.reload()
        if self.container.status == "running":
            started = time.monotonic()
            self.container.stop(timeout=max(1, int(timeout_s)))
            logger.info("container %s stopped in %.2f s", self.container_name,
                        time.monotonic() - started)

    def start_server(self, timeout_s: float) -> None:
        self.container.reload()
        restarts_before = int(self.container.attrs.get("RestartCount") or 0)
        started = time.monotonic()
        self.container.start()
        logger.info("container %s started in %.2f s", self.container_name,
                    time.monotonic() - started)

        def alive() -> bool:
            # a server that exits at once (a value it cannot run with) ends the wait early, also
            # when the restart policy (restart: unless-stopped) starts the container again
            self.container.reload()
            if int(self.container.attrs.get("RestartCount") or 0) > restarts_before:
                return False
            return bool(self.container.status in ("running", "created"))

        if not self.wait_until_up(timeout_s, still_starting=alive):
            logs = self.container.logs(tail=20).decode(errors="replace")
            raise DatabaseError(f"container {self.container_name} did not come up within "
                                f"{timeout_s:.0f} s:\n{logs}")

    def log_mark(self) -> int:
        # the container's log is read from this second on (the API's `since` takes seconds)
        return int(time.time())

    def log_since(self, mark: int) -> str:
        return str(self.container.logs(since=mark, tail=50).decode(errors="replace"))

    def recipe(self) -> JSONObject | None:
        return {"kind": "docker", "options": {
            "container": self.container_name, "data_dir": self.data_dir,
            "backup_dir": str(self.backup_dir) if self.backup_dir else None}}

    def read_auto_conf(self) -> str | None:
        stream, _ = self.container.get_archive(f"{self.data_dir}/{AUTO_CONF}")
        data = io.BytesIO(b"".join(stream))
        with tarfile.open(fileobj=data) as tar:
            member = tar.getmembers()[0]
            self._owner = self._file_owner(member)
            fh = tar.extractfile(member)
            return fh.read().decode() if fh else ""

    def _file_owner(self, member: tarfile.TarInfo) -> tuple[int, int]:
        """(uid, gid) of a file in the container, as put_archive must write it back.

        Docker's archive API gives numeric ids; Podman's gives uid/gid 0 with the owner's
        *names*, so names other than root are looked up in the container's own /etc/passwd and
        /etc/group (read with the archive API too: the container may be stopped).
        """
        if member.uid != 0 or member.uname in ("", "root"):
            return member.uid, member.gid
        uid = self._lookup_id("/etc/passwd", member.uname)
        gid = self._lookup_id("/etc/group", member.gname or member.uname)
        if uid is None or gid is None:
            raise DatabaseError(f"container {self.container_name}: {self.data_dir}/{AUTO_CONF} "
                                f"belongs to {member.uname!r}, who is not in its /etc/passwd")
        return uid, gid

    def _lookup_id(self, table: str, name: str) -> int | None:
        stream, _ = self.container.get_archive(table)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            fh = tar.extractfile(tar.getmembers()[0])
            text = fh.read().decode(errors="replace") if fh else ""
        for line in text.splitlines():
            fields = line.split(":")
            if len(fields) > 2 and fields[0] == name and fields[2].isdigit():
                return int(fields[2])
        return None

    def write_auto_conf(self, text: str) -> None:
        payload = text.encode()
        info = tarfile.TarInfo(AUTO_CONF)
        info.size, info.mode, info.mtime = len(payload), 0o600, int(time.time())
        info.uid, info.gid = getattr(self, "_owner", (999, 999))
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.addfile(info, io.BytesIO(payload))
        if not self.container.put_archive(self.data_dir, buf.getvalue()):
            raise DatabaseError(f"could not write {AUTO_CONF} into container "
                                f"{self.container_name}")
