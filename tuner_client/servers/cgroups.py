"""Cgroups for a private PostgreSQL server: a memory cgroup (v2 ``memory.max`` or v1
``memory.limit_in_bytes``, swap capped too) so that the OS page cache cannot hide buffer
misses, and a CPU cgroup (v1 ``cpu.cfs_quota_us`` or v2 ``cpu.max``) capping it at a number
of CPUs. The caller starts the postmaster inside them (their ``cgroup.procs``) and removes
them once it has stopped for good (:class:`ServerCgroups`: kept across restarts).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import time
from collections.abc import Iterable
from pathlib import Path

from harmony_base.errors import DatabaseError

logger = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")


def memory_cgroup(name: str, limit_bytes: int) -> Path | None:
    """A memory cgroup ``name`` limited to ``limit_bytes`` (v2, else v1); None, with a warning,
    when neither is writable (the server then runs without the limit)."""
    for make in (_memory_cgroup_v2, _memory_cgroup_v1):
        try:
            made = make(name, limit_bytes)
        except OSError as exc:
            logger.debug("memory cgroup via %s not usable: %s", make.__name__, exc)
            continue
        if made is not None:
            return made
    logger.warning(
        "memory_limit_bytes=%s requested but no writable memory cgroup (v2 memory.max or "
        "v1 memory.limit_in_bytes under %s) was found; PostgreSQL runs without the limit "
        "and the OS page cache may hide buffer misses",
        limit_bytes, CGROUP_ROOT,
    )
    return None


def _memory_cgroup_v2(name: str, limit_bytes: int) -> Path | None:
    for root in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        controllers = root / "cgroup.controllers"
        if not controllers.exists() or "memory" not in controllers.read_text().split():
            continue
        subtree = root / "cgroup.subtree_control"
        if "memory" not in subtree.read_text().split():
            subtree.write_text("+memory")
        cg = root / name
        cg.mkdir(exist_ok=True)
        (cg / "memory.max").write_text(str(limit_bytes))
        with contextlib.suppress(OSError):
            (cg / "memory.swap.max").write_text("0")
        logger.info("PostgreSQL memory cgroup v2 %s, memory.max=%s", cg, limit_bytes)
        return cg
    return None


def _memory_cgroup_v1(name: str, limit_bytes: int) -> Path | None:
    root = CGROUP_ROOT / "memory"
    if not (root / "memory.limit_in_bytes").exists():
        return None
    cg = root / name
    cg.mkdir(exist_ok=True)
    (cg / "memory.limit_in_bytes").write_text(str(limit_bytes))
    with contextlib.suppress(OSError):
        # also cap swap so the limit really bounds resident memory
        (cg / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
    logger.info("PostgreSQL memory cgroup v1 %s, limit=%s", cg, limit_bytes)
    return cg


def cpu_cgroup(name: str, cpu_limit: float) -> Path:
    """A CPU cgroup ``name`` capping its processes at ``cpu_limit`` CPUs (v1 cfs quota or v2
    cpu.max); DatabaseError when no CPU controller is writable."""
    period = 100_000
    quota = max(1000, int(cpu_limit * period))
    try:
        v1 = CGROUP_ROOT / "cpu"
        if (v1 / "cpu.cfs_quota_us").exists():
            cg = v1 / name
            cg.mkdir(exist_ok=True)
            (cg / "cpu.cfs_period_us").write_text(str(period))
            (cg / "cpu.cfs_quota_us").write_text(str(quota))
        elif "cpu" in (CGROUP_ROOT / "cgroup.controllers").read_text().split():
            subtree = CGROUP_ROOT / "cgroup.subtree_control"
            if "cpu" not in subtree.read_text().split():
                subtree.write_text("+cpu")
            cg = CGROUP_ROOT / name
            cg.mkdir(exist_ok=True)
            (cg / "cpu.max").write_text(f"{quota} {period}")
        else:
            raise OSError("no cpu controller under " + str(CGROUP_ROOT))
    except OSError as exc:
        raise DatabaseError(f"cpu_limit={cpu_limit} asked for, but no writable CPU "
                            f"cgroup was found ({exc}); run as root on a machine with the "
                            f"cgroup cpu controller, or drop cpu_limit") from exc
    logger.info("PostgreSQL CPU cgroup %s: at most %.2f CPUs", cg, cpu_limit)
    return cg


def remove_cgroup(cg: Path) -> None:
    """Remove an emptied cgroup, waiting briefly while its last processes exit. A memory
    cgroup's page cache is dropped first (v1 ``memory.force_empty``, v2 ``memory.reclaim``):
    left charged to the removed cgroup, it would stay cached outside any limit, and a server
    started later on the same files (in a new cgroup) would read it without a miss."""
    for name, value in (("memory.force_empty", "0"), ("memory.reclaim", str(2 ** 40))):
        if (cg / name).exists():
            with contextlib.suppress(OSError):  # best effort: tasks may still be leaving
                (cg / name).write_text(value)
    for _ in range(20):
        try:
            cg.rmdir()
            break
        except FileNotFoundError:
            break  # removed already (a clone's, by its record, before its cluster's stop)
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                logger.warning("could not remove cgroup %s: %s", cg, exc)
                break
            time.sleep(0.05)


def remove_cgroups(paths: Iterable[str | Path]) -> list[str]:
    """Remove the cgroups at ``paths`` that still exist (their processes gone: a stopped
    server's, named in a clone record or a restore journal after the run died); those left
    (still busy, or not ours to remove)."""
    left = []
    for path in map(Path, paths):
        if path.is_dir():
            remove_cgroup(path)
            if path.is_dir():
                left.append(str(path))
    return left


#: the names of the cgroups a server of the tuner's runs in (:meth:`ServerCgroups.make`)
PREFIX = "harmony-pg-"


def foreign_cgroups(data_dir: Path, ours: Iterable[Path]) -> list[Path]:
    """The tuner's cgroups (``harmony-pg-*``) the postmaster of ``data_dir`` runs in other
    than ``ours``: those of a run that started it and died before any record named them
    (killed while it loaded the embedded cluster); whoever stops that server removes them
    once it has (empty directories otherwise left behind)."""
    try:
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except (OSError, ValueError, IndexError):
        return []
    mine, found = set(ours), []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if not Path(path).name.startswith(PREFIX):
            continue
        roots = ([CGROUP_ROOT / c for c in controllers.split(",")] if controllers
                 else [CGROUP_ROOT, CGROUP_ROOT / "unified"])
        found += [cg for cg in (root / path.lstrip("/") for root in roots)
                  if cg.is_dir() and cg not in mine and cg not in found]
    return found


class ServerCgroups:
    """The memory and CPU cgroups one server runs in (each only when its limit is given):
    made before its first start, kept across its restarts, removed once it has stopped for
    good. Kept, the page cache the server filled stays charged to its memory cgroup, within
    the limit; removed and made afresh at a restart, that cache would stay charged to the
    removed cgroup, outside any limit, where the restarted server still finds it (seen: after
    a restart the new cgroup held 12 kB of 88 MB of the server's file cache, and a scan read
    0 bytes from storage)."""

    def __init__(self, memory_limit_bytes: int | None, cpu_limit: float | None) -> None:
        self.memory_limit_bytes, self.cpu_limit = memory_limit_bytes, cpu_limit
        self.memory: Path | None = None
        self.cpu: Path | None = None

    def make(self, suffix: str) -> None:
        """Make the cgroups not made yet, named ``harmony-pg-[cpu-]<suffix>``."""
        if self.memory_limit_bytes is not None and self.memory is None:
            self.memory = memory_cgroup(f"{PREFIX}{suffix}", self.memory_limit_bytes)
        if self.cpu_limit is not None and self.cpu is None:
            self.cpu = cpu_cgroup(f"{PREFIX}cpu-{suffix}", self.cpu_limit)

    def possible(self, suffix: str) -> list[Path]:
        """Every directory :meth:`make` with ``suffix`` may create (v2 or v1, whichever is
        writable), for a record saved before it runs: a run killed between a ``mkdir`` and
        its record's save then leaves no cgroup that no record names (removing the ones never
        made is a no-op)."""
        out = []
        if self.memory_limit_bytes is not None and self.memory is None:
            out += [root / f"{PREFIX}{suffix}"
                    for root in (CGROUP_ROOT, CGROUP_ROOT / "unified", CGROUP_ROOT / "memory")]
        if self.cpu_limit is not None and self.cpu is None:
            out += [root / f"{PREFIX}cpu-{suffix}" for root in (CGROUP_ROOT / "cpu", CGROUP_ROOT)]
        return out

    def paths(self) -> list[Path]:
        """The cgroup directories made (memory, CPU), for a record that outlives the tuner."""
        return [cg for cg in (self.memory, self.cpu) if cg is not None]

    def procs(self) -> list[Path]:
        """The ``cgroup.procs`` files a process joins to run inside them."""
        return [cg / "cgroup.procs" for cg in self.paths()]

    def remove(self) -> None:
        """Remove them (their processes gone)."""
        for cg in (self.cpu, self.memory):
            if cg is not None:
                remove_cgroup(cg)
        self.memory = self.cpu = None
