"""The workload and knob sections of a tuner config: which workload drives the database and
which knobs each session tunes, each read over its defaults with errors naming file and line.

:mod:`.parse` calls these while building the frozen config; ``where(*path)`` is its locator
(``"configs/x.yaml, line 12"`` for the deepest path that has a line).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from harmony_base.errors import ConfigError
from tuner_client.config.defaults import KNOWN_RANGES
from tuner_client.config.model import (
    DatabaseConfig,
    GuardConfig,
    KnobSpec,
    ObserveConfig,
    SessionConfig,
    WorkloadConfig,
)
from workloads.apps import app_names
from workloads.script_file import parse_weighted

#: where a config path was written: ``where('budget', 'ram')`` -> ``"x.yaml, line 7"``
Where = Callable[..., str]


def workload_config(data: Mapping[str, Any], database: DatabaseConfig, source: str,
                    where: Where) -> WorkloadConfig:
    """The ``workload:`` section: exactly one of tpch (the default), pgbench, scripts, replay
    or observe."""
    wl = data.get("workload") or {}
    given = [k for k in ("tpch", "pgbench", "scripts", "replay", "observe") if k in wl]
    if len(given) > 1:
        raise ConfigError(f"{where('workload')}: give one workload (tpch, pgbench, scripts, "
                          f"replay or observe), but got {', '.join(given)}")
    timeout = wl.get("statement_timeout_s", WorkloadConfig.statement_timeout_s)
    if "observe" in wl:
        workload = WorkloadConfig(kind="observe", mix=None, statement_timeout_s=None,
                                  observe=_observe_config(wl["observe"] or {}))
        _check_observe(data, database, where)
        return workload
    if given and given[0] in ("scripts", "replay"):
        return _user_workload(given[0], wl[given[0]], timeout, source, where)
    if "pgbench" in wl:
        pg = wl["pgbench"]
        return WorkloadConfig(kind="pgbench",
                              scale=float(pg.get("scale", WorkloadConfig.PGBENCH_SCALE)),
                              mix=None, clients=int(pg.get("clients", WorkloadConfig.clients)),
                              builtin=str(pg.get("builtin", WorkloadConfig.builtin)),
                              statement_timeout_s=timeout)
    tp = wl.get("tpch") or {}
    if "mix" in tp and "schedule" in tp:
        raise ConfigError(f"{where('workload', 'tpch')}: give a mix or a schedule, not both")
    return WorkloadConfig(kind="tpch", scale=float(tp.get("scale", WorkloadConfig.scale)),
                          mix=(tp.get("mix", WorkloadConfig.mix) if "schedule" not in tp
                               else None),
                          schedule=tp.get("schedule"), statement_timeout_s=timeout)


def _user_workload(kind: str, raw: Mapping[str, Any], timeout: float | None, source: str,
                   where: Where) -> WorkloadConfig:
    """``workload.scripts`` or ``workload.replay``: the user's SQL or a captured workload."""
    files = tuple(raw["files"]) if kind == "scripts" else (raw["file"],)
    for i, spec in enumerate(files):
        try:
            parse_weighted(spec)  # checks file@weight
        except ConfigError as exc:
            raise ConfigError(f"{where('workload', kind, 'files', i)}: workload.{kind}.files: "
                              f"{exc}") from None
    app = raw.get("app") or {}
    if app and app["name"] not in app_names():
        raise ConfigError(f"{where('workload', kind, 'app', 'name')}: workload.{kind}.app "
                          f"must be one of {app_names()}, but got {app['name']!r}")
    base = Path(source).parent if Path(source).suffix in (".yaml", ".yml") else None
    return WorkloadConfig(kind=kind, mix=None, files=files,
                          # a replay without clients runs at the captured concurrency (0)
                          clients=int(raw.get("clients", WorkloadConfig.clients
                                              if kind == "scripts" else 0)),
                          writes=bool(raw.get("writes", False)),
                          variables=dict(raw.get("variables") or {}),
                          app=app.get("name"), app_scale=int(app.get("scale", 1)),
                          base_dir=str(base) if base is not None else None,
                          statement_timeout_s=timeout)


def _observe_config(raw: Mapping[str, Any]) -> ObserveConfig:
    """The ``workload.observe`` section over its defaults."""
    guard = raw.get("guard") or {}
    return ObserveConfig(
        min_calls=int(raw.get("min_calls", ObserveConfig.min_calls)),
        min_coverage=float(raw.get("min_coverage", ObserveConfig.min_coverage)),
        poll_s=float(raw.get("poll_s", ObserveConfig.poll_s)),
        allow_restarts=bool(raw.get("allow_restarts", ObserveConfig.allow_restarts)),
        shift_distance=float(raw.get("shift_distance", ObserveConfig.shift_distance)),
        guard=GuardConfig(**{k: type(getattr(GuardConfig, k))(v) for k, v in guard.items()}))


def _check_observe(data: Mapping[str, Any], database: DatabaseConfig, where: Where) -> None:
    """Live mode watches an existing server; restart-time knobs need a maintenance window;
    its samples are time windows scored by the latency estimator."""
    if database.embedded:
        raise ConfigError(f"{where('workload', 'observe')}: workload.observe measures the "
                          f"traffic an application already sends to an existing server; give "
                          f"database.dsn (and a controller) of that server")
    observe = (data["workload"].get("observe") or {})
    off = data.get("offline") or {}
    if off.get("knobs") and not observe.get("allow_restarts", ObserveConfig.allow_restarts):
        raise ConfigError(f"{where('offline', 'knobs')}: workload.observe changes only "
                          f"reload-time knobs (ALTER SYSTEM + reload) on a live server, but "
                          f"offline.knobs {sorted(off['knobs'])} need restarts; remove them, or "
                          f"set workload.observe.allow_restarts: true if this run is inside a "
                          f"maintenance window")
    ms = data.get("measure") or {}
    if ms.get("queries") is not None:
        raise ConfigError(f"{where('measure', 'queries')}: workload.observe samples time "
                          f"windows (the application decides how much work arrives); give "
                          f"measure.seconds instead of measure.queries")
    if ms.get("estimator", "latency") != "latency":
        raise ConfigError(f"{where('measure', 'estimator')}: workload.observe scores windows "
                          f"with the latency estimator (each statement against its own time "
                          f"under the reference); got {ms['estimator']!r}")


def session_config(raw: Mapping[str, Any], knobs: tuple[KnobSpec, ...],
                   base: SessionConfig) -> SessionConfig:
    """The ``offline:`` or ``online:`` section over its defaults (``base``)."""
    strategy = raw.get("strategy") or {}
    prior = raw.get("prior") or {}
    name = strategy.get("name", base.strategy)
    # the defaults' options (simplex_size) belong to the default simplex strategy; another
    # strategy given without options gets its own defaults
    default_options = base.strategy_options if name == base.strategy else {}
    return replace(base, knobs=knobs, strategy=name,
                   strategy_options=dict(strategy.get("options", default_options)),
                   evaluations=int(raw.get("evaluations", base.evaluations)),
                   seconds=(float(raw["seconds"]) if raw.get("seconds") is not None
                            else base.seconds),
                   prior=bool(prior.get("enabled", base.prior)),
                   prior_min_r2=float(prior.get("min_r2", base.prior_min_r2)))


def knob_specs(raw: Any, path: tuple[str, ...], where: Where) -> tuple[KnobSpec, ...]:
    """A session's ``knobs:``, a list of names with built-in ranges or a mapping of name to
    ``{min, max, step, log}`` or ``{values}``."""
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
            log=None if spec.get("log") is None else bool(spec["log"]), where=here))
    return tuple(out)


def _yaml_bool(v: object) -> object:
    # YAML 1.1 reads on/off/yes/no as booleans; PostgreSQL wants 'on'/'off'
    if isinstance(v, bool):
        return "on" if v else "off"
    return v
