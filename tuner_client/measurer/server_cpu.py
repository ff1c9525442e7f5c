"""CPU time used by a local PostgreSQL server: its own cgroup's accounting, else ``/proc``.

On a saturated, shared machine the server gets whatever CPU the neighbours leave it, so
throughput per CPU-second of the server can vary less than throughput per wall second. This
module reads that CPU time for the server whose postmaster is ``pid`` (the parent of any
backend: ``pg_backend_pid()``'s parent):

* when the postmaster runs in a cgroup of its own (every process in it is the postmaster or
  one of its children), the cgroup's counter: v1 ``cpuacct.usage`` (ns) or v2 ``cpu.stat``
  ``usage_usec``;
* else the postmaster's ``utime + stime + cutime + cstime`` plus the same of each live
  child from ``/proc/<pid>/stat``. A child that exits is reaped by the postmaster, which moves
  its time into the postmaster's ``cutime``/``cstime``, so the sum does not go backwards (a
  scan during which a child was reaped is repeated).

Linux only; a server on another host (or in another PID namespace) has no readable CPU, and
:func:`read_server_cpu` then returns ``None``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

PROC = Path("/proc")
CGROUP_ROOT = Path("/sys/fs/cgroup")
_TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


@dataclass(frozen=True)
class CpuReading:
    """Cumulative CPU seconds of the server at one moment, and where they were read."""

    cpu_s: float
    source: str  # "cgroup" or "proc"
    postmaster: int


def _stat_fields(pid: int | str) -> list[str] | None:
    """``/proc/<pid>/stat`` fields after the command name (index 0 is the state), or None."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    close = text.rfind(")")  # the command name may contain spaces and parentheses
    return text[close + 2:].split() if close > 0 else None


def parent_pid(pid: int) -> int | None:
    """The parent of process ``pid`` (None when there is no such process here)."""
    fields = _stat_fields(pid)
    return int(fields[1]) if fields else None


def _ticks(fields: list[str], children: bool) -> int:
    # after the name: state(0) ppid(1) ... utime(11) stime(12) cutime(13) cstime(14)
    own = int(fields[11]) + int(fields[12])
    return own + (int(fields[13]) + int(fields[14]) if children else 0)


def child_pids(postmaster: int) -> list[str]:
    """The PIDs of the postmaster's live children: its main thread's ``children`` file (the
    postmaster has one thread) when the kernel keeps one, else every process of ``/proc``
    (about 26 ms a reading with ~100 processes against ~3 ms, twice a sample)."""
    try:
        return (PROC / str(postmaster) / "task" / str(postmaster) / "children"
                ).read_text().split()
    except OSError:
        return [e.name for e in os.scandir(PROC)
                if e.name.isdigit() and e.name != str(postmaster)]


def proc_cpu_seconds(postmaster: int, attempts: int = 5) -> float | None:
    """The postmaster's and its children's CPU seconds from ``/proc`` (None when gone).

    A child reaped while the children are scanned would be missed (or counted twice): its
    time moves into the postmaster's ``cutime``/``cstime`` at that moment. So the
    postmaster is read before and after the scan, and the scan repeated when those moved.
    """
    ticks = 0
    for _ in range(attempts):
        first = _stat_fields(postmaster)
        if first is None:
            return None
        ticks = 0
        for pid in child_pids(postmaster):
            child = _stat_fields(pid)
            if child is not None and child[1] == str(postmaster):
                ticks += _ticks(child, children=True)
        last = _stat_fields(postmaster)
        if last is None:
            return None
        ticks += _ticks(last, children=True)
        if last[13:15] == first[13:15]:
            break  # no child reaped during the scan
    return ticks / _TICK


def _cgroup_dirs(pid: int) -> list[tuple[Path, str]]:
    """(directory, kind) of the cgroups holding ``pid`` that account CPU, below the root."""
    try:
        lines = (PROC / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return []
    out: list[tuple[Path, str]] = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if path in ("", "/"):
            continue  # the root cgroup holds the whole machine, not the server alone
        rel = path.lstrip("/")
        if controllers == "":
            for root in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
                if (root / rel / "cpu.stat").exists():
                    out.append((root / rel, "v2"))
                    break
        elif "cpuacct" in controllers.split(","):
            for mount in ("cpuacct", "cpu,cpuacct", "cpuacct,cpu"):
                if (CGROUP_ROOT / mount / rel / "cpuacct.usage").exists():
                    out.append((CGROUP_ROOT / mount / rel, "v1"))
                    break
    return out


def _own_cgroup(directory: Path, postmaster: int) -> bool:
    """Whether every process of the cgroup is the postmaster or one of its children."""
    try:
        pids = [int(p) for p in (directory / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return False
    return bool(pids) and all(p == postmaster or parent_pid(p) == postmaster for p in pids)


def cgroup_cpu_seconds(directory: Path, kind: str) -> float | None:
    """A cgroup's cumulative CPU seconds (v1 ``cpuacct.usage``, v2 ``cpu.stat``)."""
    try:
        if kind == "v1":
            return int((directory / "cpuacct.usage").read_text()) / 1e9
        for line in (directory / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
    except (OSError, ValueError):
        return None
    return None


def read_server_cpu(postmaster: int) -> CpuReading | None:
    """The server's cumulative CPU seconds: its own cgroup's counter when it has one, else
    the ``/proc`` sum. None when the postmaster is not a process of this machine."""
    for directory, kind in _cgroup_dirs(postmaster):
        if _own_cgroup(directory, postmaster):
            cpu = cgroup_cpu_seconds(directory, kind)
            if cpu is not None:
                return CpuReading(cpu, "cgroup", postmaster)
    cpu = proc_cpu_seconds(postmaster)
    return CpuReading(cpu, "proc", postmaster) if cpu is not None else None


__all__ = ["CpuReading", "cgroup_cpu_seconds", "child_pids", "parent_pid", "proc_cpu_seconds",
           "read_server_cpu"]
