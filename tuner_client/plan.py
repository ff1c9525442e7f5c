"""``harmony tune --plan``: what a run would do, worked out before it touches a server.

The plan connects read-only (``pg_settings`` and the statistics views; for the embedded cluster
a throw-away cluster in a temporary directory gives the catalog) and changes nothing. It
states the knobs per phase with their ranges as written and after the memory budget, which
need a restart and how many restarts the run may make, the evaluations and measuring windows
per phase with a time estimate, the screening design, what is held and why, and the knobs the
workload's statistics point at (:mod:`tuner_client.knob_proposals`) with their evidence.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from harmony.base.errors import ConstraintError, DatabaseError
from harmony.core.definition import PluginSpec, SessionDefinition
from harmony.core.session import SessionCore
from tuner_client.budget import BUDGET_KNOBS, make_budget_view
from tuner_client.config import KnobSpace, TunerConfig, resolve_knob_space
from tuner_client.host_memory import detect_ram_bytes
from tuner_client.knob_proposals import (
    Proposal,
    WorkloadStats,
    auto_knob_specs,
    loopback,
    propose,
    read_workload_stats,
)
from tuner_client.knobs import KnobCatalog
from tuner_client.local_cluster import LocalCluster
from tuner_client.stats.screening import pb_runs
from tuner_client.target import read_catalog

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
class PhasePlan:
    """One phase of the run: its evaluations, measuring windows and restarts (upper bounds),
    and its time when a window's length is known."""

    name: str
    evaluations: int
    windows: int
    restarts: int
    seconds: float | None
    detail: str


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

    @property
    def seconds(self) -> float | None:
        known = [p.seconds for p in self.phases]
        return None if any(s is None for s in known) else sum(s or 0.0 for s in known)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["held"] = [{"knob": k, "why": why} for k, why in self.held]
        out["proposals"] = [p.to_dict() for p in self.proposals]
        out["seconds"] = self.seconds
        return out


def make_plan(config: TunerConfig, *, unreachable_ok: bool = False) -> Plan:
    """The plan of ``config`` against its server (read-only) or a throw-away embedded one.

    ``unreachable_ok``: when the configured server does not answer, check against a
    throw-away cluster of this host's PostgreSQL instead (``harmony validate``) rather than
    fail (``harmony tune --plan``)."""
    notes: list[str] = []
    with _catalog_and_stats(config, unreachable_ok, notes) as (catalog, stats, ram, target):
        offline = resolve_knob_space(config.offline.knobs, catalog, kind="offline")
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
        online = resolve_knob_space(online_knobs, catalog, kind="online")
        budget = make_budget_view(config, catalog, offline, online, known_ram_bytes=ram)
        in_force = {n: _current(catalog, n) for n in
                    dict.fromkeys(offline.names + online.names + list(BUDGET_KNOBS))
                    if n in catalog}
        knobs = (_knob_plans(offline, "offline", budget.offline_constraints(in_force), in_force)
                 + _knob_plans(online, "online", budget.online_constraints(in_force), in_force))
        window_s, basis = _window_seconds(config, stats)
        phases = _phases(config, offline, online, window_s)
        version = (f"{catalog.server_version_num // 10000}.{catalog.server_version_num % 100}"
                   if catalog.server_version_num else None)
        b = budget.budget
        budget_text = (f"RAM {_gb(b.ram_bytes)}, OS reserve {_gb(b.os_reserved_bytes)}, "
                       f"{b.connections} connections; shared_buffers at most "
                       f"{_gb(b.shared_buffers_max_bytes)}")
        return Plan(config=config.source, target=target, server_version=version,
                    budget=budget_text, knobs=knobs, phases=phases,
                    restarts=sum(p.restarts for p in phases),
                    restarts_allowed=restarts_allowed, window_s=window_s, window_basis=basis,
                    held=_held(config, catalog, offline, online, proposals),
                    proposals=proposals, notes=notes + _notes(stats))


def _gb(n: int) -> str:
    return f"{n / 2**30:.1f} GB" if n >= 2**30 else f"{n / 2**20:.0f} MB"


@contextlib.contextmanager
def _catalog_and_stats(config: TunerConfig, unreachable_ok: bool, notes: list[str]
                       ) -> Iterator[tuple[KnobCatalog, WorkloadStats | None, int | None, str]]:
    """The catalog (and statistics) of the configured server, or of a throw-away cluster in a
    temporary directory standing in for the embedded one (no statistics: no workload ran)."""
    dsn = config.database.dsn
    if dsn is not None:
        try:
            catalog = read_catalog(dsn)
            with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
                conn.read_only = True
                stats = read_workload_stats(conn)
        except (DatabaseError, psycopg.Error) as exc:
            if not unreachable_ok:
                raise DatabaseError(f"{config.source}: database.dsn: cannot read the catalog "
                                    f"and statistics of {dsn}: {exc}") from exc
            notes.append(f"{dsn} did not answer ({str(exc).splitlines()[0]}): checked against "
                         f"this host's PostgreSQL instead")
        else:
            yield catalog, stats, config.budget.ram_bytes or detect_ram_bytes(), dsn
            return
    with tempfile.TemporaryDirectory(prefix="harmony-plan-") as tmp:
        os.chmod(tmp, 0o755)  # the cluster's unprivileged OS user must reach it
        cluster = LocalCluster(Path(tmp) / "cluster",
                               memory_limit_bytes=config.database.memory_limit_bytes,
                               timeout_s=config.database.restart_timeout_s)
        cluster.start()
        try:
            catalog = read_catalog(cluster.dsn)
            ram = cluster.effective_ram_bytes()
        finally:
            cluster.stop()
        target = ("the embedded cluster (created by the run)" if dsn is None
                  else f"{dsn} (unreachable; this host's PostgreSQL stood in)")
        yield catalog, None, config.budget.ram_bytes or ram, target


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


def _narrowed(space: KnobSpace, constraints: list[str]) -> dict[str, dict[str, Any]]:
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


def _window_seconds(config: TunerConfig, stats: WorkloadStats | None
                    ) -> tuple[float | None, str]:
    m = config.measure
    if m.seconds is not None:
        return m.seconds, f"measure.seconds = {m.seconds:g} s"
    if m.queries is not None and stats is not None and stats.statements is not None \
            and stats.statements.calls:
        mean_s = stats.statements.exec_ms / stats.statements.calls / 1000
        streams = max(1, config.workload.clients)
        return (m.queries * mean_s / streams,
                f"{m.queries} queries a window at the {mean_s * 1000:.1f} ms mean of "
                f"pg_stat_statements over {streams} streams")
    return None, (f"{m.queries} queries a window: its length is known only once the workload "
                  f"runs (give measure.seconds for a time estimate)")


def _phases(config: TunerConfig, offline: KnobSpace, online: KnobSpace,
            window_s: float | None) -> list[PhasePlan]:
    m = config.measure
    # a paired block: the reference, the candidate's samples; the trailing reference opens
    # the next block
    per_eval = m.samples + 1 if m.paired else m.samples
    warm = m.warmup_s
    restart_warm = m.restart_warmup_s if m.restart_warmup_s is not None else m.warmup_s

    def seconds(windows: int, warmups: int, warmup_s: float) -> float | None:
        return None if window_s is None else windows * window_s + warmups * warmup_s

    phases: list[PhasePlan] = []
    passes = config.flow.max_passes
    if offline.names:
        evals = config.offline.evaluations * passes
        probes = config.bme.probes if config.bme.enabled else 0
        windows = evals * per_eval
        restarts = 2 * evals + probes
        secs = seconds(windows, 2 * evals, restart_warm)
        if secs is not None:
            secs += probes * config.bme.probe_seconds
        detail = (f"{config.offline.strategy} over {', '.join(offline.names)}, "
                  f"{config.offline.evaluations} evaluations a pass"
                  + (f", {probes} BME probes first" if probes else "")
                  + "; every evaluation restarts the server (candidate, then reference)")
        phases.append(PhasePlan("offline", evals, windows, restarts, secs, detail))
    if config.screening.enabled and online.names:
        k = len(online.names)
        runs = (pb_runs(k) if config.screening.design == "pb" else 2 * k) \
            * config.screening.replicates
        windows = runs * config.screening.samples + math.ceil(runs / 2) + 1
        phases.append(PhasePlan(
            "screening", runs, windows, 0, seconds(windows, runs, warm),
            f"{config.screening.design.upper()} design over {k} knobs, "
            f"{config.screening.replicates} replicate(s): {runs} runs, the default measured "
            f"every 2 runs; knobs whose effect clears {config.screening.z:g} standard errors "
            f"are searched"))
    if online.names:
        evals = config.online.evaluations * passes
        windows = evals * per_eval
        phases.append(PhasePlan(
            "online", evals, windows, 0, seconds(windows, evals, warm),
            f"{config.online.strategy} over {', '.join(online.names)} (ALTER SYSTEM + reload)"))
    f = config.final
    labels = 1 + f.candidates + len(f.baselines) + (1 if f.recommended else 0)
    windows = f.close_call_rounds * labels
    restarts = windows if offline.names else 0
    phases.append(PhasePlan(
        "final", f.close_call_rounds * labels, windows, restarts + (1 if offline.names else 0),
        seconds(windows, windows, restart_warm if offline.names else warm),
        f"the default, {f.candidates} candidate(s) and baselines {list(f.baselines)} raced in "
        f"{f.rounds}..{f.close_call_rounds} rounds; the original configuration is restored "
        f"at the end" + (" (a restart)" if offline.names else "")))
    return phases


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
                     "no restart: offline.knobs is empty"
                     + ("" if config.database.embedded else
                        " (list them, or set allow_restarts: true, to tune them)")))
    for p in proposals:
        for knob in p.knobs:
            if knob not in tuned:
                held.append((knob, f"proposed ({p.symptom}) but not in the config's knob "
                                   f"lists, which win; `online.knobs: auto` would tune it"))
    return held


def _notes(stats: WorkloadStats | None) -> list[str]:
    notes = []
    if stats is None:
        notes.append("no workload statistics (no workload has run on this cluster): knobs "
                     "cannot be proposed from what the workload shows")
    elif stats.statements is None:
        notes.append("pg_stat_statements is not installed in this database: proposals use "
                     "pg_stat_database, pg_stat_bgwriter and pg_stat_user_tables only")
    if stats is not None and stats.xact_commit < 1000:
        notes.append(f"only {stats.xact_commit} transactions since the statistics were reset: "
                     f"the proposals rest on little traffic")
    return notes


def format_plan(plan: Plan) -> str:
    """The plan as the terminal shows it."""
    lines = [f"plan for {plan.config}",
             f"  target: {plan.target}"
             + (f" (PostgreSQL {plan.server_version})" if plan.server_version else ""),
             f"  memory budget: {plan.budget}", "", "knobs:"]
    for k in plan.knobs:
        narrowed = "" if k.after_budget == k.configured else f" -> {k.after_budget} (budget)"
        lines.append(f"  {k.phase:<8} {k.name:<32} now {k.current:<10} {k.configured}{narrowed}"
                     f"  [{k.context}{', restart' if k.restart else ''}]")
    lines += ["", f"phases (window: {plan.window_basis}):"]
    for p in plan.phases:
        when = f"~{_duration(p.seconds)}" if p.seconds is not None else "time unknown"
        lines.append(f"  {p.name:<10} {p.evaluations:>4} evaluations, {p.windows:>4} windows, "
                     f"{p.restarts:>3} restarts at most, {when}: {p.detail}")
    total = plan.seconds
    lines.append(f"  total: at most {plan.restarts} restarts"
                 + (f", ~{_duration(total)}" if total is not None else ""))
    if plan.proposals:
        lines += ["", "what the workload shows:"]
        for pr in plan.proposals:
            lines.append(f"  {pr.symptom}: {', '.join(pr.knobs)}\n      {pr.evidence}")
    if plan.held:
        lines += ["", "held:"]
        lines += [f"  {name}: {why}" for name, why in plan.held]
    if plan.notes:
        lines += ["", "notes:"] + [f"  {n}" for n in plan.notes]
    return "\n".join(lines)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


__all__ = ["DURABILITY_KNOBS", "KnobPlan", "PhasePlan", "Plan", "format_plan", "make_plan"]
