"""The RAM this host gives the tuned server: the tightest cgroup memory limit (v2 or v1) of
this process, else MemTotal (the memory budget's RAM when none is given,
:mod:`tuner_client.budget`)."""

from __future__ import annotations

import logging
from pathlib import Path

from harmony_base.errors import ConfigError

logger = logging.getLogger(__name__)

_UNLIMITED = 1 << 60  # cgroup v1 reports "no limit" as a huge page-aligned number


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max" or not text:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= _UNLIMITED else value


def _cgroup_limits(proc_self_cgroup: Path, cgroup_root: Path) -> list[int]:
    """Memory limits of this process's cgroup and its ancestors (v2 and v1)."""
    limits: list[int] = []
    try:
        lines = proc_self_cgroup.read_text().splitlines()
    except OSError:
        return limits
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel_path = Path(rel.lstrip("/"))
        if controllers == "":  # v2 unified hierarchy
            bases = [cgroup_root, cgroup_root / "unified"]
            file_name = "memory.max"
        elif "memory" in controllers.split(","):
            bases = [cgroup_root / "memory"]
            file_name = "memory.limit_in_bytes"
        else:
            continue
        for base in bases:
            node = base / rel_path
            while True:
                value = _read_int(node / file_name)
                if value is not None:
                    limits.append(value)
                if node == base or base not in node.parents:
                    break
                node = node.parent
    return limits


def mem_total_bytes(meminfo: Path = Path("/proc/meminfo")) -> int:
    """MemTotal from /proc/meminfo, in bytes."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError) as exc:
        raise ConfigError(f"cannot read MemTotal from {meminfo}: {exc}; give the RAM size") from exc
    raise ConfigError(f"no MemTotal line in {meminfo}; give the RAM size explicitly")


def detect_ram_bytes(
    *,
    proc_self_cgroup: Path = Path("/proc/self/cgroup"),
    cgroup_root: Path = Path("/sys/fs/cgroup"),
    meminfo: Path = Path("/proc/meminfo"),
) -> int:
    """The RAM this process may use: the tightest cgroup memory limit, else MemTotal."""
    total = mem_total_bytes(meminfo)
    limits = [v for v in _cgroup_limits(proc_self_cgroup, cgroup_root) if v > 0]
    ram = min([total, *limits])
    logger.debug("RAM: MemTotal %s, cgroup limits %s -> %s", total, limits, ram)
    return ram
