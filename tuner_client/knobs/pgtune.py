"""PGTune's rule-of-thumb configuration, from its published formulas (pgtune.leopard.in.ua).

The baseline a user would reach for instead of a tuner: given the machine's RAM, CPUs,
connection count, storage kind and database type, PGTune writes a fixed set of settings.
This module recomputes them (our own code from the published rules; PostgreSQL >= 10 on
Linux) so the final rounds of a tuning run (``final.baselines: [pgtune]``) and the end-to-end
benchmark measure "the rules" beside the default and the tuned configuration.

Rules (memory in kB, as PGTune computes them; ``RAM`` is the memory PostgreSQL may use):

* shared_buffers = RAM/4 (desktop RAM/16); effective_cache_size = RAM·3/4 (desktop RAM/4)
* maintenance_work_mem = RAM/16 (data warehouse RAM/8), at most 2GB
* wal_buffers = 3 % of shared_buffers, at most 16MB (14..16MB rounds up to 16MB), at least 32kB
* work_mem = (RAM − shared_buffers) / (3 · connections) / max_parallel_workers_per_gather,
  then /2 for dw and mixed, /6 for desktop; at least 64kB
* parallel settings only from 4 CPUs: max_worker_processes = max_parallel_workers = CPUs,
  max_parallel_workers_per_gather = max_parallel_maintenance_workers = ceil(CPUs/2)
  (capped at 4 except for dw's per-gather)
* random_page_cost 4 (hdd) / 1.1 (ssd, san); effective_io_concurrency 2 / 200 / 300
* checkpoint_completion_target 0.9; default_statistics_target 500 for dw, else 100;
  min/max_wal_size per type; huge_pages off below 32GB of RAM, try from 32GB.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from harmony_base.errors import ConfigError
from tuner_client.knobs.catalog import KnobCatalog

DB_TYPES = ("web", "oltp", "dw", "desktop", "mixed")
STORAGE = ("ssd", "hdd", "san")
KB = 1
MB = 1024 * KB
GB = 1024 * MB

_DEFAULT_CONNECTIONS = {"web": 200, "oltp": 300, "dw": 40, "desktop": 20, "mixed": 100}
_WAL_SIZES_KB = {"web": (1 * GB, 4 * GB), "oltp": (2 * GB, 8 * GB), "dw": (4 * GB, 16 * GB),
                 "desktop": (100 * MB, 2 * GB), "mixed": (1 * GB, 4 * GB)}


@dataclass(frozen=True)
class Machine:
    """What PGTune asks: memory PostgreSQL may use, CPUs, connections, storage, database type."""

    ram_bytes: int
    cpus: int
    connections: int | None = None
    storage: str = "ssd"
    db_type: str = "dw"

    def __post_init__(self) -> None:
        if self.ram_bytes < 32 * 1024**2:
            raise ConfigError(f"pgtune: ram_bytes must be at least 32MB, got {self.ram_bytes}")
        if self.cpus < 1:
            raise ConfigError(f"pgtune: cpus must be at least 1, got {self.cpus}")
        if self.connections is not None and self.connections < 1:
            raise ConfigError(f"pgtune: connections must be at least 1, got {self.connections}")
        if self.storage not in STORAGE:
            raise ConfigError(f"pgtune: storage must be one of {STORAGE}, got {self.storage!r}")
        if self.db_type not in DB_TYPES:
            raise ConfigError(f"pgtune: db_type must be one of {DB_TYPES}, got {self.db_type!r}")


def format_kb(kb: int) -> str:
    """PGTune's rendering: whole GB or MB when exact, else kB."""
    if kb % GB == 0:
        return f"{kb // GB}GB"
    if kb % MB == 0:
        return f"{kb // MB}MB"
    return f"{kb}kB"


def pgtune_kb(machine: Machine) -> dict[str, int | float | str]:
    """The settings as numbers (memory knobs in kB) keyed by PostgreSQL name."""
    ram = machine.ram_bytes // 1024
    kind = machine.db_type
    connections = machine.connections or _DEFAULT_CONNECTIONS[kind]
    shared = ram // 16 if kind == "desktop" else ram // 4
    cache = ram // 4 if kind == "desktop" else ram * 3 // 4
    maintenance = ram // 8 if kind == "dw" else ram // 16
    maintenance = min(maintenance, 2 * GB)
    wal = 3 * shared // 100
    if wal > 16 * MB:
        wal = 16 * MB
    if 14 * MB < wal < 16 * MB:
        wal = 16 * MB
    wal = max(wal, 32)
    out: dict[str, int | float | str] = {
        "max_connections": connections,
        "shared_buffers": shared,
        "effective_cache_size": cache,
        "maintenance_work_mem": maintenance,
        "checkpoint_completion_target": 0.9,
        "wal_buffers": wal,
        "default_statistics_target": 500 if kind == "dw" else 100,
        "random_page_cost": 4.0 if machine.storage == "hdd" else 1.1,
        "effective_io_concurrency": {"hdd": 2, "ssd": 200, "san": 300}[machine.storage],
    }
    per_gather = 1
    if machine.cpus >= 4:
        per_gather = math.ceil(machine.cpus / 2)
        if kind != "dw":
            per_gather = min(per_gather, 4)
        out["max_worker_processes"] = machine.cpus
        out["max_parallel_workers_per_gather"] = per_gather
        out["max_parallel_workers"] = machine.cpus
        out["max_parallel_maintenance_workers"] = min(math.ceil(machine.cpus / 2), 4)
    work = (ram - shared) / (connections * 3) / per_gather
    work = {"web": work, "oltp": work, "dw": work / 2, "desktop": work / 6, "mixed": work / 2}[kind]
    out["work_mem"] = max(64, math.floor(work))
    out["huge_pages"] = "try" if ram >= 32 * GB else "off"
    out["min_wal_size"], out["max_wal_size"] = _WAL_SIZES_KB[kind]
    return out


_MEMORY_KNOBS = ("shared_buffers", "effective_cache_size", "maintenance_work_mem", "wal_buffers",
                 "work_mem", "min_wal_size", "max_wal_size")


def pgtune_settings(machine: Machine, *, include_max_connections: bool = False) -> dict[str, str]:
    """The settings as ``postgresql.conf`` strings (what a user would paste).

    ``max_connections`` is an input of PGTune rather than advice; it is left out unless asked.
    """
    out: dict[str, str] = {}
    for name, value in pgtune_kb(machine).items():
        if name == "max_connections" and not include_max_connections:
            continue
        if name in _MEMORY_KNOBS:
            out[name] = format_kb(int(value))
        elif isinstance(value, float):
            out[name] = f"{value:g}"
        else:
            out[name] = str(value)
    return out


def pgtune_on_grid(machine: Machine, catalog: KnobCatalog, names: Iterable[str]) -> dict[str, str]:
    """PGTune's settings for those of ``names`` it sets, each rounded down onto its knob's
    units (PGTune computes kB values, e.g. ``6171023kB`` of 8kB pages, that a knob counted in
    pages would refuse)."""
    rules = pgtune_settings(machine)
    wanted = set(names)
    return {n: catalog[n].format(catalog[n].parse(v, round_down=True))
            for n, v in rules.items() if n in wanted}
