"""The tuned server's processes when it runs on this machine: their CPU time and memory."""

from __future__ import annotations

import psycopg

from harmony_base.errors import ConfigError, DatabaseError
from tuner_client.measurer.connection import AdminConnection
from tuner_client.measurer.estimators import CPU_ESTIMATORS
from tuner_client.measurer.guardrails import server_memory_bytes
from tuner_client.measurer.server_cpu import PROC, CpuReading, parent_pid, read_server_cpu


def _is_postgres(pid: int) -> bool:
    try:
        return (PROC / str(pid) / "comm").read_text().strip().startswith("postgres")
    except OSError:
        return False


def cores_used(before: CpuReading | None, after: CpuReading | None,
               wall_s: float) -> tuple[float | None, str | None]:
    """The cores the server used on average between two readings ``wall_s`` apart, and where
    they were read; ``(None, None)`` when the readings are missing or not comparable."""
    if (before is not None and after is not None and wall_s > 0
            and before.source == after.source and before.postmaster == after.postmaster):
        return (after.cpu_s - before.cpu_s) / wall_s, after.source
    return None, None


class ServerProcess:
    """Finds the postmaster behind the admin connection (when local) and reads its CPU time
    and memory; remembers once a CPU estimator has been checked to be usable."""

    def __init__(self, connection: AdminConnection) -> None:
        self.connection = connection
        self._postmaster: int | None = None
        self.cpu_checked = False

    def postmaster_pid(self) -> int | None:
        """The postmaster's PID when the server runs on this machine, else None."""
        pid = self._postmaster
        if pid is None or parent_pid(pid) is None:
            try:
                backend = int(self.connection.get().info.backend_pid)
            except (DatabaseError, psycopg.Error):
                return None
            pid = parent_pid(backend)
            if pid is None or not _is_postgres(backend):
                return None  # another host or PID namespace
            self._postmaster = pid
        return pid

    def memory(self) -> int | None:
        """The server's memory in bytes (Pss of its processes; None when not local)."""
        pid = self.postmaster_pid()
        return server_memory_bytes(pid) if pid is not None else None

    def read_cpu(self) -> CpuReading | None:
        """The server's cumulative CPU time (None when the server is not local)."""
        pid = self.postmaster_pid()
        return read_server_cpu(pid) if pid is not None else None

    def check_cpu_readable(self, estimator: str) -> None:
        """A CPU estimator needs the server's CPU time: a clear error before anything runs."""
        if estimator in CPU_ESTIMATORS and self.read_cpu() is None:
            instead = "work" if estimator == "work_per_cpu" else "count"
            raise ConfigError(f"measure.estimator {estimator} needs the PostgreSQL server's "
                              "CPU time, which is readable only when the server runs on this "
                              "machine (its backends' processes are not visible here); use "
                              f"measure.estimator {instead}")
        self.cpu_checked = True
