"""Reading a tuner config: YAML with line numbers, schema validation, defaults, typed config.

Errors name the file, the line and the key. :func:`tuner_config_from_dict` reads one section
after another; the workload and knob sections live in :mod:`.sections`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from harmony_base.errors import ConfigError
from harmony_core.definition import load_yaml_with_lines, parse_yaml_with_lines, validate
from tuner_client.config.defaults import DEFAULT_OFFLINE_KNOBS, DEFAULT_ONLINE_KNOBS
from tuner_client.config.managed import check_managed
from tuner_client.config.model import (
    MANAGED,
    OFFLINE_SESSION,
    ONLINE_SESSION,
    PROGRESS_WORKLOADS,
    BudgetConfig,
    ControllerConfig,
    DatabaseConfig,
    FinalConfig,
    FlowConfig,
    MeasureConfig,
    ObserveConfig,
    ProbeConfig,
    ReplicasConfig,
    ReplicaTarget,
    ScreeningConfig,
    SessionConfig,
    TunerConfig,
    TwinConfig,
    WarmStartConfig,
    WorkloadConfig,
    default_estimator,
)
from tuner_client.config.schema import TUNER_SCHEMA
from tuner_client.config.sections import Where, knob_specs, session_config, workload_config
from tuner_client.config.units import parse_bytes


def load_tuner_config(path: str | Path) -> TunerConfig:
    """Read, validate and freeze a tuner config YAML file (errors name file, line and key)."""
    data, lines = load_yaml_with_lines(path)
    return tuner_config_from_dict(data, source=str(path), lines=lines)


def parse_tuner_config(text: str, *, source: str = "tuner config") -> TunerConfig:
    data, lines = parse_yaml_with_lines(text, source=source)
    return tuner_config_from_dict(data, source=source, lines=lines)


def tuner_config_from_dict(data: object, *, source: str = "tuner config",
                           lines: Mapping[tuple[object, ...], int] | None = None) -> TunerConfig:
    """Validate ``data`` against :data:`TUNER_SCHEMA` and build the frozen config."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: a tuner config must be a mapping at the top level")
    validate(data, TUNER_SCHEMA, source=source, lines=lines)
    where = _locator(source, lines or {})
    database = _database_config(data.get("database") or {}, where)
    workload = workload_config(data, database, source, where)
    measure = _measure_config(data.get("measure") or {}, workload, where)
    budget = _budget_config(data.get("budget") or {}, where)
    offline, online = _session_configs(data, database, workload, where)
    flow = _flow_config(data.get("flow") or {}, where)
    final = _final_config(data.get("final") or {}, where)
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
    if database.managed:
        check_managed(workload, measure, final, replicas, where)
        final = replace(final, baselines=())  # PGTune's baselines set server-wide knobs
    return TunerConfig(name=data["name"], database=database, workload=workload, measure=measure,
                       budget=budget, offline=offline, online=online, flow=flow, final=final,
                       seed=int(data.get("seed", TunerConfig.seed)), server=data.get("server"),
                       description=data.get("description", TunerConfig.description),
                       source=source,
                       warm_start=warm_start, screening=screening, bme=bme,
                       replicas=replicas)


def _locator(source: str, lines: Mapping[tuple[object, ...], int]) -> Where:
    """``where(*path)``: the source and the line of the deepest prefix of ``path`` written."""
    def where(*path: object) -> str:
        p = tuple(path)
        while p and p not in lines:
            p = p[:-1]
        return f"{source}, line {lines[p]}" if p in lines else source
    return where


def _twin(raw: object, server_dsn: object, controller_kind: str,
          where: Where) -> TwinConfig | None:
    """``database.twin`` (``raw``, as the schema let it through): a server holding the same
    data, for the duet (a DSN other than the server's ``server_dsn``; a controller of kind
    pg_ctl, docker or command when it must restart)."""
    if not isinstance(raw, Mapping):
        return None
    if server_dsn is None:
        raise ConfigError(f"{where('database', 'twin')}: database.twin names a server beside "
                          f"one given by database.dsn; the embedded cluster's twin is a copy "
                          f"the tuner makes itself (leave database.twin out)")
    if controller_kind == MANAGED:
        raise ConfigError(f"{where('database', 'twin')}: database.twin is for a duet, which "
                          f"changes the server's configuration by ALTER SYSTEM; a DSN without "
                          f"database.controller is managed mode, where the tuner never does: "
                          f"give database.controller too, or leave database.twin out")
    dsn = str(raw["dsn"])
    if dsn == server_dsn:
        raise ConfigError(f"{where('database', 'twin', 'dsn')}: database.twin.dsn must name "
                          f"another server than database.dsn (a twin holding the same data), "
                          f"but both are {dsn!r}")
    ctl = raw.get("controller")
    if not isinstance(ctl, Mapping):
        return TwinConfig(dsn)
    if ctl["kind"] == "local":
        raise ConfigError(f"{where('database', 'twin', 'controller')}: controller kind "
                          f"'local' is the embedded cluster; the twin's is pg_ctl, docker or "
                          f"command")
    options = ctl.get("options")
    return TwinConfig(dsn, ControllerConfig(str(ctl["kind"]), dict(options)
                                            if isinstance(options, Mapping) else {}))


def _database_config(db: Mapping[str, Any], where: Where) -> DatabaseConfig:
    """The ``database:`` section: a DSN with a controller, a DSN alone (managed mode: the
    tuner never restarts the server nor runs ``ALTER SYSTEM``), or none for the embedded
    cluster."""
    ctl = db.get("controller") or {"kind": ControllerConfig.kind if db.get("dsn") is None
                                   else MANAGED}
    if db.get("dsn") is None and ctl.get("kind", "local") != "local":
        raise ConfigError(f"{where('database', 'controller')}: without database.dsn the tuner "
                          f"runs its own local cluster, so controller.kind must be 'local', got "
                          f"{ctl.get('kind')!r}")
    if db.get("dsn") is not None and ctl["kind"] == "local":
        raise ConfigError(f"{where('database', 'controller')}: controller kind 'local' is the "
                          f"embedded cluster; with a DSN use pg_ctl, docker or command")
    if ctl["kind"] == MANAGED and db.get("allow_restarts"):
        raise ConfigError(f"{where('database', 'allow_restarts')}: database.allow_restarts: "
                          f"true needs database.controller (kind: pg_ctl, docker or command); "
                          f"a DSN without a controller is managed mode, where restarts go "
                          f"through the provider")
    memory_limit = db.get("memory_limit")
    database = DatabaseConfig(
        dsn=db.get("dsn"),
        controller=ControllerConfig(ctl["kind"], dict(ctl.get("options") or {})),
        memory_limit_bytes=(parse_bytes(memory_limit, what=f"{where('database', 'memory_limit')}"
                                        f": database.memory_limit")
                            if memory_limit is not None else None),
        restart_timeout_s=float(db.get("restart_timeout_s", DatabaseConfig.restart_timeout_s)),
        allow_restarts=bool(db.get("allow_restarts", DatabaseConfig.allow_restarts)),
        bin_dir=db.get("bin_dir"),
        twin=_twin(db.get("twin"), db.get("dsn"), ctl["kind"], where),
    )
    if database.bin_dir is not None and not database.embedded:
        raise ConfigError(f"{where('database', 'bin_dir')}: bin_dir names the embedded "
                          f"cluster's binaries; a server given by database.dsn runs its own "
                          f"(the pg_ctl controller takes options.bin_dir)")
    if database.memory_limit_bytes is not None and not database.embedded:
        raise ConfigError(f"{where('database', 'memory_limit')}: memory_limit applies to the "
                          f"embedded local cluster only (limit an existing server yourself and "
                          f"give budget.ram)")
    return database


def _measure_config(ms: Mapping[str, Any], workload: WorkloadConfig,
                    where: Where) -> MeasureConfig:
    """The ``measure:`` section: fixed work (queries) or time windows (seconds), and the
    estimator that fits the workload."""
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
    return MeasureConfig(warmup_s=float(ms.get("warmup_s", MeasureConfig.warmup_s)),
                         restart_warmup_s=(None if restart_warmup is None
                                           else float(restart_warmup)),
                         prewarm=bool(ms.get("prewarm", MeasureConfig.prewarm)),
                         samples=int(ms.get("samples", MeasureConfig.samples)),
                         aggregate=ms.get("aggregate", MeasureConfig.aggregate),
                         queries=queries,
                         seconds=None if queries is not None else float(ms["seconds"]),
                         estimator=ms.get("estimator", default_estimator(workload.kind)),
                         paired=bool(ms.get("paired", MeasureConfig.paired)),
                         design=str(ms.get("design", MeasureConfig.design)),
                         per_transaction_s=float(ms.get("per_transaction_s",
                                                        MeasureConfig.per_transaction_s)),
                         slice_s=float(ms.get("slice_s", MeasureConfig.slice_s)),
                         clone=bool(ms.get("clone", MeasureConfig.clone)))


def _budget_config(bd: Mapping[str, Any], where: Where) -> BudgetConfig:
    """The ``budget:`` section: the memory and connections the tuned server may use."""
    ram = bd.get("ram", "auto")
    online_limit = bd.get("online")
    connections = bd.get("connections", "auto")
    return BudgetConfig(
        ram_bytes=None if ram == "auto" else parse_bytes(ram, what=f"{where('budget', 'ram')}: "
                                                                   f"budget.ram"),
        os_reserved_bytes=parse_bytes(bd.get("os_reserved", BudgetConfig.os_reserved_bytes),
                                      what=f"{where('budget', 'os_reserved')}: budget.os_reserved"),
        os_reserved_auto="os_reserved" not in bd,
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


def _session_configs(data: Mapping[str, Any], database: DatabaseConfig,
                     workload: WorkloadConfig,
                     where: Where) -> tuple[SessionConfig, SessionConfig]:
    """The ``offline:`` and ``online:`` sessions; each knob is listed in one of them only. The
    default restart-time knobs apply to the embedded cluster, or to a server named by a DSN
    whose config allows restarts (an explicit offline.knobs list is itself the request), and
    not in live mode without restarts; ``online.knobs: auto`` starts from the default online
    knobs, which the run replaces by what the workload's statistics propose."""
    off = data.get("offline") or {}
    on = data.get("online") or {}
    observe = workload.observe
    # live mode's maintenance window (observe.allow_restarts) asks for restarts too
    restarts = (observe.allow_restarts if observe is not None
                else database.embedded or database.allow_restarts)
    offline_knobs = knob_specs(off.get("knobs", DEFAULT_OFFLINE_KNOBS if restarts else []),
                               ("offline", "knobs"), where)
    auto = on.get("knobs") == "auto"
    online_knobs = knob_specs(DEFAULT_ONLINE_KNOBS if auto else
                              on.get("knobs", DEFAULT_ONLINE_KNOBS), ("online", "knobs"), where)
    dup = {k.name for k in offline_knobs} & {k.name for k in online_knobs}
    if dup:
        raise ConfigError(f"{where('online', 'knobs')}: knob(s) {sorted(dup)} are listed both "
                          f"offline and online; list each knob once")
    return (session_config(off, offline_knobs, OFFLINE_SESSION),
            replace(session_config(on, online_knobs, ONLINE_SESSION), auto=auto))


def _flow_config(fl: Mapping[str, Any], where: Where) -> FlowConfig:
    """The ``flow:`` section: one pass or several, and when a workload shift restarts it."""
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
    return flow


def _final_config(fin: Mapping[str, Any], where: Where) -> FinalConfig:
    """The ``final:`` section: the rounds that confirm the best against the baselines."""
    rounds = int(fin.get("rounds", FinalConfig.rounds))
    final = FinalConfig(rounds=rounds,
                        apply_best=bool(fin.get("apply_best", FinalConfig.apply_best)),
                        recommended=bool(fin.get("recommended", FinalConfig.recommended)),
                        candidates=int(fin.get("candidates", FinalConfig.candidates)),
                        max_rounds=int(fin.get("max_rounds", max(rounds, FinalConfig.max_rounds))),
                        close_call_rounds=int(fin.get("close_call_rounds",
                                                      FinalConfig.close_call_rounds)),
                        until=str(fin.get("until", FinalConfig.until)),
                        restart_part=str(fin.get("restart_part", FinalConfig.restart_part)),
                        baselines=tuple(fin.get("baselines", FinalConfig.baselines)),
                        level=float(fin.get("level", FinalConfig.level)),
                        visit_samples=int(fin.get("visit_samples", FinalConfig.visit_samples)),
                        max_seconds=(float(fin["max_seconds"]) if fin.get("max_seconds")
                                     is not None else FinalConfig.max_seconds),
                        restart_seconds=(float(fin["restart_seconds"])
                                         if fin.get("restart_seconds") is not None
                                         else FinalConfig.restart_seconds))
    if final.max_rounds < final.rounds:
        raise ConfigError(f"{where('final', 'max_rounds')}: final.max_rounds must be at least "
                          f"final.rounds ({final.rounds}), but got {final.max_rounds}")
    if "close_call_rounds" not in fin and final.close_call_rounds < final.max_rounds:
        final = replace(final, close_call_rounds=final.max_rounds)
    if final.close_call_rounds < final.max_rounds:
        raise ConfigError(f"{where('final', 'close_call_rounds')}: final.close_call_rounds must "
                          f"be at least final.max_rounds ({final.max_rounds}), but got "
                          f"{final.close_call_rounds}")
    return final


def _probe_config(raw: Mapping[str, Any], where: Where) -> ProbeConfig:
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
                       settle_s=float(raw.get("settle_s", ProbeConfig.settle_s)),
                       evaluations=int(raw.get("evaluations", ProbeConfig.evaluations)),
                       target_miss=float(target) if target is not None else None,
                       min_r2=float(raw.get("min_r2", ProbeConfig.min_r2)))


def _replicas(rep: Mapping[str, Any], database: DatabaseConfig, where: Where) -> ReplicasConfig:
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
