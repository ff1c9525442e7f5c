"""The managed controller: a server whose restarts and ``ALTER SYSTEM`` belong to the provider.

Managed mode (a DSN without a controller, :mod:`tuner_client.servers.managed`) measures per
transaction and changes nothing server-wide; this controller keeps that promise at the seam
every restart goes through: it never writes ``ALTER SYSTEM``, never stops or starts the
server, and has no ``postgresql.auto.conf`` to read or restore. A server that stops answering
is waited for (the provider restarts it), never started.
"""

from __future__ import annotations

from collections.abc import Mapping

from harmony_base.errors import DatabaseError
from harmony_base.jsontypes import JSON
from tuner_client.servers.controllers.base import Controller, RestartReport

#: why a managed server is not restarted, in every message that says so
NO_RESTART = ("managed mode: restarts and ALTER SYSTEM go through the provider's parameter "
              "group, never through the tuner")


class ManagedController(Controller, kind="managed"):
    """Refuses every restart (see the module docstring)."""

    changes_server = False

    def restart_with(self, offline_values: Mapping[str, JSON], timeout_s: float = 60.0
                     ) -> RestartReport:
        """A failed report, nothing written: the values need the provider's parameter group."""
        requested = {k: str(v) for k, v in offline_values.items()}
        return RestartReport(False, requested, reason=f"{NO_RESTART} ({sorted(requested)})")

    def stop_server(self, timeout_s: float) -> None:
        raise DatabaseError(f"{NO_RESTART}: the tuner does not stop the server")

    def start_server(self, timeout_s: float) -> None:
        if not self.wait_until_up(timeout_s):
            raise DatabaseError(f"{NO_RESTART}: the server did not answer within "
                                f"{timeout_s:.0f} s, and the tuner does not start it")

    def read_auto_conf(self) -> str | None:
        return None

    def write_auto_conf(self, text: str) -> None:
        raise DatabaseError(f"{NO_RESTART}: the tuner does not write postgresql.auto.conf")

    def ensure_running(self, timeout_s: float = 60.0) -> None:
        """Wait for the server to answer (a provider's restart or failover); never start it."""
        self.start_server(timeout_s)
