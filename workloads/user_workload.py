"""The tuner's ``workload.scripts`` and ``workload.replay`` sections as workload drivers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from workloads.base import Workload
from workloads.replay import ReplayWorkload, read_replay_file
from workloads.scripted import ScriptedWorkload, resolve_script_path


class UserWorkloadSpec(Protocol):
    """What these drivers read of the tuner's ``WorkloadConfig`` (the tuner sits above us)."""

    @property
    def kind(self) -> str: ...
    @property
    def files(self) -> tuple[str, ...]: ...
    @property
    def base_dir(self) -> str | None: ...
    @property
    def clients(self) -> int: ...
    @property
    def writes(self) -> bool: ...
    @property
    def variables(self) -> Mapping[str, int | float | str]: ...
    @property
    def statement_timeout_s(self) -> float | None: ...


def replay_path(wl: UserWorkloadSpec) -> Path:
    return resolve_script_path(wl.files[0], Path(wl.base_dir) if wl.base_dir else None)


def make_user_workload(wl: UserWorkloadSpec, dsn: str, *, seed: int = 0) -> Workload:
    """The driver of a ``WorkloadConfig`` of kind ``scripts`` or ``replay``."""
    if wl.kind == "replay":
        return ReplayWorkload(dsn, replay_path(wl), clients=wl.clients or None,
                              writes=wl.writes, statement_timeout_s=wl.statement_timeout_s)
    return ScriptedWorkload(dsn, wl.files, clients=wl.clients, writes=wl.writes,
                            variables=wl.variables,
                            base_dir=Path(wl.base_dir) if wl.base_dir else None,
                            statement_timeout_s=wl.statement_timeout_s)


def user_workload_clients(wl: UserWorkloadSpec) -> int:
    """Connections the workload opens (a replay without clients: the captured ones)."""
    if wl.kind == "replay" and not wl.clients:
        return read_replay_file(replay_path(wl)).clients
    return int(wl.clients)
