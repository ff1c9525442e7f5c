"""Reading a tuner config: YAML with line numbers, schema validation, defaults, typed config.

Errors name the file, the line and the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from harmony.base.errors import ConfigError
from harmony.core.definition import load_yaml_with_lines, parse_yaml_with_lines, validate
from tuner_client.config.defaults import (
    DEFAULT_OFFLINE_KNOBS,
    DEFAULT_ONLINE_KNOBS,
    KNOWN_RANGES,
)
from tuner_client.config.model import (
    OFFLINE_SESSION,
    ONLINE_SESSION,
    PROGRESS_WORKLOADS,
    BudgetConfig,
    ControllerConfig,
    DatabaseConfig,
    FinalConfig,
    FlowConfig,
    GuardConfig,
    KnobSpec,
    MeasureConfig,
    ObserveConfig,
    ProbeConfig,
    ReplicasConfig,
    ReplicaTarget,
    ScreeningConfig,
    SessionConfig,
    TunerConfig,
    WarmStartConfig,
    WorkloadConfig,
    default_estimator,
)
from tuner_client.config.schema import TUNER_SCHEMA
from tuner_client.config.units import parse_bytes


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
    ctl = db.get("controller") or {"kind": ControllerConfig.kind if db.get("dsn") is None
                                   else "none"}
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
        restart_timeout_s=float(db.get("restart_timeout_s", DatabaseConfig.restart_timeout_s)),
        allow_restarts=bool(db.get("allow_restarts", DatabaseConfig.allow_restarts)),
    )
    if database.memory_limit_bytes is not None and not database.embedded:
        raise ConfigError(f"{where('database', 'memory_limit')}: memory_limit applies to the "
                          f"embedded local cluster only (limit an existing server yourself and "
                          f"give budget.ram)")

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
    elif given and given[0] in ("scripts", "replay"):
        workload = _user_workload(given[0], wl[given[0]], timeout, source, where)
    elif "pgbench" in wl:
        pg = wl["pgbench"]
        workload = WorkloadConfig(kind="pgbench",
                                  scale=float(pg.get("scale", WorkloadConfig.PGBENCH_SCALE)),
                                  mix=None, clients=int(pg.get("clients", WorkloadConfig.clients)),
                                  statement_timeout_s=timeout)
    else:
        tp = wl.get("tpch") or {}
        if "mix" in tp and "schedule" in tp:
            raise ConfigError(f"{where('workload', 'tpch')}: give a mix or a schedule, not both")
        workload = WorkloadConfig(kind="tpch", scale=float(tp.get("scale", WorkloadConfig.scale)),
                                  mix=(tp.get("mix", WorkloadConfig.mix) if "schedule" not in tp
                                       else None),
                                  schedule=tp.get("schedule"), statement_timeout_s=timeout)

    ms = data.get("measure") or {}
    if workload.observe is not None:
        # live traffic: time windows, scored statement by statement against the reference
        ms = {**ms, "estimator": "latency",
              "seconds": ms.get("seconds") or ObserveConfig.SECONDS}
    if ms.get("estimator") == "progress" and workload.kind not in PROGRESS_WORKLOADS:
        raise ConfigError(f"{where('measure', 'estimator')}: measure.estimator progress "
                          f"credits each query by its run time inside the window, which only "
                          f"the TPC-H and replay drivers report; a {workload.kind} workload "
                          f"needs count (or another estimator), got 'progress'")
    if ms.get("queries") is not None and ms.get("seconds") is not None:
        raise ConfigError(f"{where('measure')}: sample by queries (fixed work) or by seconds "
                          f"(time window), not both")
    queries = ms.get("queries", MeasureConfig.queries if ms.get("seconds") is None else None)
    restart_warmup = ms.get("restart_warmup_s")
    measure = MeasureConfig(warmup_s=float(ms.get("warmup_s", MeasureConfig.warmup_s)),
                            restart_warmup_s=(None if restart_warmup is None
                                              else float(restart_warmup)),
                            samples=int(ms.get("samples", MeasureConfig.samples)),
                            aggregate=ms.get("aggregate", MeasureConfig.aggregate),
                            queries=queries,
                            seconds=None if queries is not None else float(ms["seconds"]),
                            estimator=ms.get("estimator", default_estimator(workload.kind)),
                            paired=bool(ms.get("paired", MeasureConfig.paired)))

    bd = data.get("budget") or {}
    ram = bd.get("ram", "auto")
    online_limit = bd.get("online")
    connections = bd.get("connections", "auto")
    budget = BudgetConfig(
        ram_bytes=None if ram == "auto" else parse_bytes(ram, what=f"{where('budget', 'ram')}: "
                                                                   f"budget.ram"),
        os_reserved_bytes=parse_bytes(bd.get("os_reserved", BudgetConfig.os_reserved_bytes),
                                      what=f"{where('budget', 'os_reserved')}: budget.os_reserved"),
        connections=None if connections == "auto" else int(connections),
        shared_buffers_fraction=float(bd.get("shared_buffers_fraction",
                                             BudgetConfig.shared_buffers_fraction)),
        online_limit_bytes=(parse_bytes(online_limit, what=f"{where('budget', 'online')}: "
                                                           f"budget.online")
                            if online_limit is not None else None),
        process_memory_bytes=(parse_bytes(bd["process_memory"],
                                          what=f"{where('budget', 'process_memory')}: "
                                               f"budget.process_memory")
                              if "process_memory" in bd else BudgetConfig.process_memory_bytes),
        operations=int(bd.get("operations", BudgetConfig.operations)),
        work_mem_held=(float(bd["work_mem_held"]) if bd.get("work_mem_held") is not None
                       else BudgetConfig.work_mem_held),
    )

    off = data.get("offline") or {}
    on = data.get("online") or {}
    # the default restart-time knobs apply to the embedded cluster, or to a server named by a
    # DSN whose config allows restarts; an explicit offline.knobs list is itself the request
    restarts = (database.embedded or database.allow_restarts) and (
        workload.observe is None or workload.observe.allow_restarts)
    offline_knobs = _knob_specs(off.get("knobs", DEFAULT_OFFLINE_KNOBS if restarts else []),
                                ("offline", "knobs"), where)
    # online.knobs: auto starts from the defaults; the run replaces them with the knobs the
    # workload's statistics propose (tuner_client.knob_proposals)
    auto = on.get("knobs") == "auto"
    online_knobs = _knob_specs(DEFAULT_ONLINE_KNOBS if auto else
                               on.get("knobs", DEFAULT_ONLINE_KNOBS), ("online", "knobs"), where)
    dup = {k.name for k in offline_knobs} & {k.name for k in online_knobs}
    if dup:
        raise ConfigError(f"{where('online', 'knobs')}: knob(s) {sorted(dup)} are listed both "
                          f"offline and online; list each knob once")
    offline = _session_config(off, offline_knobs, OFFLINE_SESSION)
    online = replace(_session_config(on, online_knobs, ONLINE_SESSION), auto=auto)

    fl = data.get("flow") or {}
    shift = fl.get("shift") or {}
    lm = fl.get("local_minimum") or {}
    kind = fl.get("kind", FlowConfig.kind)
    passes = FlowConfig.max_passes if kind == "one-pass" else FlowConfig.MULTI_PASS_MAX_PASSES
    flow = FlowConfig(kind=kind, max_passes=int(fl.get("max_passes", passes)),
                      shift_outside=int(shift.get("outside", FlowConfig.shift_outside)),
                      shift_margin=float(shift.get("margin", FlowConfig.shift_margin)),
                      monitor=int(shift.get("monitor", FlowConfig.monitor)),
                      local_minimum=bool(lm.get("enabled", FlowConfig.local_minimum)),
                      local_minimum_threshold=float(lm.get("threshold",
                                                           FlowConfig.local_minimum_threshold)))
    if kind == "one-pass" and flow.max_passes != 1:
        raise ConfigError(f"{where('flow', 'max_passes')}: a one-pass flow makes exactly one "
                          f"pass; use kind: multi-pass for max_passes {flow.max_passes}")
    fin = data.get("final") or {}
    rounds = int(fin.get("rounds", FinalConfig.rounds))
    final = FinalConfig(rounds=rounds,
                        apply_best=bool(fin.get("apply_best", FinalConfig.apply_best)),
                        recommended=bool(fin.get("recommended", FinalConfig.recommended)),
                        candidates=int(fin.get("candidates", FinalConfig.candidates)),
                        max_rounds=int(fin.get("max_rounds", max(rounds, FinalConfig.max_rounds))),
                        close_call_rounds=int(fin.get("close_call_rounds",
                                                      FinalConfig.close_call_rounds)),
                        baselines=tuple(fin.get("baselines", FinalConfig.baselines)),
                        level=float(fin.get("level", FinalConfig.level)),
                        max_seconds=(float(fin["max_seconds"]) if fin.get("max_seconds")
                                     is not None else FinalConfig.max_seconds))
    if final.max_rounds < final.rounds:
        raise ConfigError(f"{where('final', 'max_rounds')}: final.max_rounds must be at least "
                          f"final.rounds ({final.rounds}), but got {final.max_rounds}")
    if "close_call_rounds" not in fin and final.close_call_rounds < final.max_rounds:
        final = replace(final, close_call_rounds=final.max_rounds)
    if final.close_call_rounds < final.max_rounds:
        raise ConfigError(f"{where('final', 'close_call_rounds')}: final.close_call_rounds must "
                          f"be at least final.max_rounds ({final.max_rounds}), but got "
                          f"{final.close_call_rounds}")
    sc = data.get("screening") or {}
    screening = ScreeningConfig(enabled=bool(sc.get("enabled", ScreeningConfig.enabled)),
                                design=str(sc.get("design", ScreeningConfig.design)),
                                z=float(sc.get("z", ScreeningConfig.z)),
                                replicates=int(sc.get("replicates", ScreeningConfig.replicates)),
                                samples=int(sc.get("samples", ScreeningConfig.samples)))
    bme = _probe_config(data.get("bme") or {}, where)
    replicas = _replicas(data.get("replicas") or {}, database, where)
    if replicas.enabled and not measure.paired:
        raise ConfigError(f"{where('measure', 'paired')}: tuning on several replicas compares "
                          f"each candidate with its own replica's reference, so it needs "
                          f"measure.paired: true (got false)")
    ws = data.get("warm_start") or {}
    warm_start = WarmStartConfig(sources=tuple(ws.get("from", ())), server=ws.get("server"))
    return TunerConfig(name=data["name"], database=database, workload=workload, measure=measure,
                       budget=budget, offline=offline, online=online, flow=flow, final=final,
                       seed=int(data.get("seed", TunerConfig.seed)), server=data.get("server"),
                       description=data.get("description", TunerConfig.description),
                       source=source,
                       warm_start=warm_start, screening=screening, bme=bme,
                       replicas=replicas)


def _probe_config(raw: Mapping[str, Any], where: Any) -> ProbeConfig:
    """The ``bme:`` section: probes 0 (off) or 3..12 (the fit needs three sizes)."""
    probes = int(raw.get("probes", ProbeConfig.probes))
    if 0 < probes < 3:
        raise ConfigError(f"{where('bme', 'probes')}: bme.probes must be 0 (no probes) or at "
                          f"least 3 (the Buffer Miss Equation fit needs three sizes), but got "
                          f"{probes}")
    target = raw.get("target_miss", ProbeConfig.target_miss)
    if target is not None and not 0 < float(target) < 1:
        raise ConfigError(f"{where('bme', 'target_miss')}: bme.target_miss must be a miss "
                          f"probability strictly between 0 and 1, but got {target}")
    if target is not None and probes == 0:
        raise ConfigError(f"{where('bme', 'target_miss')}: bme.target_miss needs probes to fit "
                          f"the curve it is read from; set bme.probes (3 or more)")
    return ProbeConfig(probes=probes,
                       probe_seconds=float(raw.get("probe_seconds", ProbeConfig.probe_seconds)),
                       evaluations=int(raw.get("evaluations", ProbeConfig.evaluations)),
                       target_miss=float(target) if target is not None else None,
                       min_r2=float(raw.get("min_r2", ProbeConfig.min_r2)))


def _user_workload(kind: str, raw: Mapping[str, Any], timeout: float | None, source: str,
                   where: Any) -> WorkloadConfig:
    """``workload.scripts`` or ``workload.replay``: the user's SQL or a captured workload."""
    from workloads.script_file import parse_weighted  # checks file@weight

    files = tuple(raw["files"]) if kind == "scripts" else (raw["file"],)
    for i, spec in enumerate(files):
        try:
            parse_weighted(spec)
        except ConfigError as exc:
            raise ConfigError(f"{where('workload', kind, 'files', i)}: workload.{kind}.files: "
                              f"{exc}") from None
    app = raw.get("app") or {}
    if app:
        from workloads.apps import app_names

        if app["name"] not in app_names():
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


def _check_observe(data: Mapping[str, Any], database: DatabaseConfig, where: Any) -> None:
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


def _session_config(raw: Mapping[str, Any], knobs: tuple[KnobSpec, ...],
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


def _replicas(rep: Mapping[str, Any], database: DatabaseConfig, where: Any) -> ReplicasConfig:
    """The ``replicas`` section: embedded clones only of an embedded database, unique names."""
    count = int(rep.get("count", ReplicasConfig.count))
    if count > 1 and not database.embedded:
        raise ConfigError(f"{where('replicas', 'count')}: replicas.count clones the embedded "
                          f"cluster, but database.dsn names an existing server; list the other "
                          f"servers under replicas.targets instead (got count {count})")
    cpu_limits = tuple(None if c is None else float(c) for c in rep.get("cpu_limits", ()))
    if len(cpu_limits) > count:
        raise ConfigError(f"{where('replicas', 'cpu_limits')}: replicas.cpu_limits has "
                          f"{len(cpu_limits)} entries but replicas.count is {count}; give at "
                          f"most one per embedded replica")
    targets = tuple(ReplicaTarget(t["name"], t["dsn"],
                                  ControllerConfig(t["controller"]["kind"],
                                                   dict(t["controller"].get("options") or {})))
                    for t in rep.get("targets", ()))
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where('replicas', 'targets')}: replica names must be unique, got "
                          f"{names}")
    return ReplicasConfig(count=count, targets=targets, cpu_limits=cpu_limits,
                          lease_s=float(rep.get("lease_s", ReplicasConfig.lease_s)),
                          remote=int(rep.get("remote", ReplicasConfig.remote)))
