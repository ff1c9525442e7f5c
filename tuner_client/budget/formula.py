"""The memory budget: what RAM the server has, and the constraints it puts on the memory knobs.

The budget of docs/background.md §2, with the processes' own memory counted::

    offline:  shared_buffers <= min(fraction · RAM, RAM − O − n·P − W)   (fraction 0.5 by default)
    online:   work_mem·m + maintenance_work_mem + temp_buffers <= RAM − S − O − n·P

with S the shared_buffers in force, O the OS reserve, n the connections (processes that may
each use work_mem: the streams and their parallel workers), P the private memory of each
process besides work_mem (catalog and plan caches, executor state; ``process_memory``), W the
online knobs' share with the values in force when shared_buffers is searched, and
m = n · operations · h: a plan may hold ``operations`` sort or hash nodes at once, each holding
h work_mem at the peak. The worst case is h = hash_mem_multiplier (a hash node may grow to
work_mem × hash_mem_multiplier before it spills); ``work_mem_held`` gives a measured h instead
(what the processes really hold at their peak; see ``benchmarks/evidence/oomgrid.py``). m is
rounded *up* to an integer so the constraint stays a conservative integer inequality.
temp_buffers and maintenance_work_mem count once, as in the original formula. With
``process_memory`` 0, ``operations`` 1 and h = 1 this is that formula exactly
(docs/background.md §2).

Units: session parameters express memory knobs as **integers in MB** by default (``unit="MB"``;
``"kB"`` for finer grids), the same unit on both sides of each constraint string. Knobs given
in different units (``units={"work_mem": "kB"}``) get scaled coefficients and the right-hand
side is written in the finest unit involved. Constraint strings are what the ``constraint``
plugin compiles into an isl integer set.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from harmony_base.errors import ConfigError, ConstraintError
from harmony_base.units import MEMORY_UNITS
from tuner_client.servers.host_memory import detect_ram_bytes

UNIT_BYTES = MEMORY_UNITS
ONLINE_MEMORY_KNOBS = ("work_mem", "maintenance_work_mem", "temp_buffers")
#: knobs the memory budget reads, tuned or not (the run tracks them from the start)
BUDGET_KNOBS = ("shared_buffers", *ONLINE_MEMORY_KNOBS)


@dataclass(frozen=True)
class MemoryBudget:
    """The budget inequalities for one machine, as constraint strings and point checks.

    ``ram_bytes``/``os_reserved_bytes``/``process_memory_bytes`` in bytes; ``connections`` = n
    of the formula; ``online_limit_bytes`` replaces RAM − S − O − n·P with a fixed online
    budget (e.g. the tight 64MB setting of docs/background.md §2) when given;
    ``work_mem_held`` (h) replaces ``hash_mem_multiplier`` in m when given.
    """

    ram_bytes: int
    os_reserved_bytes: int = 0
    connections: int = 1
    hash_mem_multiplier: float = 2.0
    process_memory_bytes: int = 0
    operations: int = 1
    shared_buffers_fraction: float = 0.5
    unit: str = "MB"
    units: Mapping[str, str] = field(default_factory=dict)
    online_limit_bytes: int | None = None
    work_mem_held: float | None = None

    def __post_init__(self) -> None:
        if self.ram_bytes <= 0:
            raise ConfigError(f"budget: ram must be positive, got {self.ram_bytes} bytes")
        if not 0 <= self.os_reserved_bytes < self.ram_bytes:
            raise ConfigError(f"budget: os_reserved must be in [0, RAM={self.ram_bytes}) bytes, "
                              f"got {self.os_reserved_bytes}")
        if self.connections < 1:
            raise ConfigError(f"budget: connections must be >= 1, got {self.connections}")
        if self.operations < 1:
            raise ConfigError(f"budget: operations must be >= 1, got {self.operations}")
        if self.process_memory_bytes < 0:
            raise ConfigError(f"budget: process_memory must be >= 0, got "
                              f"{self.process_memory_bytes} bytes")
        if self.os_reserved_bytes + self.processes_bytes >= self.ram_bytes:
            raise ConfigError(
                f"budget: the OS reserve {self.os_reserved_bytes // 2**20}MB and "
                f"{self.connections} processes × process_memory "
                f"{self.process_memory_bytes // 2**20}MB leave nothing of RAM "
                f"{self.ram_bytes // 2**20}MB; give more RAM or fewer connections")
        if self.work_mem_held is not None and not 0 < self.work_mem_held <= 1000:
            raise ConfigError(f"budget: work_mem_held must be a positive number of work_mem "
                              f"per sort/hash node, got {self.work_mem_held}")
        if self.hash_mem_multiplier < 1:
            raise ConfigError(f"budget: hash_mem_multiplier must be >= 1, got "
                              f"{self.hash_mem_multiplier}")
        if not 0 < self.shared_buffers_fraction <= 1:
            raise ConfigError(f"budget: shared_buffers_fraction must be in (0, 1], got "
                              f"{self.shared_buffers_fraction}")
        for name, u in {"unit": self.unit, **self.units}.items():
            if u not in UNIT_BYTES:
                raise ConfigError(f"budget: unit of {name} must be one of "
                                  f"{', '.join(UNIT_BYTES)}, got {u!r}")

    @classmethod
    def detect(cls, **kwargs: object) -> MemoryBudget:
        """A budget with the RAM detected (cgroup limit or MemTotal)."""
        # kwargs are this dataclass's own fields, passed through as the caller gave them
        return cls(ram_bytes=detect_ram_bytes(), **kwargs)  # type: ignore[arg-type]

    # -- units ----------------------------------------------------------------------------------
    def unit_of(self, knob: str) -> str:
        return self.units.get(knob, self.unit)

    def to_bytes(self, knob: str, value: float) -> int:
        """A session value of ``knob`` (in its unit) in bytes."""
        return int(round(value * UNIT_BYTES[self.unit_of(knob)]))

    # -- derived numbers -----------------------------------------------------------------------
    @property
    def work_mem_coefficient(self) -> int:
        """m of the online budget: connections × operations × h, rounded up (h: work_mem_held,
        else hash_mem_multiplier, the worst case)."""
        held = self.hash_mem_multiplier if self.work_mem_held is None else self.work_mem_held
        return math.ceil(self.connections * self.operations * held - 1e-9)

    @property
    def processes_bytes(self) -> int:
        """n·P: the private memory of the processes besides work_mem."""
        return self.connections * self.process_memory_bytes

    @property
    def shared_buffers_max_bytes(self) -> int:
        """The fraction cap on shared_buffers: fraction · RAM, down to whole 8kB blocks."""
        return int(self.ram_bytes * self.shared_buffers_fraction) // 8192 * 8192

    def shared_buffers_cap(self, online_bytes: int = 0) -> int:
        """The offline cap: min(fraction · RAM, RAM − O − n·P − W), down to whole 8kB blocks.

        ``online_bytes`` = W, what the online knobs in force take (work_mem·m +
        maintenance_work_mem + temp_buffers): shared_buffers is searched with them in force,
        so every point the offline session measures respects the whole budget.
        """
        rest = self.ram_bytes - self.os_reserved_bytes - self.processes_bytes - online_bytes
        return max(0, min(self.shared_buffers_max_bytes, rest // 8192 * 8192))

    def online_use(self, values: Mapping[str, float]) -> int:
        """W in bytes for online knob values in the session units (work_mem counted m times)."""
        return sum(self.to_bytes(k, values[k]) * (self.work_mem_coefficient
                                                  if k == "work_mem" else 1)
                   for k in ONLINE_MEMORY_KNOBS if k in values)

    def online_limit(self, shared_buffers_bytes: int) -> int:
        """RAM − S − O − n·P in bytes (or the fixed online budget); ConstraintError if not
        positive."""
        if self.online_limit_bytes is not None:
            return self.online_limit_bytes
        limit = (self.ram_bytes - shared_buffers_bytes - self.os_reserved_bytes
                 - self.processes_bytes)
        if limit <= 0:
            raise ConstraintError(
                f"online memory budget is empty: RAM {self.ram_bytes // 2**20}MB − "
                f"shared_buffers {shared_buffers_bytes // 2**20}MB − OS reserve "
                f"{self.os_reserved_bytes // 2**20}MB − {self.connections} processes × "
                f"{self.process_memory_bytes // 2**20}MB = {limit // 2**20}MB"
            )
        return limit

    # -- constraint strings --------------------------------------------------------------------
    def offline_constraints(self, online_bytes: int = 0) -> list[str]:
        """``["shared_buffers <= N"]`` with N the offline cap (:meth:`shared_buffers_cap`) in
        shared_buffers' unit; ConstraintError when nothing is left for shared_buffers."""
        cap_bytes = self.shared_buffers_cap(online_bytes)
        cap = cap_bytes // UNIT_BYTES[self.unit_of("shared_buffers")]
        if cap <= 0:
            raise ConstraintError(
                f"no memory is left for shared_buffers: RAM {self.ram_bytes // 2**20}MB − OS "
                f"reserve {self.os_reserved_bytes // 2**20}MB − {self.connections} processes × "
                f"{self.process_memory_bytes // 2**20}MB − online knobs in force "
                f"{online_bytes // 2**20}MB")
        return [f"shared_buffers <= {cap}"]

    def online_constraints(
        self,
        shared_buffers_in_force: int,
        *,
        tuned: Iterable[str] = ONLINE_MEMORY_KNOBS,
        fixed: Mapping[str, int] | None = None,
    ) -> list[str]:
        """``["work_mem * m + maintenance_work_mem + temp_buffers <= L"]`` for the online session.

        ``shared_buffers_in_force`` is in bytes. Knobs of the formula that the session does
        not tune are constants: give their values in force in bytes via ``fixed`` (they are
        subtracted from the right-hand side).
        """
        tuned = [k for k in tuned if k in ONLINE_MEMORY_KNOBS]
        if not tuned:
            return []
        fixed = dict(fixed or {})
        missing = [k for k in ONLINE_MEMORY_KNOBS if k not in tuned and k not in fixed]
        if missing:
            raise ConfigError(f"budget: the online constraint needs the values in force of "
                              f"{', '.join(missing)} (pass fixed={{name: bytes}})")
        base_bytes = min(UNIT_BYTES[self.unit_of(k)] for k in tuned)
        rhs = self.online_limit(shared_buffers_in_force)
        for name, value in fixed.items():
            if name in ONLINE_MEMORY_KNOBS and name not in tuned:
                rhs -= value * (self.work_mem_coefficient if name == "work_mem" else 1)
        if rhs < 0:
            raise ConstraintError(f"online memory budget is exhausted by the fixed knobs "
                                  f"{fixed}: {rhs} bytes left")
        terms = []
        for name in ONLINE_MEMORY_KNOBS:
            if name not in tuned:
                continue
            coef = (self.work_mem_coefficient if name == "work_mem" else 1) * (
                UNIT_BYTES[self.unit_of(name)] // base_bytes)
            terms.append(name if coef == 1 else f"{name} * {coef}")
        return [f"{' + '.join(terms)} <= {rhs // base_bytes}"]

    def explain_work_mem(self, shared_buffers_bytes: int, others: Mapping[str, int]) -> str:
        """The online budget's largest work_mem with its arithmetic, for a person:
        ``others`` are maintenance_work_mem and temp_buffers in bytes (each counted once)."""
        mib = 2**20
        held = self.hash_mem_multiplier if self.work_mem_held is None else self.work_mem_held
        room = self.online_limit(shared_buffers_bytes) - sum(others.values())
        if self.online_limit_bytes is not None:
            left = f"the fixed online budget {self.online_limit_bytes / mib:.0f} MB"
        else:
            left = (f"RAM {self.ram_bytes / mib:.0f} MB - shared_buffers "
                    f"{shared_buffers_bytes / mib:.0f} MB - OS reserve "
                    f"{self.os_reserved_bytes / mib:.0f} MB - {self.connections} processes x "
                    f"{self.process_memory_bytes / mib:.0f} MB")
        left += "".join(f" - {name} {value / mib:.0f} MB" for name, value in others.items())
        return (f"work_mem <= ({left}) / ({self.connections} connections x {self.operations} "
                f"sort/hash operation(s) x {held:g} work_mem held) = "
                f"{max(0, room) / mib:.0f} MB / {self.work_mem_coefficient} = "
                f"{max(0, room) / self.work_mem_coefficient / mib:.1f} MB")

    # -- point checks --------------------------------------------------------------------------
    def slack(self, point: Mapping[str, float], shared_buffers_bytes: int | None = None) -> int:
        """Bytes left under the tightest applicable budget inequality (< 0: infeasible).

        A point with ``shared_buffers`` is checked against the offline cap (with the point's
        own online knobs, if any); a point with online memory knobs against the online budget
        with ``shared_buffers_bytes`` (or the point's own shared_buffers). Values are in the
        session units (see module docstring).
        """
        slacks: list[int] = []
        sb = shared_buffers_bytes
        used = self.online_use(point)
        if "shared_buffers" in point:
            sb_point = self.to_bytes("shared_buffers", point["shared_buffers"])
            slacks.append(self.shared_buffers_cap(used) - sb_point)
            sb = sb if sb is not None else sb_point
        if any(k in point for k in ONLINE_MEMORY_KNOBS):
            if sb is None:
                raise ConfigError("budget: the online slack needs the shared_buffers in force")
            slacks.append(self.online_limit(sb) - used)
        if not slacks:
            raise ConfigError(f"budget: point {dict(point)} has no memory knob of the budget")
        return min(slacks)

    def is_feasible(self, point: Mapping[str, float],
                    shared_buffers_bytes: int | None = None) -> bool:
        """True when the point satisfies every applicable budget inequality."""
        return self.slack(point, shared_buffers_bytes) >= 0
