"""The PostgreSQL tuner's configuration file: schema, defaults, and the frozen config object.

A tuner config YAML names the database (a DSN, or none for the embedded local cluster),
the workload, how to measure, the memory budget, the offline and online knobs with ranges
in units (``32MB``..``2GB``), the strategies, evaluation budgets and the flow. Unknown keys
are errors naming the file and line. Knob ranges are checked against the live server's
``pg_settings`` later, by :func:`resolve_knob_space`, once a connection exists.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from harmony.definition import load_yaml_with_lines, parse_yaml_with_lines, validate
from harmony.errors import ConfigError
from strategies.space import EnumParam, IntParam, Param, RealParam, Space, Value
from tuner_client.knobs import Knob, KnobCatalog, KnobValue

_SIZE = {"type": ["string", "integer"]}
_SIZE_OR_AUTO = {"anyOf": [{"const": "auto"}, {"type": "string"}, {"type": "integer",
                                                                   "minimum": 1}]}
_NUM_OR_STR = {"type": ["number", "string"]}
_STRATEGY = {
    "type": "object", "additionalProperties": False,
    "properties": {"name": {"type": "string", "minLength": 1}, "options": {"type": "object"}},
}
_KNOB = {
    "oneOf": [
        {"type": "null"},
        {"type": "object", "additionalProperties": False,
         "properties": {"min": _NUM_OR_STR, "max": _NUM_OR_STR, "step": _NUM_OR_STR,
                        "log": {"type": "boolean"},
                        "values": {"type": "array", "minItems": 1,
                                   "items": {"type": ["string", "number", "boolean"]}}}},
    ]
}
_KNOBS = {
    "oneOf": [
        {"type": "object", "minProperties": 1, "additionalProperties": _KNOB,
         "propertyNames": {"pattern": r"^[a-z_][a-z0-9_.]*$"}},
        {"type": "array", "minItems": 1, "uniqueItems": True,
         "items": {"type": "string", "pattern": r"^[a-z_][a-z0-9_.]*$"}},
    ]
}
_MIX = {"oneOf": [{"type": "string", "minLength": 1},
                  {"type": "array", "minItems": 1, "items": {"type": ["string", "object"]}}]}

#: The schema of a tuner config file (unknown keys rejected everywhere).
TUNER_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Harmony PostgreSQL tuner config",
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]+$", "maxLength": 120},
        "description": {"type": "string"},
        "seed": {"type": "integer", "minimum": 0},
        "server": {"type": ["string", "null"]},
        "database": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "dsn": {"type": ["string", "null"]},
                "controller": {
                    "type": "object", "additionalProperties": False, "required": ["kind"],
                    "properties": {"kind": {"enum": ["local", "pg_ctl", "docker", "command"]},
                                   "options": {"type": "object"}},
                },
                "memory_limit": {"type": ["string", "integer", "null"]},
                "restart_timeout_s": {"type": "number", "exclusiveMinimum": 0},
            },
        },
        "workload": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "tpch": {
                    "type": "object", "additionalProperties": False,
                    "properties": {"scale": {"type": "number", "exclusiveMinimum": 0},
                                   "mix": _MIX, "schedule": _MIX},
                },
                "pgbench": {
                    "type": "object", "additionalProperties": False,
                    "properties": {"scale": {"type": "integer", "minimum": 1},
                                   "clients": {"type": "integer", "minimum": 1}},
                },
                "statement_timeout_s": {"type": ["number", "null"], "exclusiveMinimum": 0},
            },
        },
        "measure": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "warmup_s": {"type": "number", "minimum": 0},
                "samples": {"type": "integer", "minimum": 1, "maximum": 100},
                "aggregate": {"enum": ["best", "median", "mean"]},
                "queries": {"type": ["integer", "null"], "minimum": 1},
                "seconds": {"type": ["number", "null"], "exclusiveMinimum": 0},
                "estimator": {"enum": ["count", "concurrency"]},
            },
        },
        "budget": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "ram": _SIZE_OR_AUTO,
                "os_reserved": _SIZE,
                "connections": {"oneOf": [{"const": "auto"}, {"type": "integer", "minimum": 1}]},
                "shared_buffers_fraction": {"type": "number", "exclusiveMinimum": 0,
                                            "maximum": 1},
                "online": {"type": ["string", "integer", "null"]},
                "process_memory": _SIZE,
                "operations": {"type": "integer", "minimum": 1},
            },
        },
        "offline": {
            "type": "object", "additionalProperties": False,
            "properties": {"knobs": _KNOBS, "strategy": _STRATEGY,
                           "evaluations": {"type": "integer", "minimum": 1},
                           "prior": {"type": "object", "additionalProperties": False,
                                     "properties": {"enabled": {"type": "boolean"},
                                                    "min_r2": {"type": "number"}}}},
        },
        "online": {
            "type": "object", "additionalProperties": False,
            "properties": {"knobs": _KNOBS, "strategy": _STRATEGY,
                           "evaluations": {"type": "integer", "minimum": 1}},
        },
        "flow": {
            "type": "object", "additionalProperties": False,
            "properties": {
                "kind": {"enum": ["one-pass", "multi-pass"]},
                "max_passes": {"type": "integer", "minimum": 1, "maximum": 100},
                "shift": {"type": "object", "additionalProperties": False,
                          "properties": {"outside": {"type": "integer", "minimum": 1},
                                         "margin": {"type": "number", "minimum": 0,
                                                    "exclusiveMaximum": 1},
                                         "monitor": {"type": "integer", "minimum": 0}}},
                "local_minimum": {"type": "object", "additionalProperties": False,
                                  "properties": {"threshold": {"type": "number", "minimum": 0},
                                                 "enabled": {"type": "boolean"}}},
            },
        },
        "final": {
            "type": "object", "additionalProperties": False,
            "properties": {"rounds": {"type": "integer", "minimum": 0, "maximum": 20},
                           "apply_best": {"type": "boolean"},
                           "recommended": {"type": "boolean"},
                           "candidates": {"type": "integer", "minimum": 1, "maximum": 10}},
        },
        "warm_start": {
            "type": "object", "additionalProperties": False, "minProperties": 1,
            "properties": {
                "from": {"type": "array", "minItems": 1,
                         "items": {"type": "string", "minLength": 1}},
                "server": {"type": "string", "minLength": 1, "pattern": "^https?://"},
            },
        },
    },
}

#: Private memory of one PostgreSQL process besides work_mem (``budget.process_memory``):
#: catalog and plan caches, executor state, libraries. Measured on PostgreSQL 15 with TPC-H SF
#: 0.4: the peak sum of RssAnon over 15-19 backends and parallel workers running the study's
#: mixes with work_mem 64kB is 3.7-4.0MB per process (``python -m benchmarks.evidence
#: procmem``). The study's formula leaves it out (give 0 for that).
DEFAULT_PROCESS_MEMORY = 4 * 1024**2

#: The study's online knobs and ranges (background §2), used when ``online.knobs`` is omitted.
DEFAULT_ONLINE_KNOBS: dict[str, dict[str, Any]] = {
    "work_mem": {"min": "1MB", "max": "200MB", "step": "1MB"},
    "maintenance_work_mem": {"min": "1MB", "max": "1GB", "step": "1MB"},
    "effective_cache_size": {"min": "128MB", "max": "2GB", "step": "8MB"},
    "random_page_cost": {"min": 0.1, "max": 30, "step": 0.1},
    "temp_buffers": {"min": "1MB", "max": "1GB", "step": "1MB"},
}
#: The offline knob and range of the study, used when ``offline.knobs`` is omitted.
DEFAULT_OFFLINE_KNOBS: dict[str, dict[str, Any]] = {
    "shared_buffers": {"min": "32MB", "max": "2GB", "step": "8MB"},
}
#: Ranges used when a knob is listed by name only (``knobs: [jit, work_mem]``).
KNOWN_RANGES: dict[str, dict[str, Any]] = {
    **DEFAULT_ONLINE_KNOBS, **DEFAULT_OFFLINE_KNOBS,
    "jit": {"values": ["off", "on"]},
    "max_parallel_workers_per_gather": {"min": 0, "max": 8, "step": 1},
    "seq_page_cost": {"min": 0.1, "max": 10, "step": 0.1},
    "effective_io_concurrency": {"min": 0, "max": 256, "step": 1},
    "hash_mem_multiplier": {"min": 1, "max": 8, "step": 0.5},
}

_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?[bB])?\s*$")


def parse_bytes(value: str | int, *, what: str) -> int:
    """``'64MB'`` -> 67108864 (PostgreSQL spelling, 1024-based); a bare integer is bytes."""
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a size like '512MB', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{what}: a size must be >= 0, got {value}")
        return value
    m = _SIZE_RE.match(str(value))
    if not m:
        raise ConfigError(f"{what}: expected a size like '512MB' or '4GB' (units B, kB, MB, GB, "
                          f"TB), got {value!r}")
    number = float(m.group(1))
    unit = (m.group(2) or "B").lower()
    out = number * _UNITS[unit]
    if not float(out).is_integer():
        raise ConfigError(f"{what}: {value!r} is not a whole number of bytes")
    return int(out)


def format_bytes(n: int) -> str:
    """The largest exact PostgreSQL unit: 67108864 -> '64MB', 1536 -> '1536B'."""
    for unit, size in (("TB", 1024**4), ("GB", 1024**3), ("MB", 1024**2), ("kB", 1024)):
        if n and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


@dataclass(frozen=True)
class KnobSpec:
    """A knob to tune and its range as written (unit strings are resolved against pg_settings)."""

    name: str
    min: str | float | None = None
    max: str | float | None = None
    step: str | float | None = None
    values: tuple[Any, ...] | None = None
    log: bool = False
    where: str = ""  # "file, line N" for error messages


@dataclass(frozen=True)
class ControllerConfig:
    kind: str = "local"
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class DatabaseConfig:
    """``dsn`` None = an embedded local cluster loaded with a small TPC-H database."""

    dsn: str | None = None
    controller: ControllerConfig = ControllerConfig()
    memory_limit_bytes: int | None = None
    restart_timeout_s: float = 60.0

    @property
    def embedded(self) -> bool:
        return self.dsn is None


@dataclass(frozen=True)
class WorkloadConfig:
    kind: str = "tpch"  # tpch | pgbench
    scale: float = 0.01
    mix: Any = "2Q6,1Q13"
    schedule: Any = None
    clients: int = 4  # pgbench only
    statement_timeout_s: float | None = 300.0


@dataclass(frozen=True)
class MeasureConfig:
    """Warm-up, then ``samples`` samples per point; fixed-work sampling when ``queries`` is set.

    ``aggregate`` defaults to the median: the study's best-of-three ranks a point by its
    luckiest sample, and on a noisy server the search then chases bursts
    (benchmarks/README.md).
    """

    warmup_s: float = 10.0
    samples: int = 3
    aggregate: str = "median"
    queries: int | None = 20
    seconds: float | None = None
    #: ``count``: completions per minute in the window; ``concurrency``: streams / mean
    #: latency per query (Little's law), only queries started under the measured configuration
    estimator: str = "count"


@dataclass(frozen=True)
class BudgetConfig:
    """``ram_bytes`` None = detected; ``connections`` None = the workload's streams plus the
    parallel workers they can start (:func:`tuner_client.budget_view.worker_processes`)."""

    ram_bytes: int | None = None
    os_reserved_bytes: int = 512 * 1024**2
    connections: int | None = None
    shared_buffers_fraction: float = 0.5
    online_limit_bytes: int | None = None  # fixed online budget (overrides RAM - S - O - n·P)
    #: private memory of each process besides work_mem (P of :mod:`tuner_client.budget`)
    process_memory_bytes: int = DEFAULT_PROCESS_MEMORY
    #: sort/hash nodes a plan may hold at once, each up to work_mem
    operations: int = 1


@dataclass(frozen=True)
class SessionConfig:
    knobs: tuple[KnobSpec, ...]
    strategy: str = "nelder-mead"
    strategy_options: Mapping[str, Any] = field(default_factory=dict)
    evaluations: int = 10
    prior: bool = True
    prior_min_r2: float = 0.9


@dataclass(frozen=True)
class FlowConfig:
    kind: str = "one-pass"
    max_passes: int = 3
    shift_outside: int = 3
    #: the converged band is widened by this fraction of its centre before counting outliers:
    #: repeats agree to ~2 % within minutes here, so a bare [worst, best] band of 4-6 noisy
    #: vertices raised false shift alarms in the shift benchmark
    shift_margin: float = 0.05
    monitor: int = 6
    local_minimum: bool = True
    local_minimum_threshold: float = 0.1


@dataclass(frozen=True)
class FinalConfig:
    """Default vs best re-measured interleaved (A/B) ``rounds`` times; optionally keep the best.

    ``recommended``: also measure the BME prior's recommendation (the original settings with
    ``shared_buffers`` = M*) in the same rounds, when the prior gave a usable one.
    ``candidates``: re-measure the search's ``candidates`` best distinct configurations in the
    same rounds and keep the one with the best mean there. The search's single best value is
    the maximum of many noisy measurements and so biased upward (a lucky sample wins); the
    re-measurement, interleaved with the default, is not.
    """

    rounds: int = 2
    apply_best: bool = False
    recommended: bool = False
    candidates: int = 1


@dataclass(frozen=True)
class WarmStartConfig:
    """Prior sessions to start the searches from: exported files (XML, CSV, text log, or
    directories of them; paths relative to the working directory) and/or every session of a
    running Harmony server (read over its HTTP API: the tuner never opens the store)."""

    sources: tuple[str, ...] = ()
    server: str | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.sources or self.server)


@dataclass(frozen=True)
class TunerConfig:
    """One tuning job, as validated from a YAML file (see the module docstring)."""

    name: str
    database: DatabaseConfig
    workload: WorkloadConfig
    measure: MeasureConfig
    budget: BudgetConfig
    offline: SessionConfig
    online: SessionConfig
    flow: FlowConfig
    final: FinalConfig
    seed: int = 0
    server: str | None = None
    description: str = ""
    source: str = "tuner config"
    warm_start: WarmStartConfig = WarmStartConfig()

    def knob_specs(self) -> tuple[KnobSpec, ...]:
        return self.offline.knobs + self.online.knobs


def load_tuner_config(path: str | Path) -> TunerConfig:
    """Read, validate and freeze a tuner config YAML file (errors name file, line and key)."""
    data, lines = load_yaml_with_lines(path)
    return tuner_config_from_dict(data, source=str(path), lines=lines)


def parse_tuner_config(text: str, *, source: str = "tuner config") -> TunerConfig:
    data, lines = parse_yaml_with_lines(text, source=source)
    return tuner_config_from_dict(data, source=source, lines=lines)


def tuner_config_from_dict(data: Any, *, source: str = "tuner config",
                           lines: Mapping[tuple[Any, ...], int] | None = None) -> TunerConfig:
    """Validate ``data`` against :data:`TUNER_SCHEMA` and build the frozen config."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a tuner config must be a mapping at the top level")
    validate(data, TUNER_SCHEMA, source=source, lines=lines)
    lines = lines or {}

    def where(*path: Any) -> str:
        p = tuple(path)
        while p and p not in lines:
            p = p[:-1]
        return f"{source}, line {lines[p]}" if p in lines else source

    db = data.get("database") or {}
    ctl = db.get("controller") or {"kind": "local" if db.get("dsn") is None else "none"}
    if db.get("dsn") is None and ctl.get("kind", "local") != "local":
        raise ConfigError(f"{where('database', 'controller')}: without database.dsn the tuner "
                          f"runs its own local cluster, so controller.kind must be 'local', got "
                          f"{ctl.get('kind')!r}")
    if db.get("dsn") is not None and "controller" not in db:
        raise ConfigError(f"{where('database')}: database.dsn is given but no "
                          f"database.controller; restarting for offline knobs needs one "
                          f"(kind: pg_ctl, docker or command)")
    if db.get("dsn") is not None and ctl["kind"] == "local":
        raise ConfigError(f"{where('database', 'controller')}: controller kind 'local' is the "
                          f"embedded cluster; with a DSN use pg_ctl, docker or command")
    memory_limit = db.get("memory_limit")
    database = DatabaseConfig(
        dsn=db.get("dsn"),
        controller=ControllerConfig(ctl["kind"], dict(ctl.get("options") or {})),
        memory_limit_bytes=(parse_bytes(memory_limit, what=f"{where('database', 'memory_limit')}"
                                        f": database.memory_limit")
                            if memory_limit is not None else None),
        restart_timeout_s=float(db.get("restart_timeout_s", 60.0)),
    )
    if database.memory_limit_bytes is not None and not database.embedded:
        raise ConfigError(f"{where('database', 'memory_limit')}: memory_limit applies to the "
                          f"embedded local cluster only (limit an existing server yourself and "
                          f"give budget.ram)")

    wl = data.get("workload") or {}
    if "tpch" in wl and "pgbench" in wl:
        raise ConfigError(f"{where('workload')}: give one workload, tpch or pgbench, not both")
    timeout = wl.get("statement_timeout_s", 300.0)
    if "pgbench" in wl:
        pg = wl["pgbench"]
        workload = WorkloadConfig(kind="pgbench", scale=float(pg.get("scale", 1)), mix=None,
                                  clients=int(pg.get("clients", 4)), statement_timeout_s=timeout)
    else:
        tp = wl.get("tpch") or {}
        if "mix" in tp and "schedule" in tp:
            raise ConfigError(f"{where('workload', 'tpch')}: give a mix or a schedule, not both")
        workload = WorkloadConfig(kind="tpch", scale=float(tp.get("scale", 0.01)),
                                  mix=tp.get("mix", "2Q6,1Q13") if "schedule" not in tp else None,
                                  schedule=tp.get("schedule"), statement_timeout_s=timeout)

    ms = data.get("measure") or {}
    if ms.get("queries") is not None and ms.get("seconds") is not None:
        raise ConfigError(f"{where('measure')}: sample by queries (fixed work) or by seconds "
                          f"(time window), not both")
    queries = ms.get("queries", 20 if ms.get("seconds") is None else None)
    measure = MeasureConfig(warmup_s=float(ms.get("warmup_s", 10.0)),
                            samples=int(ms.get("samples", 3)),
                            aggregate=ms.get("aggregate", "median"), queries=queries,
                            seconds=None if queries is not None else float(ms["seconds"]),
                            estimator=ms.get("estimator", "count"))

    bd = data.get("budget") or {}
    ram = bd.get("ram", "auto")
    online_limit = bd.get("online")
    connections = bd.get("connections", "auto")
    budget = BudgetConfig(
        ram_bytes=None if ram == "auto" else parse_bytes(ram, what=f"{where('budget', 'ram')}: "
                                                                   f"budget.ram"),
        os_reserved_bytes=parse_bytes(bd.get("os_reserved", "512MB"),
                                      what=f"{where('budget', 'os_reserved')}: budget.os_reserved"),
        connections=None if connections == "auto" else int(connections),
        shared_buffers_fraction=float(bd.get("shared_buffers_fraction", 0.5)),
        online_limit_bytes=(parse_bytes(online_limit, what=f"{where('budget', 'online')}: "
                                                           f"budget.online")
                            if online_limit is not None else None),
        process_memory_bytes=(parse_bytes(bd["process_memory"],
                                          what=f"{where('budget', 'process_memory')}: "
                                               f"budget.process_memory")
                              if "process_memory" in bd else DEFAULT_PROCESS_MEMORY),
        operations=int(bd.get("operations", 1)),
    )

    off = data.get("offline") or {}
    on = data.get("online") or {}
    offline_knobs = _knob_specs(off.get("knobs", DEFAULT_OFFLINE_KNOBS), ("offline", "knobs"),
                                where)
    online_knobs = _knob_specs(on.get("knobs", DEFAULT_ONLINE_KNOBS), ("online", "knobs"), where)
    dup = {k.name for k in offline_knobs} & {k.name for k in online_knobs}
    if dup:
        raise ConfigError(f"{where('online', 'knobs')}: knob(s) {sorted(dup)} are listed both "
                          f"offline and online; list each knob once")
    off_strategy = off.get("strategy") or {}
    on_strategy = on.get("strategy") or {}
    prior = off.get("prior") or {}
    offline = SessionConfig(
        knobs=offline_knobs, strategy=off_strategy.get("name", "nelder-mead"),
        strategy_options=dict(off_strategy.get("options", {"simplex_size": 2})),
        evaluations=int(off.get("evaluations", 6)), prior=bool(prior.get("enabled", True)),
        prior_min_r2=float(prior.get("min_r2", 0.9)))
    online = SessionConfig(
        knobs=online_knobs, strategy=on_strategy.get("name", "nelder-mead"),
        strategy_options=dict(on_strategy.get("options", {"simplex_size": 6})),
        evaluations=int(on.get("evaluations", 30)), prior=False)

    fl = data.get("flow") or {}
    shift = fl.get("shift") or {}
    lm = fl.get("local_minimum") or {}
    kind = fl.get("kind", "one-pass")
    flow = FlowConfig(kind=kind, max_passes=int(fl.get("max_passes", 1 if kind == "one-pass"
                                                       else 3)),
                      shift_outside=int(shift.get("outside", 3)),
                      shift_margin=float(shift.get("margin", FlowConfig.shift_margin)),
                      monitor=int(shift.get("monitor", 6)),
                      local_minimum=bool(lm.get("enabled", True)),
                      local_minimum_threshold=float(lm.get("threshold", 0.1)))
    if kind == "one-pass" and flow.max_passes != 1:
        raise ConfigError(f"{where('flow', 'max_passes')}: a one-pass flow makes exactly one "
                          f"pass; use kind: multi-pass for max_passes {flow.max_passes}")
    fin = data.get("final") or {}
    final = FinalConfig(rounds=int(fin.get("rounds", 2)),
                        apply_best=bool(fin.get("apply_best", False)),
                        recommended=bool(fin.get("recommended", False)),
                        candidates=int(fin.get("candidates", 1)))
    ws = data.get("warm_start") or {}
    warm_start = WarmStartConfig(sources=tuple(ws.get("from", ())), server=ws.get("server"))
    return TunerConfig(name=data["name"], database=database, workload=workload, measure=measure,
                       budget=budget, offline=offline, online=online, flow=flow, final=final,
                       seed=int(data.get("seed", 0)), server=data.get("server"),
                       description=data.get("description", ""), source=source,
                       warm_start=warm_start)


def _knob_specs(raw: Any, path: tuple[str, ...], where: Any) -> tuple[KnobSpec, ...]:
    items = {name: None for name in raw} if isinstance(raw, list) else dict(raw)
    out = []
    for name, spec in items.items():
        here = where(*path, name)
        if spec is None:
            if name not in KNOWN_RANGES:
                raise ConfigError(f"{here}: knob {name!r} has no built-in range; give one, e.g. "
                                  f"{name}: {{min: ..., max: ..., step: ...}} or "
                                  f"{{values: [...]}}")
            spec = KNOWN_RANGES[name]
        values = spec.get("values")
        if values is not None and any(k in spec for k in ("min", "max", "step")):
            raise ConfigError(f"{here}: knob {name!r}: give either values or min/max/step, "
                              f"not both")
        if values is None and ("min" not in spec or "max" not in spec):
            raise ConfigError(f"{here}: knob {name!r} needs min and max (with units, e.g. "
                              f"min: 1MB, max: 200MB) or a list of values")
        for key in ("min", "max", "step"):
            v = spec.get(key)
            if isinstance(v, float) and not math.isfinite(v):
                raise ConfigError(f"{here}: knob {name!r}: {key} must be finite, got {v}")
        out.append(KnobSpec(
            name=name, min=spec.get("min"), max=spec.get("max"), step=spec.get("step"),
            values=tuple(_yaml_bool(v) for v in values) if values is not None else None,
            log=bool(spec.get("log", False)), where=here))
    return tuple(out)


def _yaml_bool(v: Any) -> Any:
    # YAML 1.1 reads on/off/yes/no as booleans; PostgreSQL wants 'on'/'off'
    if isinstance(v, bool):
        return "on" if v else "off"
    return v


# ---------------------------------------------------------------------------------------------
# knob ranges resolved against the live catalog -> the session's typed search space


@dataclass(frozen=True)
class KnobParam:
    """One tuned knob: its pg_settings row, its session parameter and the parameter's unit.

    Memory knobs are integer parameters counted in ``MB`` (``kB`` when a bound or the step is
    not a whole MB), time knobs in ``ms``; booleans and enums are enumerations.
    """

    knob: Knob
    param: Param
    unit: str | None

    @property
    def name(self) -> str:
        return self.knob.name

    def canonical(self, value: Value) -> KnobValue:
        """The knob's canonical value (bytes, ms, number, bool, str) for a session value."""
        if isinstance(self.param, EnumParam):
            return self.knob.parse(value)
        if self.unit is not None:
            return self.knob.from_unit(value, self.unit)  # type: ignore[arg-type]
        return self.knob.parse(value)

    def setting(self, value: Value) -> str:
        """The PostgreSQL value string with units (``'64MB'``), for ALTER SYSTEM."""
        return self.knob.format(self.canonical(value))

    def session_value(self, canonical: KnobValue) -> Value:
        """A canonical knob value as a session value on the grid (snapped into the range)."""
        if isinstance(self.param, EnumParam):
            text = self.knob.format(canonical)
            return text if text in self.param.values else self.param.values[0]
        number = (float(self.knob.to_unit(canonical, self.unit)) if self.unit is not None
                  else float(canonical))  # type: ignore[arg-type]
        return self.param.snap(number)


@dataclass(frozen=True)
class KnobSpace:
    """The knobs of one session and the search space over them."""

    params: tuple[KnobParam, ...]

    @property
    def space(self) -> Space:
        return Space(tuple(p.param for p in self.params))

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def __getitem__(self, name: str) -> KnobParam:
        for p in self.params:
            if p.name == name:
                return p
        raise ConfigError(f"knob {name!r} is not tuned in this session; it tunes {self.names}")

    def settings(self, point: Mapping[str, Value]) -> dict[str, str]:
        """A session point as PostgreSQL settings with units."""
        return {p.name: p.setting(point[p.name]) for p in self.params}

    def point_from_settings(self, settings: Mapping[str, str]) -> dict[str, Value]:
        """Settings (e.g. the server's current ones) as the nearest session point."""
        return {p.name: p.session_value(p.knob.parse(settings[p.name])) for p in self.params}


def resolve_knob_space(specs: tuple[KnobSpec, ...], catalog: KnobCatalog, *,
                       kind: str) -> KnobSpace:
    """Check each knob's range against ``catalog`` and build the session parameters.

    ``kind`` is ``offline`` or ``online``: a knob in the wrong section is an error. Errors
    name the file, line, knob and the allowed range.
    """
    out = []
    for spec in specs:
        try:
            out.append(_resolve_one(spec, catalog, kind))
        except ConfigError as exc:
            raise ConfigError(f"{spec.where}: {exc}") from None
    return KnobSpace(tuple(out))


def _resolve_one(spec: KnobSpec, catalog: KnobCatalog, kind: str) -> KnobParam:
    knob = catalog.tunable(spec.name)
    if knob.kind != kind:
        other = "online" if kind == "offline" else "offline"
        why = ("needs a restart (context postmaster)" if knob.kind == "offline"
               else f"can be changed without a restart (context {knob.context})")
        raise ConfigError(f"knob {knob.name!r} {why}; list it under {other}.knobs, not "
                          f"{kind}.knobs")
    current = knob.current()
    if knob.vartype in ("bool", "enum") or spec.values is not None:
        if spec.values is None:
            values: tuple[Any, ...] = ("off", "on") if knob.vartype == "bool" \
                else tuple(knob.enumvals or ())
        else:
            values = spec.values
        if knob.vartype not in ("bool", "enum", "string"):
            parsed = tuple(knob.parse(v) for v in values)
            names = tuple(knob.format(v) for v in parsed)
        else:
            names = tuple(knob.format(knob.parse(v)) for v in values)
        default = knob.format(current) if current is not None else None
        param: Param = EnumParam(knob.name, names, default=default if default in names else None)
        return KnobParam(knob, param, None)
    if knob.vartype == "string":
        raise ConfigError(f"knob {knob.name!r} is a string setting; give its candidate values "
                          f"as values: [...]")
    lo, hi = knob.parse(spec.min), knob.parse(spec.max)
    if lo > hi:  # type: ignore[operator]
        raise ConfigError(f"knob {knob.name!r}: min {spec.min!r} is above max {spec.max!r}")
    step = _parse_step(knob, spec.step)
    unit: str | None = None
    if knob.quantity == "memory":
        unit = "MB" if all(Fraction(v) % 1024**2 == 0 for v in (lo, hi, step)) else "kB"
        if any(Fraction(v) % 1024 for v in (lo, hi, step)):
            raise ConfigError(f"knob {knob.name!r}: min, max and step must be whole kB, got "
                              f"{spec.min!r}, {spec.max!r}, {spec.step!r}")
    elif knob.quantity == "time":
        unit = "ms"
    scale = Fraction(1) if unit is None else Fraction(knob.to_unit(1, unit))
    lo_u, hi_u, step_u = (Fraction(v) * scale for v in (lo, hi, step))
    current_u: Fraction | None = None
    if current is not None and lo <= current <= hi:  # type: ignore[operator]
        current_u = Fraction(current) * scale  # type: ignore[arg-type]
    if knob.vartype == "integer":
        if any(v.denominator != 1 for v in (lo_u, hi_u, step_u)):
            raise ConfigError(f"knob {knob.name!r}: min, max and step must be whole numbers of "
                              f"{unit or 'units'}")
        param = IntParam(knob.name, int(lo_u), int(hi_u), step=max(1, int(step_u)), log=spec.log,
                         default=int(round(current_u)) if current_u is not None else None,
                         unit=unit)
    else:
        param = RealParam(knob.name, float(lo_u), float(hi_u), step=float(step_u), log=spec.log,
                          default=float(current_u) if current_u is not None else None, unit=unit)
    return KnobParam(knob, param, unit)


def _parse_step(knob: Knob, step: Any) -> KnobValue:
    if step is None:
        if knob.vartype == "integer":
            return knob.unit_size if knob.unit_size.denominator == 1 else 1  # type: ignore[return-value]
        return 0.0
    if knob.quantity is None:
        value = float(step)
    else:
        # a step is a quantity, not a setting: parse it without the knob's range check
        value = parse_bytes(step, what=f"{knob.name} step") if knob.quantity == "memory" \
            else _parse_time_ms(knob, step)
    if value <= 0:
        raise ConfigError(f"knob {knob.name!r}: step must be > 0, got {step!r}")
    return int(value) if float(value).is_integer() and knob.vartype == "integer" else value


def _parse_time_ms(knob: Knob, step: Any) -> float:
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*(us|ms|s|min|h|d)\s*$", str(step))
    if not m:
        raise ConfigError(f"knob {knob.name!r}: step must be a duration like '10ms', got {step!r}")
    factors = {"us": 0.001, "ms": 1.0, "s": 1000.0, "min": 60000.0, "h": 3.6e6, "d": 8.64e7}
    return float(m.group(1)) * factors[m.group(2)]
