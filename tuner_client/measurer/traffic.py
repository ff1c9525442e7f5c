"""The workload the measurer drives against the server, started on demand and stopped around
restarts."""

from __future__ import annotations

from workloads.base import Workload


class Traffic:
    """Starts and stops ``workload`` once each, whoever asks (sampling, a restart, restore)."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self.running = False

    def start(self) -> None:
        if not self.running:
            self.workload.start()
            self.running = True

    def stop(self) -> None:
        if self.running:
            self.workload.stop()
            self.running = False
