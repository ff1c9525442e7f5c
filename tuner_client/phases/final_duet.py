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
import math
import os
import secrets
from collections.abc import Callable, Mapping

from harmony_base.errors import ConfigError, HarmonyError
from tuner_client.config import DatabaseConfig
from tuner_client.config.units import parse_bytes
from tuner_client.crashsafe.guard import MARK_VARIABLE
from tuner_client.crashsafe.journal import journal_dir
from tuner_client.duet.clone import Clone, check_memory, make_clone
from tuner_client.duet.counted import counted_runner
from tuner_client.duet.driver import Runner, client_runner, pin_postmaster
from tuner_client.duet.race import MIN_BLOCKS, SEGMENT_S, WARMUP_S, Arm, run_duet
from tuner_client.duet.stats import BATCH_S, DuetRace
from tuner_client.duet.twin import Twin, open_twin
from tuner_client.engine.comparison import live_traffic
from tuner_client.engine.designs import DUET
from tuner_client.engine.protocol import RaceRequest
from tuner_client.phases.decisions import Decision, Kind, drift_record, race_records
from tuner_client.phases.final_design import FinalDesign, FinalRun
from tuner_client.phases.final_per_transaction import race_seconds
from tuner_client.phases.final_split import restart_knobs
from tuner_client.phases.state import RunContext, RunState
from tuner_client.servers.target import Target
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
        # one seed per segment for both clients (common random numbers)
        return client_runner(workload.progress_command, seed=cfg.seed)
    return counted_runner(cfg.workload, cfg.seed)


#: what a duet's interval holds for when its reference drifted (issue 51, item 5)
HOLDS = ("both clusters ran at the same seconds, so the drift the two arms share cancels in "
         "each pair: the interval holds for the average of the states the race saw, not for "
         "the reference's level at its start or at its end")

def segment_seconds(seconds: float, candidates: int, *, restart: bool = False) -> int:
    """A segment's length for a race of ``seconds`` over ``candidates`` candidates:
    :data:`~tuner_client.duet.race.SEGMENT_S` (four 5-s batches, so that the two blocks the
    time limit waits for give each candidate 8 batches, both orientations twice as many as
    one), longer where :data:`~tuner_client.duet.race.MIN_BLOCKS` blocks of longer ones fit
    (fewer swaps for the same batches), up to twice that. Shorter segments spend a larger
    share on their warm-ups and restarts and leave the demo's restart part unbounded: 40-s
    races cut into 10-s segments ended with 4 batches a candidate, "unbounded yet"
    (``benchmarks/results/demo_versions.s52.md``); 15-s ones with 6, ±12–16 % at 98.8 %.
    Where four blocks of the longest segments leave time over, the segments are cut so that
    an even number of blocks fills the budget: the race stops only after an even number,
    and one candidate's 240 s in 40-s segments (45 s a block) ran six blocks, 270 s (an A/A
    of server-wide knobs took 610 s where its issue asks 600).
    Where four blocks fit only with segments of :data:`SHORT_SEGMENT_S` to
    :data:`~tuner_client.duet.race.SEGMENT_S`, they are taken (whole 5-s batches): the whole
    ABBA order, whose four blocks cancel a drifting asymmetry, and 12 batches a candidate
    where two 20-s segments give 8: the end's t interval narrows to 0.72 of theirs (at 98 %
    with 6 degrees of freedom t is 3.14, with 10 it is 2.76). A budget of 80 s for one
    candidate, which two blocks of 20-s segments overran to 92 s, now runs four of 15 s in
    72 s.

    ``restart``: the candidates differ in a knob only a restart changes, so every swap
    restarts both clusters and a segment's batches share what its restart left (the prewarmed
    buffer, the page cache): there the segments, not the batches, are the units an interval
    may have to count (``duet.stats.segment_half_width``, ``k - 2`` degrees of freedom from
    ``k`` segments), and the race takes the most blocks, up to :data:`RESTART_BLOCKS`, whose
    segments keep :data:`SHORT_SEGMENT_S` (whole batches). The cache row's restart part
    (240 s, two candidates) ran four blocks of 25 s, two segments of each orientation a
    candidate, and its segments spread beyond their batches (±4.4–8.2 % by segment at 98.75 %
    with 3 degrees of freedom, 2 in truth; ``accuracy_table.cache.s32``); six blocks of 15 s
    give each candidate 6 segments, 18 batches against 20, and the same row then recommended
    PGTune's 256MB at 1.04× (1.01–1.07, ±3.1 % by segment at 98.75 %) where pgbench's own
    rounds read 1.00× (0.86–1.17) (``accuracy_table.cache.s32b``). Its run took 623 s
    against 583: the swaps restart both clusters, which costs more than the 2 s a segment
    is given here (not yet timed)."""
    per_block = max(1, candidates)

    def room(blocks: int) -> float:
        # a segment's seconds when ``blocks`` blocks share the budget (less its warm-up and
        # the swap's 2 s)
        return seconds / (blocks * per_block) - WARMUP_S - 2

    if restart:
        most = max((b for b in range(MIN_BLOCKS, RESTART_BLOCKS + 1, 2)
                    if room(b) >= SHORT_SEGMENT_S), default=None)
        if most is not None:
            fit = min(2 * SEGMENT_S, int(room(most)))
            return fit - fit % BATCH_S if fit < SEGMENT_S else fit
    blocks = MIN_BLOCKS
    while room(blocks) > 2 * SEGMENT_S:
        blocks += 2
    fit = int(room(blocks))
    if blocks == MIN_BLOCKS and SHORT_SEGMENT_S <= fit < SEGMENT_S:
        return fit - fit % BATCH_S
    return max(SEGMENT_S, min(2 * SEGMENT_S, fit))


#: the shortest segment a race of four blocks takes before it falls back to two blocks of
#: :data:`~tuner_client.duet.race.SEGMENT_S`: three 5-s batches
SHORT_SEGMENT_S = 15
#: the most blocks a race that restarts between its segments is cut into (each block
#: restarts both clusters once a candidate)
RESTART_BLOCKS = 8


#: the duet's time budget when ``final.max_seconds`` is not given. The per-transaction
#: default (120 s) gave an A/A of server-wide knobs 2 blocks, 8 batches a candidate, and
#: ±15-20 % at the end (``benchmarks/results/aa_default.s27-probe.md``, load 6-8); the end's t
#: interval narrows as 1/sqrt(batches), and ±5 % needs ~16 a candidate at the 8 % per batch
#: of a pinned duet (``duet_race.pinned.md``): 4 blocks of two candidates, ~200 s of segments
DEFAULT_DUET_SECONDS = 240


def duet_seconds(ctx: RunContext, stage: str | None = None) -> int:
    """The duet race's time budget at ``stage`` (a split race's restart part reads
    ``final.restart_seconds`` where given): ``final.max_seconds`` as the other designs read
    it (:func:`~tuner_client.phases.final_per_transaction.race_seconds`), else
    :data:`DEFAULT_DUET_SECONDS`."""
    wanted = ctx.config.final.seconds_for(stage)
    if wanted is not None:
        return race_seconds(ctx, wanted)
    return DEFAULT_DUET_SECONDS


def warmup_seconds(warmup_s: float) -> int:
    """The seconds left out at each segment's start: the run's ``measure.warmup_s`` rounded
    up, at least 1 (the first report is a second in) and at most
    :data:`~tuner_client.duet.race.WARMUP_S` (a segment starts warm: its clusters ran the
    workload the segment before)."""
    return max(1, min(WARMUP_S, math.ceil(warmup_s)))


def largest_shared_buffers(ctx: RunContext, configs: list[dict[str, str]]) -> int:
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


def second_text(second: Clone | Twin, cpus: tuple[str, str, str] | None) -> str:
    """The second cluster in the decisions' words: ``its clone (150 MiB, made in 2.0 s,
    removed after, …pinned…)``, or the twin named in ``database.twin``."""
    size = f"{second.size_bytes / 2 ** 20:,.0f} MiB"
    if isinstance(second, Twin):
        return (f"the twin {second.source} named in database.twin ({size}, its configuration "
                f"restored after)")
    pinned = (f", the server and its client pinned to CPUs {cpus[0]}, the clone and its "
              f"client to {cpus[1]}" if cpus else "")
    return f"its clone ({size}, made in {second.setup_s:.1f} s, removed after{pinned})"


def duet_arms(target: Target, apply: Callable[..., object], second: Clone | Twin,
              cpus: tuple[str, str, str] | None) -> tuple[Arm, Arm]:
    """The duet's two arms: the server of ``target``, configured by the run's own
    (journaled) ``apply`` without the budget check or a warm-up, and ``second``, each pinned
    to its half of ``cpus`` where given (:func:`pinning`)."""
    cluster = target.cluster
    server = Arm("server", target.dsn,
                 lambda s: apply(s, check_budget=False, warm_up=False),
                 cpus=cpus[0] if cpus else None,
                 data_dir=cluster.data_dir if cluster is not None else None)
    other = Arm("clone" if isinstance(second, Clone) else "twin",
                second.dsn_like(target.dsn), lambda s: second.apply(dict(s)),
                cpus=cpus[1] if cpus else None,
                data_dir=second.cluster.data_dir if isinstance(second, Clone) else None)
    return server, other


class Duet(FinalDesign, name=DUET):
    """The final race by duet (the module)."""

    def race(self, run: FinalRun, request: RaceRequest) -> DuetRace | None:
        return race_duet_run(run.ctx, run.state, request.configurations, list(request.labels),
                             level=request.level, stage=request.stage)


def second_cluster(dsn: str, database: DatabaseConfig, largest_shared_buffers: int,
                   decide: Callable[[Decision], None], *,
                   memory_limit_bytes: int | None = None, phase: str = "final",
                   twin_written: bool = False) -> Clone | Twin | None:
    """The duet's second cluster beside the server at ``dsn``: the user's twin
    (``database.twin``, checked to hold the same data) or a clone made now, with memory for
    ``largest_shared_buffers`` bytes, in a memory cgroup of ``memory_limit_bytes`` when the
    server runs in one (None, said why, when neither can run); ``phase`` labels the
    decisions (the final race's, or a search session's); ``twin_written``: an earlier duet
    of the run wrote to the twin (:func:`~tuner_client.duet.twin.open_twin`)."""
    twin = database.twin
    try:
        if twin is not None:
            second: Clone | Twin = open_twin(dsn, twin,
                                             restart_timeout_s=database.restart_timeout_s,
                                             written=twin_written)
        else:
            check_memory(largest_shared_buffers, dsn)
            mark = os.environ.get(MARK_VARIABLE) or secrets.token_hex(8)
            second = make_clone(dsn, journals=journal_dir(), mark=mark,
                                memory_limit_bytes=memory_limit_bytes)
    except HarmonyError as exc:
        what = "the twin could not be used" if twin is not None else \
            "the clone could not be made"
        decide(Decision.of(phase, Kind.SKIPPED, step="duet", design=DUET,
                           reason=f"no duet: {what} ({exc})"))
        return None
    if isinstance(second, Twin):
        decide(Decision.line(
            phase, f"duet on the twin {second.source} (database.twin): the same data as the "
                     f"server, {second.size_bytes / 2 ** 20:,.0f} MiB; no copy made",
            design=DUET))
    else:
        limited = (f", in a memory cgroup of {memory_limit_bytes / 2 ** 20:,.0f} MiB as the "
                   f"server's" if memory_limit_bytes is not None else "")
        decide(Decision.line(
            phase, f"duet clone of {second.source}: {second.size_bytes / 2 ** 20:,.0f} MiB "
                     f"copied in {second.setup_s:.1f} s to {second.record.scratch}{limited}",
            design=DUET))
    return second


def race_duet_run(ctx: RunContext, state: RunState,
                  candidates: Mapping[str, Mapping[str, str]],
                  labels: list[str], *, level: float | None = None,
                  stage: str | None = None) -> DuetRace | None:
    """Race ``labels`` (the first the reference) by duet for ``final.max_seconds`` at
    ``level`` (``final.level`` when None; a split's stage lowers it); None, said why, when it
    could not run (the race then runs in the next design)."""
    runner = duet_runner(ctx)
    if runner is None:
        state.decide(Decision.of("final", Kind.SKIPPED, step="duet", design=DUET, stage=stage,
                                 reason="no duet: the traffic is live (the application talks "
                                        "to one server)"))
        return None
    configs = [dict(candidates[label]) for label in labels]
    ctx.measurer.stop()  # the windows' workload must not run beside this one
    # the embedded cluster's memory limit holds for its clone too (its own cgroup): a clone
    # beside the page cache of the whole machine would measure another machine
    limit = ctx.target.cluster.memory_limit_bytes if ctx.target.cluster else None
    second = second_cluster(ctx.target.dsn, ctx.config.database,
                            largest_shared_buffers(ctx, configs), state.decide,
                            memory_limit_bytes=limit, twin_written=state.twin_written)
    if second is None:
        return None
    cpus = pinning(ctx) if isinstance(second, Clone) else None
    try:
        server, other = duet_arms(ctx.target, ctx.apply, second, cpus)
        seconds = duet_seconds(ctx, stage)
        outcome = run_duet(server, other, configs, labels, runner, max_seconds=seconds,
                           segment_s=segment_seconds(seconds, len(labels) - 1,
                                                     restart=bool(restart_knobs(ctx, configs))),
                           warmup_s=warmup_seconds(ctx.config.measure.warmup_s),
                           level=ctx.config.final.level if level is None else level,
                           clone_text=second_text(second, cpus))
    except HarmonyError as exc:
        state.decide(Decision.of("final", Kind.FAILED, design=DUET, stage=stage,
                                 reason=str(exc), text="measured in another design"))
        return None
    finally:
        second.remove()
        if cpus and ctx.target.cluster is not None:
            pin_postmaster(ctx.target.cluster.data_dir, cpus[2])  # every CPU again
    if outcome is None:
        state.decide(Decision.of("final", Kind.SKIPPED, step="duet", design=DUET, stage=stage,
                                 reason="the duet measured too little for an interval"))
        return None
    for record in race_records(outcome.to_final_decision(), stage=stage):
        state.decide(record)
    if outcome.drift is not None:
        state.decide(drift_record(outcome.drift, reference=labels[0], design=DUET, stage=stage,
                                  holds=HOLDS))
    return outcome
