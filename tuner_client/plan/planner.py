"""``harmony tune --plan``: what a run would do, worked out before it touches a server.

The plan connects read-only (``pg_settings`` and the statistics views; for the embedded cluster
a throw-away cluster in a temporary directory gives the catalog) and changes nothing. It
states the knobs per phase with their ranges as written and after the memory budget, which
need a restart and how many restarts the run may make, the evaluations and measuring windows
per phase with a time estimate (:mod:`tuner_client.plan.phases`), the screening design, what
is held and why, and the knobs the workload's statistics point at
(:mod:`tuner_client.plan.proposals`) with their evidence.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import psycopg

from harmony_base.errors import ConfigError, ConstraintError, DatabaseError
from harmony_base.jsontypes import JSONObject
from harmony_core.definition import PluginSpec, SessionDefinition
from harmony_core.session import SessionCore
from tuner_client.budget import BUDGET_KNOBS, BudgetView, make_budget_view
from tuner_client.config import KnobSpace, TunerConfig, resolve_knob_space
from tuner_client.crashsafe.journal import find_journals
from tuner_client.crashsafe.run import config_key
from tuner_client.engine.comparison import OFFLINE_SEARCH_DESIGNS
from tuner_client.engine.managed import ManagedSplit
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.plan.designs import final_design, search_design
from tuner_client.plan.live import LivePlan, live_plan
from tuner_client.plan.managed import ManagedRun, managed_knobs
from tuner_client.plan.phases import PhasePlan, phase_plans
from tuner_client.plan.proposals import Proposal, auto_knob_specs, loopback, propose
from tuner_client.plan.window import (
    TimedWindow,
    needs_timing,
    timed_window,
    window_seconds,
    with_restarts,
)
from tuner_client.plan.workload_stats import WorkloadStats, read_workload_stats
from tuner_client.servers.host_memory import detect_ram_bytes
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.managed import read_managed
from tuner_client.servers.target import read_catalog

#: settings a tuner must never change on its own: they trade durability for speed
DURABILITY_KNOBS = ("fsync", "synchronous_commit", "full_page_writes")


@dataclass(frozen=True)
class KnobPlan:
    """One tuned knob: its phase, whether changing it needs a restart, its value now, its
    range as written and the range the memory budget leaves."""

    name: str
    phase: str
    context: str
    restart: bool
    current: str
    configured: str
    after_budget: str


@dataclass(frozen=True)
class Plan:
    """What ``harmony tune CONFIG`` would do (see the module docstring)."""

    config: str
    target: str
    server_version: str | None
    budget: str
    knobs: list[KnobPlan]
    phases: list[PhasePlan]
    restarts: int
    restarts_allowed: bool
    window_s: float | None
    window_basis: str
    held: list[tuple[str, str]]
    proposals: list[Proposal]
    notes: list[str] = field(default_factory=list)
    #: the memory budget's arithmetic behind the narrowed ranges
    budget_detail: list[str] = field(default_factory=list)
    #: live mode's part (workload.observe), else None
    live: LivePlan | None = None
    #: how the tuner may change the server (managed mode: what the role may do, the knobs a
    #: session measures and what the others need), one line each
    mode: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float | None:
        known = [p.seconds for p in self.phases]
        return None if any(s is None for s in known) else sum(s or 0.0 for s in known)

    def to_dict(self) -> JSONObject:
        out = asdict(self)
        out["held"] = [{"knob": k, "why": why} for k, why in self.held]
        out["proposals"] = [p.to_dict() for p in self.proposals]
        out["seconds"] = self.seconds
        return out


def leftover_notes(config: TunerConfig) -> list[str]:
    """A note per restore journal an earlier run left for the configured server (read only:
    the plan and ``harmony validate`` change nothing)."""
    try:
        journals = find_journals(key=config_key(config, None))
    except ConfigError as exc:
        return [f"restore journal: {exc}"]
    return [f"restore journal: {j.describe()}; "
            + ("its run is still alive: a run now would be refused" if j.owner.alive() else
               "its run died before putting the server back: `harmony tune` restores the "
               "original first, `harmony restore CONFIG` does only that")
            for j in journals]


def make_plan(config: TunerConfig, *, time_window: bool = False) -> Plan:
    """The plan of ``config`` against its server (read-only) or a throw-away embedded one.

    The catalog is always the target's: the configured server's ``pg_settings``, or for the
    embedded cluster a throw-away cluster of the same binaries (``database.bin_dir``, else
    the default ones the run would use). A configured server that does not answer is a
    DatabaseError naming it: another server's catalog would be another version's.
    ``time_window``: for the embedded cluster, time one window of the workload on the
    throw-away cluster when a window's length is not known (:mod:`tuner_client.plan.window`)."""
    notes: list[str] = leftover_notes(config)
    with _catalog_and_stats(config, time_window) as (
            catalog, stats, ram, target, timed):
        managed = (_managed(config, catalog)
                   if config.database.managed and target == config.database.dsn else None)
        if config.database.managed and managed is None:
            notes.append("managed mode: the role's rights could not be read (the server did "
                         "not answer)")
        offline = resolve_knob_space(() if managed is not None else config.offline.knobs,
                                     catalog, kind="offline")
        local = config.database.embedded or loopback(config.database.dsn or "")
        cpus = os.cpu_count() if local else None
        restarts_allowed = bool(offline.names)
        proposals = propose(stats, ram_bytes=config.budget.ram_bytes or ram, cpus=cpus,
                            restarts=restarts_allowed) if stats is not None else []
        online_knobs = config.online.knobs
        if config.online.auto:
            online_knobs = auto_knob_specs(proposals, catalog)
            notes.append("online.knobs: auto: the run watches the workload for a warm-up's "
                         "length first and tunes what it shows then; listed here: what the "
                         "statistics show now")
        if managed is not None:
            online_knobs, managed = managed_knobs(config, catalog, managed.server,
                                                  config.offline.knobs, online_knobs)
        online = resolve_knob_space(online_knobs, catalog, kind="online")
        budget = make_budget_view(config, catalog, offline, online, known_ram_bytes=ram)
        in_force = {n: _current(catalog, n) for n in
                    dict.fromkeys(offline.names + online.names + list(BUDGET_KNOBS))
                    if n in catalog}
        online_force = _online_in_force(offline, in_force)
        knobs = (_knob_plans(offline, "offline", budget.offline_constraints(in_force), in_force)
                 + _knob_plans(online, "online", budget.online_constraints(online_force),
                               in_force))
        window_s, basis = window_seconds(config, stats, timed)
        data_bytes = stats.database_bytes if stats is not None else None
        designs = {"offline": search_design(config, catalog, offline,
                                            designs=OFFLINE_SEARCH_DESIGNS),
                   "online": search_design(config, catalog, online, data_bytes=data_bytes,
                                           shared_buffers=in_force.get("shared_buffers")),
                   "final": final_design(config, catalog, offline, online,
                                         data_bytes=data_bytes,
                                         shared_buffers=in_force.get("shared_buffers"))}
        phases = [replace(p, seconds=with_restarts(p.seconds, p.restarts, timed),
                          design=designs.get(p.name, ""))
                  for p in phase_plans(config, offline, online, window_s)]
        version = catalog.version
        b = budget.budget
        budget_text = (f"RAM {_gb(b.ram_bytes)}, OS reserve {_gb(b.os_reserved_bytes)}, "
                       f"{b.connections} connections; shared_buffers at most "
                       f"{_gb(b.shared_buffers_max_bytes)}")
        return Plan(config=config.source, target=target, server_version=version,
                    budget=budget_text, knobs=knobs, phases=phases,
                    restarts=sum(p.restarts for p in phases),
                    restarts_allowed=restarts_allowed, window_s=window_s, window_basis=basis,
                    held=_held(config, catalog, offline, online, proposals),
                    proposals=proposals, notes=notes + _notes(stats),
                    budget_detail=_budget_detail(budget, online, online_force, in_force),
                    live=live_plan(config, budget, stats), mode=_mode(config, managed))


def _managed(config: TunerConfig, catalog: KnobCatalog) -> ManagedRun:
    """Managed mode's reading of the configured server (read-only), before the split."""
    dsn = config.database.dsn or ""
    superuser_knobs = [k.name for k in config.knob_specs()
                       if k.name in catalog and catalog[k.name].context == "superuser"]
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            conn.read_only = True
            server = read_managed(conn, superuser_knobs)
    except psycopg.Error as exc:
        raise DatabaseError(f"{config.source}: database.dsn: cannot read the role's rights on "
                            f"{dsn}: {exc}") from exc
    return ManagedRun(server, ManagedSplit())


def _mode(config: TunerConfig, managed: ManagedRun | None) -> list[str]:
    """The plan's mode lines."""
    if managed is not None:
        return managed.lines()
    if config.database.embedded:
        return ["embedded cluster: the tuner's own; ALTER SYSTEM, reloads and restarts"]
    return [f"controller {config.database.controller.kind}: ALTER SYSTEM, reloads and "
            f"restarts (the role must be allowed ALTER SYSTEM)"]


def _gb(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


@contextlib.contextmanager
def _catalog_and_stats(config: TunerConfig, time_window: bool
                       ) -> Iterator[tuple[KnobCatalog, WorkloadStats | None, int | None, str,
                                           TimedWindow | None]]:
    """The catalog (and statistics) of the configured server, or of a throw-away cluster in a
    temporary directory standing in for the embedded one, made by the same binaries (no
    statistics: no workload ran; one window timed there when ``time_window`` and a window's
    length is unknown)."""
    dsn = config.database.dsn
    if dsn is not None:
        try:
            catalog = read_catalog(dsn)
            with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
                conn.read_only = True
                stats = read_workload_stats(conn)
        except (DatabaseError, psycopg.Error) as exc:
            raise DatabaseError(f"{config.source}: database.dsn: cannot read the catalog "
                                f"and statistics of {dsn}: {exc}") from exc
        yield catalog, stats, config.budget.ram_bytes or detect_ram_bytes(), dsn, None
        return
    with tempfile.TemporaryDirectory(prefix="harmony-plan-") as tmp:
        os.chmod(tmp, 0o755)  # the cluster's unprivileged OS user must reach it
        cluster = LocalCluster(Path(tmp) / "cluster", bin_dir=config.database.bin_dir,
                               memory_limit_bytes=config.database.memory_limit_bytes,
                               timeout_s=config.database.restart_timeout_s)
        cluster.start()
        timed = None
        try:
            catalog = read_catalog(cluster.dsn)
            ram = cluster.effective_ram_bytes()
            if time_window and needs_timing(config):
                timed = timed_window(config, cluster, Path(tmp))
        finally:
            cluster.stop()
        target = f"the embedded cluster (created by the run from {cluster.bin_dir})"
        yield catalog, None, config.budget.ram_bytes or ram, target, timed


def _online_in_force(offline: KnobSpace, in_force: dict[str, str]) -> dict[str, str]:
    """The settings the online budget is computed with: shared_buffers at the offline range's
    smallest value when the offline session tunes it (the widest online ranges; a larger
    shared_buffers leaves less), else as in force."""
    if "shared_buffers" not in offline.names:
        return in_force
    param = next(p for p in offline.params if p.name == "shared_buffers")
    smallest = next(d for d in offline.space.to_dict() if d["name"] == "shared_buffers")["min"]
    return {**in_force, "shared_buffers": param.setting(smallest)}


def _budget_detail(budget: BudgetView, online: KnobSpace, online_force: dict[str, str],
                   in_force: dict[str, str]) -> list[str]:
    """The budget's arithmetic for work_mem when the online session tunes it."""
    if "work_mem" not in online.names:
        return []
    catalog = budget.catalog
    others: dict[str, int] = {n: int(catalog[n].parse(in_force[n]))
                              for n in ("maintenance_work_mem", "temp_buffers")
                              if n in in_force and n not in online.names}
    sb = online_force["shared_buffers"]
    try:
        text = budget.budget.explain_work_mem(int(catalog["shared_buffers"].parse(sb)), others)
    except ConstraintError as exc:
        return [str(exc)]
    basis = ("the offline range's smallest shared_buffers; a larger one leaves less"
             if sb != in_force.get("shared_buffers") else "shared_buffers in force")
    return [f"{text} (with {basis})"]


def _current(catalog: KnobCatalog, name: str) -> str:
    knob = catalog[name]
    value = knob.current()
    return knob.format(value) if value is not None else str(knob.setting)


def _knob_plans(space: KnobSpace, phase: str, constraints: list[str],
                in_force: dict[str, str]) -> list[KnobPlan]:
    if not space.names:
        return []
    narrowed = _narrowed(space, constraints)
    written = {d["name"]: d for d in space.space.to_dict()}
    out = []
    for p in space.params:
        configured = _range_text(written[p.name], p)
        after = _range_text(narrowed[p.name], p) if p.name in narrowed else configured
        out.append(KnobPlan(name=p.name, phase=phase, context=p.knob.context,
                            restart=p.knob.kind == "offline", current=in_force.get(p.name, "?"),
                            configured=configured, after_budget=after))
    return out


def _narrowed(space: KnobSpace, constraints: list[str]) -> dict[str, JSONObject]:
    """Each parameter's range once the budget's constraints bound it (the session's own
    constraint plugin computes it, as the run's session would)."""
    if not constraints:
        return {p["name"]: p for p in space.space.to_dict()}
    definition = SessionDefinition(name="plan", space=space.space, strategy="random",
                                   plugins=(PluginSpec("constraint",
                                                       {"constraints": constraints}),))
    try:
        core = SessionCore(definition)
    except ConstraintError as exc:
        return {p.name: {"empty": str(exc)} for p in space.params}
    try:
        return {p["name"]: p for p in core.space.to_dict()}
    finally:
        core.close()


def _range_text(param: dict[str, Any], p: Any) -> str:
    if "empty" in param:
        return f"none fits the budget ({param['empty']})"
    if param.get("type") == "enum":
        return "{" + ", ".join(str(v) for v in param["values"]) + "}"
    return f"{p.setting(param['min'])} .. {p.setting(param['max'])}"


def _held(config: TunerConfig, catalog: KnobCatalog, offline: KnobSpace, online: KnobSpace,
          proposals: list[Proposal]) -> list[tuple[str, str]]:
    tuned = set(offline.names) | set(online.names)
    held: list[tuple[str, str]] = []
    for name in BUDGET_KNOBS:
        if name not in tuned and name in catalog:
            held.append((name, "not tuned: held at its current value, counted in the memory "
                               "budget"))
    for name in DURABILITY_KNOBS:
        if name in catalog:
            held.append((name, "never changed by the tuner: it trades durability for speed"))
    if not offline.names:
        held.append(("restart-time knobs (shared_buffers, …)",
                     "no restart: offline.knobs is empty" + _restart_hint(config)))
    for p in proposals:
        for knob in p.knobs:
            if knob not in tuned:
                held.append((knob, f"proposed ({p.symptom}) but not in the config's knob "
                                   f"lists, which win; `online.knobs: auto` would tune it"))
    return held


def _restart_hint(config: TunerConfig) -> str:
    if config.database.embedded:
        return ""
    if config.database.managed:
        return " (managed mode: a restart is the provider's; see the mode lines)"
    if config.workload.observe is not None:
        return " (live mode: set workload.observe.allow_restarts: true in a maintenance window)"
    return " (list them, or set database.allow_restarts: true, to tune them)"


def _notes(stats: WorkloadStats | None) -> list[str]:
    notes = []
    if stats is None:
        notes.append("no workload statistics (no workload has run on this cluster): knobs "
                     "cannot be proposed from what the workload shows")
    elif stats.statements is None:
        notes.append("pg_stat_statements is not installed in this database: proposals use "
                     "pg_stat_database, the checkpoint counters and pg_stat_user_tables "
                     "only")
    if stats is not None and stats.xact_commit < 1000:
        notes.append(f"only {stats.xact_commit} transactions since the statistics were reset: "
                     f"the proposals rest on little traffic")
    return notes


__all__ = ["DURABILITY_KNOBS", "KnobPlan", "PhasePlan", "Plan", "make_plan"]
