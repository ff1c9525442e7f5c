"""The per-transaction driver of a tuner workload section (``WorkloadConfig``), where one
exists: TPC-H mixes and captured replays (Python streams), pgbench's TPC-B and the user's
scripts (pgbench variants). TPC-H schedules and live traffic have none."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from harmony_base.errors import WorkloadError
from workloads.per_transaction.pgbench_variants import (
    PgbenchAssignment,
    builtin_template,
    script_templates,
)
from workloads.per_transaction.settings import Configuration
from workloads.per_transaction.streams import (
    StreamAssignment,
    replay_draws,
    tpch_draws,
    tpch_loops,
)
from workloads.per_transaction.trace import CHECK_S, Settled, Trace
from workloads.replay import read_replay_file
from workloads.scripted import load_scripts
from workloads.user_workload import replay_path


class Assignment(Protocol):
    """A per-transaction run over fixed configurations."""

    def run(self, seconds: int, *, settled: Settled | None = None, min_s: float = 0.0,
            check_s: float = CHECK_S) -> Trace: ...


def with_options(dsn: str, settings: Sequence[str]) -> str:
    """``dsn`` with ``-c name=value`` server options added to any it has."""
    if not settings:
        return dsn
    params = conninfo_to_dict(dsn)
    extra = " ".join(f"-c {s}" for s in settings)
    params["options"] = f"{params.get('options') or ''} {extra}".strip()
    return make_conninfo(**params)  # type: ignore[arg-type]


def unsupported_reason(wl: Any) -> str | None:
    """Why the workload cannot be measured per transaction (None: it can)."""
    if wl.observe is not None or wl.kind == "observe":
        return "live traffic is the application's: the tuner cannot SET LOCAL on its sessions"
    if wl.kind == "tpch" and wl.schedule is not None:
        return "a TPC-H schedule changes its mix over time; per-transaction runs need one mix"
    if wl.kind not in ("tpch", "pgbench", "scripts", "replay"):
        return f"workload kind {wl.kind!r} has no per-transaction driver"
    return None


def make_assignment(wl: Any, dsn: str, configurations: Sequence[Configuration], *,
                    seed: int = 0, query_mode: str | None = None) -> Assignment:
    """The per-transaction driver of ``wl`` over ``configurations`` (knobs checked against
    pg_settings: only session-settable ones); ``query_mode``: pgbench's ``-M`` for pgbench
    drivers (default: see :class:`PgbenchAssignment`)."""
    reason = unsupported_reason(wl)
    if reason is not None:
        raise WorkloadError(f"no per-transaction measurement for this workload: {reason}")
    if wl.kind == "tpch":
        return StreamAssignment(dsn, configurations, tpch_draws(dsn, wl.mix), seed=seed,
                                loops=tpch_loops(wl.mix))
    if wl.kind == "replay":
        replay = read_replay_file(replay_path(wl))
        replay.check_writes(wl.writes)
        options = [] if wl.writes else ["default_transaction_read_only=on"]
        if wl.statement_timeout_s is not None:
            options.append(f"statement_timeout={round(wl.statement_timeout_s * 1000)}")
        return StreamAssignment(with_options(dsn, options), configurations,
                                replay_draws(replay, wl.clients or replay.clients), seed=seed)
    if wl.kind == "pgbench":
        return PgbenchAssignment(dsn, configurations, [builtin_template(wl.builtin)],
                                 clients=wl.clients, variables={"scale": int(wl.scale)},
                                 seed=seed, query_mode=query_mode)
    scripts = load_scripts(wl.files, Path(wl.base_dir) if wl.base_dir else None)
    return PgbenchAssignment(dsn, configurations, script_templates(scripts), clients=wl.clients,
                             variables=wl.variables, seed=seed, query_mode=query_mode,
                             pgoptions="" if wl.writes else "-c default_transaction_read_only=on")
