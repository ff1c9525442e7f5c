"""The memory budget as the tuner's sessions need it: constraint strings and a last check.

Wraps :class:`tuner_client.budget.formula.MemoryBudget` with the session units of the tuned knobs
(:class:`tuner_client.config.KnobSpace`: MB, or kB for finer grids) and the settings in
force (PostgreSQL strings), so the flows can ask for the offline cap, the online budget under
the ``shared_buffers`` actually in force, and whether a configuration about to be applied
breaks the budget (it is then never applied).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from harmony_base.errors import ConstraintError, HarmonyError
from harmony_base.space import IntParam
from tuner_client.budget.formula import (
    BUDGET_KNOBS,
    ONLINE_MEMORY_KNOBS,
    UNIT_BYTES,
    MemoryBudget,
)
from tuner_client.config import KnobParam, KnobSpace, TunerConfig, format_bytes
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.servers.host_memory import detect_ram_bytes

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class BudgetView:
    """The budget of one run, over the offline and online knob spaces."""

    budget: MemoryBudget
    catalog: KnobCatalog
    offline: KnobSpace
    online: KnobSpace

    def _bytes(self, settings: Mapping[str, str], name: str) -> int:
        return int(self.catalog[name].parse(settings[name]))

    @cached_property
    def in_bytes(self) -> MemoryBudget:
        """The same budget with every knob counted in bytes (for values parsed from settings)."""
        return replace(self.budget, unit="B", units={})

    def online_use(self, settings: Mapping[str, str]) -> int:
        """Bytes the online memory knobs of ``settings`` take (work_mem counted m times)."""
        return self.in_bytes.online_use({n: float(self._bytes(settings, n))
                                         for n in ONLINE_MEMORY_KNOBS if n in settings})

    def online_share(self, settings: Mapping[str, str]) -> float | None:
        """The share of the online budget (RAM − shared_buffers − OS reserve − processes, or
        the fixed one) that the online memory knobs of ``settings`` take in the worst case
        (work_mem counted m times); None when a budget knob is missing or not readable."""
        if not all(n in settings for n in BUDGET_KNOBS):
            return None
        try:
            limit = self.in_bytes.online_limit(self._bytes(settings, "shared_buffers"))
            return self.online_use(settings) / limit
        except HarmonyError as exc:
            logger.debug("no online budget share for %s: %s", settings, exc)
            return None

    def shared_buffers_cap(self, in_force: Mapping[str, str]) -> int:
        """The offline cap in bytes with the online knobs of ``in_force``."""
        return self.budget.shared_buffers_cap(self.online_use(in_force))

    def offline_constraints(self, in_force: Mapping[str, str]) -> list[str]:
        """The shared_buffers cap when the offline session tunes it: a fraction of RAM, and
        what RAM leaves after the OS reserve, the processes and the online knobs in force."""
        if "shared_buffers" not in self.offline.names:
            return []
        return self.budget.offline_constraints(self.online_use(in_force))

    def slack(self, in_force: Mapping[str, str]) -> int | None:
        """Bytes the settings in force leave under the tightest budget inequality (None when
        a budget knob is not tracked or not readable)."""
        if not all(n in in_force for n in BUDGET_KNOBS):
            return None
        try:
            point = {n: float(self.catalog[n].parse(in_force[n])) for n in BUDGET_KNOBS}
            return self.in_bytes.slack(point)
        except HarmonyError as exc:
            logger.debug("no budget slack for %s: %s", in_force, exc)
            return None

    def room_for_shared_buffers(self, in_force: Mapping[str, str], knob: KnobParam,
                                start: Mapping[str, Any]) -> tuple[int, dict[str, str]]:
        """The bytes an offline session starting at ``start`` wants for shared_buffers (its
        start, within the knob's range and the fraction cap), and the online memory knobs
        lowered so that the budget leaves them (``{}`` when the values in force already do):
        every offline point is measured with the online knobs in force, and none may break
        the budget. ConstraintError when even their minima do not fit."""
        param = knob.param
        if not isinstance(param, IntParam):
            raise ConstraintError(f"shared_buffers must be an integer knob range, got {param}")
        highest = min(int(knob.canonical(param.upper)), self.budget.shared_buffers_max_bytes)
        wanted = max(int(knob.canonical(param.min)),
                     min(int(knob.canonical(start["shared_buffers"])), highest))
        if self.shared_buffers_cap(in_force) >= wanted:
            return wanted, {}
        return wanted, self.fit_online(in_force, wanted)

    def fit_online(self, in_force: Mapping[str, str], shared_buffers_bytes: int) -> dict[str, str]:
        """Online memory knobs lowered so that the whole budget holds beside
        ``shared_buffers_bytes``: ``{}`` when the values in force already fit.

        The tuned knobs are lowered in turn, work_mem first (it counts m times), then
        maintenance_work_mem and temp_buffers, each to the largest value of the online space's
        grid that fits (or its minimum). Knobs the online session does not tune are never
        touched. ConstraintError when even the minima do not fit.
        """
        b = self.budget
        limit = b.ram_bytes - b.os_reserved_bytes - b.processes_bytes - shared_buffers_bytes
        now = {n: self._bytes(in_force, n) for n in ONLINE_MEMORY_KNOBS}
        use = self.in_bytes.online_use

        out: dict[str, str] = {}
        for name in ONLINE_MEMORY_KNOBS:
            if use(now) <= limit:
                break
            if name not in self.online.names:
                continue
            knob = self.online[name]
            param = knob.param
            assert isinstance(param, IntParam) and knob.unit in UNIT_BYTES, knob
            coef = b.work_mem_coefficient if name == "work_mem" else 1
            room = limit - use({**now, name: 0})  # bytes this knob may take, times coef
            allowed = min(room // coef, now[name]) // UNIT_BYTES[knob.unit]
            index = min(max(0, (allowed - param.min) // param.step), param.size - 1)
            value = param.value_at(index)
            if int(knob.canonical(value)) < now[name]:
                now[name] = int(knob.canonical(value))
                out[name] = knob.setting(value)
        if use(now) > limit:
            raise ConstraintError(
                f"the memory budget has no room for shared_buffers "
                f"{format_bytes(shared_buffers_bytes)}: RAM {format_bytes(b.ram_bytes)} − OS "
                f"reserve {format_bytes(b.os_reserved_bytes)} − {b.connections} processes × "
                f"{format_bytes(b.process_memory_bytes)} leaves {format_bytes(max(0, limit))}, "
                f"and the online knobs at their smallest take {format_bytes(use(now))}; give "
                f"more RAM, fewer connections or smaller online knob minima")
        return out

    def online_constraints(self, in_force: Mapping[str, str]) -> list[str]:
        """The online budget with the shared_buffers in force; untuned memory knobs fixed."""
        tuned = [n for n in self.online.names if n in ONLINE_MEMORY_KNOBS]
        if not tuned:
            return []
        fixed = {n: self._bytes(in_force, n) for n in ONLINE_MEMORY_KNOBS if n not in tuned}
        sb = self._bytes(in_force, "shared_buffers")
        out = self.budget.online_constraints(sb, tuned=tuned, fixed=fixed)
        logger.info("online budget with shared_buffers %s in force: %s (RAM %s, OS reserve %s, "
                    "work_mem coefficient %d)", format_bytes(sb), out,
                    format_bytes(self.budget.ram_bytes),
                    format_bytes(self.budget.os_reserved_bytes),
                    self.budget.work_mem_coefficient)
        return out

    def violation(self, wanted: Mapping[str, str], changed: Mapping[str, str]) -> str | None:
        """Why applying ``changed`` (giving ``wanted`` in force) breaks the budget, or None.

        Only the inequalities the change touches are checked, so measuring the offline
        knobs under the user's original online settings is not refused.
        """
        in_bytes = self.in_bytes
        if "shared_buffers" in changed:
            sb = self._bytes(wanted, "shared_buffers")
            cap = self.shared_buffers_cap(wanted)
            if sb > cap:
                return (f"shared_buffers {wanted['shared_buffers']} is above the budget's cap "
                        f"{format_bytes(cap)} (fraction cap "
                        f"{format_bytes(self.budget.shared_buffers_max_bytes)}; "
                        f"{self.budget.connections} processes × "
                        f"{format_bytes(self.budget.process_memory_bytes)} and online knobs "
                        f"{format_bytes(self.online_use(wanted))} also need RAM)")
        touched = [n for n in ONLINE_MEMORY_KNOBS if n in changed]
        if touched and all(n in wanted for n in ONLINE_MEMORY_KNOBS) and "shared_buffers" in wanted:
            point = {n: float(self._bytes(wanted, n)) for n in ONLINE_MEMORY_KNOBS}
            sb = self._bytes(wanted, "shared_buffers")
            slack = in_bytes.slack(point, sb)
            if slack < 0:
                used = in_bytes.online_use(point)
                return (f"work_mem*{self.budget.work_mem_coefficient} + maintenance_work_mem + "
                        f"temp_buffers = {format_bytes(int(used))} exceeds the online budget "
                        f"{format_bytes(in_bytes.online_limit(sb))}")
        return None


def worker_processes(catalog: KnobCatalog, streams: int) -> int:
    """Processes that may each use work_mem: the streams plus the parallel workers they can get.

    Every Gather may start ``max_parallel_workers_per_gather`` workers, bounded for the whole
    server by ``max_parallel_workers`` (and ``max_worker_processes``); each worker sorts and
    hashes with its own work_mem, like a connection. Values in force when the run starts.
    """
    def setting(name: str, fallback: int) -> int:
        value = catalog[name].current() if name in catalog else None
        return int(value) if isinstance(value, (int, float)) else fallback

    per_gather = setting("max_parallel_workers_per_gather", 0)
    cap = min(setting("max_parallel_workers", 8), setting("max_worker_processes", 8))
    return streams + max(0, min(cap, streams * per_gather))


#: the OS reserve's share of an embedded cluster's memory limit when ``budget.os_reserved`` is
#: not given
LIMITED_OS_RESERVE = 0.1


def os_reserve(config: TunerConfig, ram: int) -> int:
    """The OS reserve O: ``budget.os_reserved`` (default 512MB); but when the RAM is the
    embedded cluster's ``database.memory_limit`` and no reserve is given, at most
    :data:`LIMITED_OS_RESERVE` of it. The limit bounds a memory cgroup that holds PostgreSQL
    and its page cache alone, the OS and other programs outside it: 512MB of a 1GB limit
    capped shared_buffers at 296MB where its working set (606MB at pgbench scale 40) read
    1.38× faster held whole in 600MB in a round of ``benchmarks/cache_truth.py``."""
    b = config.budget
    limit = config.database.memory_limit_bytes
    if b.os_reserved_auto and b.ram_bytes is None and limit is not None and ram == limit:
        return min(b.os_reserved_bytes, int(ram * LIMITED_OS_RESERVE) // 2 ** 20 * 2 ** 20)
    return b.os_reserved_bytes


def make_budget_view(config: TunerConfig, catalog: KnobCatalog, offline: KnobSpace,
                     online: KnobSpace, *, known_ram_bytes: int | None = None) -> BudgetView:
    """The run's budget: RAM given, or the local cluster's cgroup limit, or detected; m is
    ``budget.connections`` or the workload's streams plus their parallel workers."""
    b = config.budget
    streams = config.workload.streams
    if config.workload.observe is not None and "max_connections" in catalog:
        # live traffic: any allowed connection may run a sort or hash at once
        streams = int(catalog["max_connections"].current() or 100)
    connections = b.connections or worker_processes(catalog, streams)
    ram = b.ram_bytes or known_ram_bytes or detect_ram_bytes()
    units = {p.name: p.unit for p in offline.params + online.params
             if p.unit in ("MB", "kB") and p.name in (*ONLINE_MEMORY_KNOBS, "shared_buffers")}
    hash_mult = float(catalog["hash_mem_multiplier"].current() or 1.0) \
        if "hash_mem_multiplier" in catalog else 1.0
    reserve = os_reserve(config, ram)
    budget = MemoryBudget(ram_bytes=ram, os_reserved_bytes=reserve,
                          connections=connections, hash_mem_multiplier=max(1.0, hash_mult),
                          process_memory_bytes=b.process_memory_bytes, operations=b.operations,
                          shared_buffers_fraction=b.shared_buffers_fraction, unit="MB",
                          units=units, online_limit_bytes=b.online_limit_bytes,
                          work_mem_held=b.work_mem_held)
    logger.info("memory budget: RAM %s, OS reserve %s, %d connections x (%s + %d operations x "
                "%s %.2f x work_mem), shared_buffers <= %s%s",
                format_bytes(ram), format_bytes(reserve), connections,
                format_bytes(b.process_memory_bytes), b.operations,
                "hash_mem_multiplier" if b.work_mem_held is None else "work_mem_held",
                hash_mult if b.work_mem_held is None else b.work_mem_held,
                format_bytes(budget.shared_buffers_max_bytes),
                f", fixed online budget {format_bytes(b.online_limit_bytes)}"
                if b.online_limit_bytes else "")
    return BudgetView(budget, catalog, offline, online)
