"""The final race by duet, where the engine chooses it (:mod:`tuner_client.engine.designs`: a
restart-time knob or one with memory differs, and a clone can exist): the server and a
scratch clone of it (:mod:`tuner_client.duet.clone`) run the reference and one candidate at
the same seconds under the workload's own client, the roles swapped between segments
(:mod:`tuner_client.duet.race`); the clone is removed afterwards, on failure too, and the
server keeps the configuration the run puts back at its end.

:class:`Duet` is the design behind the protocol (:mod:`tuner_client.phases.final_design`);
:func:`race_duet_run` its run, the outcome a :class:`~tuner_client.duet.stats.DuetRace` with
``winner`` and ``to_final_decision()``.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Mapping

from harmony_base.errors import ConfigError, HarmonyError
from tuner_client.config.units import parse_bytes
from tuner_client.crashsafe.guard import MARK_VARIABLE
from tuner_client.crashsafe.journal import journal_dir
from tuner_client.duet.clone import check_memory, make_clone
from tuner_client.duet.driver import Runner, client_runner, counted_runner, pin_postmaster
from tuner_client.duet.race import MIN_BLOCKS, SEGMENT_S, WARMUP_S, Arm, run_duet
from tuner_client.duet.stats import DuetRace
from tuner_client.engine.comparison import live_traffic
from tuner_client.engine.designs import DUET
from tuner_client.engine.protocol import RaceRequest
from tuner_client.phases.final_design import FinalDesign, FinalRun
from tuner_client.phases.final_per_transaction import race_seconds
from tuner_client.phases.state import RunContext, RunState
from workloads.factory import make_workload
from workloads.pgbench import PgbenchWorkload

logger = logging.getLogger(__name__)


def duet_runner(ctx: RunContext) -> Runner | None:
    """How the duet drives the run's workload on both servers: pgbench's own client with its
    per-second report, else one driver per server counted from ``pg_stat_database`` (None:
    live traffic, which the tuner does not drive)."""
    if live_traffic(ctx.config):
        return None
    cfg = ctx.config
    workload = make_workload(cfg.workload, ctx.target.dsn, seed=cfg.seed)
    if isinstance(workload, PgbenchWorkload):
        return client_runner(workload.progress_command)
    return counted_runner(lambda dsn: make_workload(cfg.workload, dsn, seed=cfg.seed))


#: the shortest segment a race runs (s): two 5-s batches
MIN_SEGMENT_S = 10


def segment_seconds(seconds: float, candidates: int) -> int:
    """A segment's length for a race of ``seconds`` over ``candidates`` candidates: the
    :data:`~tuner_client.duet.race.MIN_BLOCKS` blocks fit (each a segment per candidate),
    between :data:`MIN_SEGMENT_S` and :data:`~tuner_client.duet.race.SEGMENT_S`."""
    fit = int(seconds / (MIN_BLOCKS * max(1, candidates))) - WARMUP_S - 2
    return max(MIN_SEGMENT_S, min(SEGMENT_S, fit))


def _largest_shared_buffers(ctx: RunContext, configs: list[dict[str, str]]) -> int:
    """The largest shared_buffers among ``configs`` (those without one: what is in force),
    in bytes; 128MB, PostgreSQL's default, where a value does not read as a size."""
    in_force = ctx.measurer.in_force.get("shared_buffers", "128MB")
    sizes = []
    for config in configs:
        try:
            sizes.append(parse_bytes(config.get("shared_buffers", in_force),
                                     what="shared_buffers"))
        except ConfigError:
            sizes.append(128 * 2 ** 20)
    return max(sizes)


def pinning(ctx: RunContext) -> tuple[str, str, str] | None:
    """The CPUs of (the server, the clone, all) when the duet pins them: only the embedded
    cluster, the tuner's own (a user's server keeps its affinity), on two CPUs or more, each
    half to one cluster and its client. Pinned, an A/A of shared_buffers read ±6.5 % in 120 s
    where unpinned it read ±10.8 % (``benchmarks/results/duet_race.pinned.md``,
    ``duet_race.md``), and the two clusters' shares of the machine stopped differing."""
    count = os.cpu_count() or 1
    if ctx.target.cluster is None or count < 2:
        return None
    half = count // 2
    first = "0" if half == 1 else f"0-{half - 1}"
    second = str(half) if count - half == 1 else f"{half}-{count - 1}"
    return first, second, f"0-{count - 1}"


class Duet(FinalDesign, name=DUET):
    """The final race by duet (the module)."""

    def race(self, run: FinalRun, request: RaceRequest) -> DuetRace | None:
        return race_duet_run(run.ctx, run.state, request.configurations, list(request.labels),
                             level=request.level)


def race_duet_run(ctx: RunContext, state: RunState,
                  candidates: Mapping[str, Mapping[str, str]],
                  labels: list[str], *, level: float | None = None) -> DuetRace | None:
    """Race ``labels`` (the first the reference) by duet for ``final.max_seconds`` at
    ``level`` (``final.level`` when None; a split's stage lowers it); None, said why, when it
    could not run (the race then runs in the next design)."""
    runner = duet_runner(ctx)
    if runner is None:
        state.decide("final: no duet: the traffic is live (the application talks to one "
                     "server)")
        return None
    configs = [dict(candidates[label]) for label in labels]
    ctx.measurer.stop()  # the windows' workload must not run beside this one
    mark = os.environ.get(MARK_VARIABLE) or secrets.token_hex(8)
    try:
        check_memory(_largest_shared_buffers(ctx, configs), ctx.target.dsn)
        # the embedded cluster's memory limit holds for its clone too (its own cgroup): a
        # clone beside the page cache of the whole machine would measure another machine
        limit = ctx.target.cluster.memory_limit_bytes if ctx.target.cluster else None
        clone = make_clone(ctx.target.dsn, journals=journal_dir(), mark=mark,
                           memory_limit_bytes=limit)
    except HarmonyError as exc:
        state.decide(f"final: no duet: the clone could not be made ({exc})")
        return None
    limited = (f", in a memory cgroup of {limit / 2 ** 20:,.0f} MiB as the server's"
               if limit is not None else "")
    state.decide(f"final: duet clone of {clone.source}: {clone.size_bytes / 2 ** 20:,.0f} MiB "
                 f"copied in {clone.setup_s:.1f} s to {clone.record.scratch}{limited}")
    cpus = pinning(ctx)
    try:
        server = Arm("server", ctx.target.dsn,
                     lambda s: ctx.apply(s, check_budget=False, warm_up=False),
                     cpus=cpus[0] if cpus else None,
                     data_dir=ctx.target.cluster.data_dir if ctx.target.cluster else None)
        twin = Arm("clone", clone.dsn_like(ctx.target.dsn), lambda s: clone.apply(dict(s)),
                   cpus=cpus[1] if cpus else None, data_dir=clone.cluster.data_dir)
        seconds = race_seconds(ctx)
        pinned = (f", the server and its client pinned to CPUs {cpus[0]}, the clone and its "
                  f"client to {cpus[1]}" if cpus else "")
        outcome = run_duet(server, twin, configs, labels, runner, max_seconds=seconds,
                           segment_s=segment_seconds(seconds, len(labels) - 1),
                           level=ctx.config.final.level if level is None else level,
                           clone_text=f"its clone ({clone.size_bytes / 2 ** 20:,.0f} MiB, made "
                                      f"in {clone.setup_s:.1f} s, removed after{pinned})")
    except HarmonyError as exc:
        state.decide(f"final: the duet failed ({exc}); measured in another design")
        return None
    finally:
        clone.remove()
        if cpus and ctx.target.cluster is not None:
            pin_postmaster(ctx.target.cluster.data_dir, cpus[2])  # every CPU again
    if outcome is None:
        state.decide("final: the duet measured too little for an interval")
        return None
    for line in outcome.decisions():
        state.decide(f"final: {line}")
    return outcome
