"""The docker controller: a PostgreSQL container, restarted through the Docker SDK."""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path
from typing import Any

from harmony.base.errors import ConfigError, DatabaseError
from tuner_client.controllers.base import AUTO_CONF, Controller


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
            import docker  # type: ignore[import-untyped]
            import docker.errors  # type: ignore[import-untyped]
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
            self.container.stop(timeout=max(1, int(timeout_s)))

    def start_server(self, timeout_s: float) -> None:
        self.container.start()

        def alive() -> bool:
            self.container.reload()
            return bool(self.container.status in ("running", "created", "restarting"))

        if not self.wait_until_up(timeout_s, still_starting=alive):
            logs = self.container.logs(tail=20).decode(errors="replace")
            raise DatabaseError(f"container {self.container_name} did not come up within "
                                f"{timeout_s:.0f} s:\n{logs}")

    def log_since(self, mark: int) -> str:
        return str(self.container.logs(tail=50).decode(errors="replace"))

    def read_auto_conf(self) -> str | None:
        stream, _ = self.container.get_archive(f"{self.data_dir}/{AUTO_CONF}")
        data = io.BytesIO(b"".join(stream))
        with tarfile.open(fileobj=data) as tar:
            member = tar.getmembers()[0]
            self._owner = (member.uid, member.gid)
            fh = tar.extractfile(member)
            return fh.read().decode() if fh else ""

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
