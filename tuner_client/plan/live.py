"""What a live-mode run (``workload: {observe: ...}``) will do, for ``harmony tune --plan``.

Live mode drives no load: it compares candidates with the original configuration on the
traffic already on the server, guarded by guardrails that put the last good configuration
back within the sample. The plan states that, the guardrails with their numbers, whether the
server can be observed at all (pg_stat_statements), the restarts (none unless
``observe.allow_restarts``), and how the run ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

from harmony_base.errors import WorkloadError
from tuner_client.budget import BudgetView
from tuner_client.config import TunerConfig, format_bytes
from tuner_client.plan.proposals import loopback as is_local
from tuner_client.plan.workload_stats import WorkloadStats
from workloads.observe import check_pg_stat_statements


@dataclass(frozen=True)
class LivePlan:
    """Live mode's part of the plan: lines to print, and the problem that stops the run
    before it starts (None: it can run)."""

    traffic: str
    comparison: str
    guardrails: list[str]
    restarts: str
    passes: str
    ending: str
    blocker: str | None = None
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [f"  traffic: {self.traffic}", f"  compared: {self.comparison}",
               "  guardrails (the last good configuration is put back at once when):"]
        out += [f"    - {g}" for g in self.guardrails]
        out += [f"  restarts: {self.restarts}", f"  passes: {self.passes}",
                f"  at the end: {self.ending}"]
        out += [f"  note: {n}" for n in self.notes]
        if self.blocker:
            out.append(f"  CANNOT RUN YET: {self.blocker}")
        return out


def check_observable(dsn: str) -> str | None:
    """Why live mode cannot observe ``dsn`` (pg_stat_statements not preloaded or not created),
    or None; read-only."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            conn.read_only = True
            check_pg_stat_statements(conn, dsn)
    except WorkloadError as exc:
        return str(exc)
    except psycopg.Error as exc:
        return f"cannot connect to {dsn}: {exc}"
    return None


def live_plan(config: TunerConfig, budget: BudgetView, stats: WorkloadStats | None
              ) -> LivePlan | None:
    """Live mode's plan for ``config`` (None when the config drives its own workload)."""
    observe = config.workload.observe
    if observe is None:
        return None
    dsn = config.database.dsn or ""
    guard, m, b = observe.guard, config.measure, budget.budget
    memory = max(0, b.ram_bytes - b.os_reserved_bytes)
    guardrails = [
        f"the statements of a running window get {1 + guard.latency_margin:g}x the original's "
        f"latency (workload.observe.guard.latency_margin {guard.latency_margin:g}; judged on "
        f"statements with {guard.min_calls}+ calls carrying {guard.min_coverage:.0%}+ of the "
        f"time), re-read every {observe.poll_s:g} s",
        f"rolled-back transactions and deadlocks rise {100 * guard.error_margin:g} points (per "
        f"100 transactions) above the original's rate (error_margin)",
        f"the server uses more than {guard.memory_fraction:.0%} of the {format_bytes(memory)} "
        f"the budget gives PostgreSQL (memory_fraction; RAM {format_bytes(b.ram_bytes)} - OS "
        f"reserve {format_bytes(b.os_reserved_bytes)})"
        + ("" if is_local(dsn) else "; off here: a remote server's memory cannot be read")]
    seen = "no statistics read"
    if stats is not None:
        seen = (f"{stats.xact_commit:,} transactions"
                + (f", {stats.statements.calls:,} statement calls in pg_stat_statements"
                   if stats.statements is not None else "")
                + (f" since {stats.stats_since}" if stats.stats_since else " so far"))
    restarts = ("allowed (workload.observe.allow_restarts: a maintenance window): the "
                "restart-time knobs listed are tuned, each candidate a restart"
                if observe.allow_restarts else
                "none: reload-time knobs only (ALTER SYSTEM + pg_reload_conf()); set "
                "workload.observe.allow_restarts: true in a maintenance window to tune "
                "restart-time knobs")
    passes = (f"up to {config.flow.max_passes}: a shift of the statement mix (total variation "
              f"{observe.shift_distance:g}+) starts another" if config.flow.max_passes > 1
              else "one")
    notes = []
    if stats is not None and stats.xact_commit < 1000:
        notes.append(f"little traffic so far ({stats.xact_commit} transactions): a window "
                     f"needs {observe.min_calls}+ calls of a statement to compare it")
    return LivePlan(
        traffic=f"the application's own, on {dsn}; the tuner drives no load ({seen})",
        comparison=(f"each candidate against the original configuration, statement by "
                    f"statement, in {m.samples} window(s) of {m.seconds or observe.SECONDS:g} "
                    f"s after {m.warmup_s:g} s of warm-up; a statement counts with "
                    f"{observe.min_calls}+ calls a window, the compared statements carrying "
                    f"{observe.min_coverage:.0%}+ of the time; the score is x the original's "
                    f"speed"),
        guardrails=guardrails, restarts=restarts, passes=passes,
        ending=("the original postgresql.auto.conf is restored (also on Ctrl-C or SIGTERM)"
                if not config.final.apply_best else
                "the best configuration is applied (final.apply_best); Ctrl-C or SIGTERM "
                "restores the original"),
        blocker=check_observable(dsn) if dsn else "live mode needs database.dsn",
        notes=notes)
