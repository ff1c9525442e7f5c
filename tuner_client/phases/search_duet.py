"""A search session's evaluations measured by duet (issue 51, item 1), where the engine
chooses it (:func:`tuner_client.phases.search_design.search_choice`): a knob with memory
(checkpoint and WAL volume, the background writer, autovacuum) or a restart-time knob is
searched, the workload is one the tuner drives, and a clone of the server can run beside it
(or the user named a twin). Before, every such session went to whole-server windows, whose
evaluations read at noise level: a write-heavy search's 25 windows spread 0.68–1.18×, and an
A/A of checkpoint knobs on a read-only mix ran ~400 s of windows before its final race.

One second cluster serves the whole session: the clone is made when the session starts
(:func:`tuner_client.phases.final_duet.second_cluster`: a ``pg_basebackup`` after the disk
and memory checks, journaled before the copy so the guard removes it whatever ends the
tuner) and removed when it ends. Each fetch of the strategy's ready trials (up to
:data:`~tuner_client.phases.search_batches.MAX_BATCH`) is one duet run
(:func:`tuner_client.duet.race.run_duet`) of the session's reference and the batch's
feasible candidates: in every block each candidate runs beside the reference once, at the
same seconds under the workload's own client (one ``--random-seed`` for both clients), the
reference on the clone in even blocks and on the server in odd ones, for
:data:`SEARCH_BLOCKS` blocks of :data:`SEARCH_SEGMENT_S`-s segments (more where the machine
paired too few seconds: :data:`SHORT_BY`). A candidate's ratio is its batches' paired
log-ratios with the clone's fixed asymmetry cancelled, and a Student t interval at
:data:`~tuner_client.phases.search_batches.LEVEL`, not split over the candidates (the search
ranks; the final race claims); the segments' width where they spread beyond their batches
(:func:`tuner_client.duet.stats.segments_differ`). The strategy is told that ratio times the
reference's window level, and the record carries the ratio and its reference into the ledger
(:func:`tuner_client.phases.state.record_point`), as the other paired searches do.

Where no second cluster can be had when the session starts (the disk, the memory, a twin
whose data differs), the session is measured in windows and a decision says why.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from harmony_base.errors import HarmonyError
from tuner_client.api.client import Session
from tuner_client.config import KnobSpace
from tuner_client.duet.clone import Clone
from tuner_client.duet.driver import Runner, pin_postmaster
from tuner_client.duet.race import run_duet
from tuner_client.duet.stats import DuetComparison
from tuner_client.duet.twin import Twin
from tuner_client.engine.designs import DUET, WINDOWS
from tuner_client.measurer import PointRecord
from tuner_client.phases.blocks import SessionReferences
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.final_duet import (
    duet_arms,
    duet_runner,
    largest_shared_buffers,
    pinning,
    second_cluster,
    second_text,
    warmup_seconds,
)
from tuner_client.phases.search_batches import (
    LEVEL,
    Evaluation,
    SessionEvaluations,
    run_batched_session,
    session_reference,
)
from tuner_client.phases.session_loop import run_session as run_windows_session
from tuner_client.phases.state import RunContext, RunState

logger = logging.getLogger(__name__)

__all__ = ["DuetEvaluations", "run_duet_session"]

#: seconds measured per segment of a search's duet run: two 5-s batches. The final race's
#: 20 s buy its claim; a search only ranks, and a batch of six candidates at 20 s would spend
#: 300 s before the strategy hears of any
SEARCH_SEGMENT_S = 10
#: blocks per run: each candidate once on either cluster, so the asymmetry cancels exactly
SEARCH_BLOCKS = 2
#: batches a candidate may lack of its two blocks' four before the run ends anyway: on a
#: loaded machine a segment pairs a second or two fewer than it ran, and an A/A search's first
#: batch of six then ran four blocks where two were planned (456 s for 10 evaluations, load
#: 8); three batches still hold both orientations and a t interval
SHORT_BY = 1
#: seconds a segment costs beyond those it measures (connections, a reload)
SEGMENT_OVERHEAD_S = 2
#: the session's time budget when ``online.seconds`` sets none. With the final duet's 240 s
#: (:data:`~tuner_client.phases.final_duet.DEFAULT_DUET_SECONDS`), the offline phase's
#: probes and set-up, a run holds 10 minutes: an A/A of checkpoint knobs whose search stalled
#: after 8 evaluations (~250 s of duet runs) took 584 s, one that spent all 10 (297 s) took
#: 632 s (``benchmarks/results/aa_default.s31-abba.md``, runs 0 and 1). No run is started
#: that would not end within it: a first batch of six (~185 s) and one more candidate
DEFAULT_SEARCH_SECONDS = 240


def run_seconds(candidates: int, warmup_s: int) -> float:
    """The time a run of ``candidates`` beside the reference is planned to take:
    :data:`SEARCH_BLOCKS` blocks of one segment per candidate. :func:`run_duet` stops after
    them once every candidate has its two blocks' batches, and runs on (up to twice this)
    where a loaded machine paired fewer seconds than it ran."""
    return SEARCH_BLOCKS * candidates * (SEARCH_SEGMENT_S + warmup_s + SEGMENT_OVERHEAD_S)


@dataclass(eq=False)
class DuetEvaluations(SessionEvaluations):
    """Measures batches of a session's candidates beside ``reference`` by duet, on the
    server and ``second`` (made for the session, removed by :meth:`close`)."""

    design: ClassVar[str] = DUET

    runner: Runner | None = None
    second: Clone | Twin | None = None
    #: the CPUs of (the server, the clone, all) when pinned (:func:`pinning`)
    cpus: tuple[str, str, str] | None = None
    segments: int = 0

    def least_run_seconds(self) -> float:
        return run_seconds(1, warmup_seconds(self.ctx.config.measure.warmup_s))

    def measure_feasible(self, runnable: list[Evaluation], level: float) -> None:
        """One duet run of ``runnable`` beside the reference; each record gets its paired
        ratio (or its failure when the run failed or measured too little)."""
        ctx = self.ctx
        assert self.runner is not None and self.second is not None
        labels, configs = self.arms(runnable)
        warmup = warmup_seconds(ctx.config.measure.warmup_s)
        seconds = run_seconds(len(runnable), warmup)
        logger.info("[%s] duet run %d: the reference and %d candidate(s) for about %.0f s",
                    self.label, self.runs + 1, len(runnable), seconds)
        ctx.measurer.stop()  # the windows' workload must not run beside this one
        server, other = duet_arms(ctx.target, ctx.apply, self.second, self.cpus)
        try:
            with self.counted():
                outcome = run_duet(server, other, configs, labels, self.runner,
                                   max_seconds=seconds, level=LEVEL,
                                   segment_s=SEARCH_SEGMENT_S, warmup_s=warmup,
                                   min_blocks=SEARCH_BLOCKS, short_by=SHORT_BY,
                                   clone_text=second_text(self.second, self.cpus))
        except HarmonyError as exc:
            for ev in runnable:
                ev.record.failure = f"duet run failed: {exc}"
            return
        if outcome is None:
            for ev in runnable:
                ev.record.failure = "the duet run measured too little for an interval"
            return
        self.segments += outcome.segments
        for label, ev in zip(labels[1:], runnable, strict=True):
            self._fill(ev.record, outcome.plain[label], level)

    def _fill(self, record: PointRecord, comparison: DuetComparison, level: float) -> None:
        """``record``'s ratio to the reference, its interval and value."""
        record.design = DUET
        iv = comparison.interval
        if not (iv.low > 0 and iv.high < float("inf")):
            record.failure = (f"no duet interval: {comparison.batches} batch(es) in "
                              f"{comparison.segments} segment(s)")
            return
        record.ratio = iv.ratio
        record.interval = (iv.low, iv.high)
        record.reference = [level]
        record.value = iv.ratio * level
        self.state.decide(Decision.note(
            f"{self.label}: {record.settings}: {comparison.text()} over the reference",
            design=DUET, settings={"candidate": dict(record.settings)},
            ratio=iv.ratio, low=iv.low, high=iv.high, level=iv.level,
            rounds=comparison.segments))

    def close(self) -> None:
        """Put the reference back on the server, its CPUs back, and remove the clone (a
        twin: its configuration restored)."""
        try:
            if self.runs:
                self.ctx.apply(dict(self.reference.settings), check_budget=False,
                               warm_up=False)
        finally:
            if self.second is not None:
                if isinstance(self.second, Twin) and self.runs:
                    self.state.wrote_twin()  # a later duet compares only their relations
                self.second.remove()
            cluster = self.ctx.target.cluster
            if self.cpus is not None and cluster is not None:
                pin_postmaster(cluster.data_dir, self.cpus[2])  # every CPU again

    def summary(self) -> Decision:
        """The session's design in one decision."""
        where = second_text(self.second, self.cpus) if self.second is not None else ""
        return Decision.note(
            f"{self.label}: evaluations measured by {DUET}: {self.runs} run(s), "
            f"{self.segments} segments of {SEARCH_SEGMENT_S} s in {self.seconds:.0f} s, each "
            f"batch's candidates beside the reference {self.reference.settings} on the "
            f"server and {where}, at the same seconds under the workload's own client, roles "
            f"swapped between blocks; Student t intervals over 5-s batches at "
            f"{100 * LEVEL:.0f} %, not split over the candidates: the search only ranks, the "
            f"final race claims",
            design=DUET)

    @classmethod
    def run_session(cls, ctx: RunContext, state: RunState, session: Session,
                    space: KnobSpace, evaluations: int, label: str,
                    after_eval: Callable[[PointRecord], bool] | None = None,
                    references: SessionReferences | None = None,
                    seconds: float | None = None) -> str:
        """Measure ``session`` by duet on a second cluster made now (removed when the
        session ends, on failure too); in windows where none can be had, said why."""
        runner = duet_runner(ctx)
        second = None
        if runner is not None:
            ctx.measurer.stop()
            limit = ctx.target.cluster.memory_limit_bytes if ctx.target.cluster else None
            second = second_cluster(ctx.target.dsn, ctx.config.database,
                                    largest_shared_buffers(ctx, [dict(ctx.measurer.in_force)]),
                                    state.decide, memory_limit_bytes=limit, phase=label,
                                    twin_written=state.twin_written)
        if runner is None or second is None:
            why = ("no second cluster for a duet search (said above)" if runner is not None
                   else "the tuner does not drive the traffic, so no duet")
            state.decide(Decision(label, Kind.MEASURED, design=WINDOWS,
                                  why=f"{why}: measured in windows"))
            return run_windows_session(ctx, state, session, space, evaluations, label,
                                       after_eval, references, seconds)
        reference = session_reference(ctx.measurer.in_force, label, space, references)
        evals = cls(ctx, state, label, space, reference, runner=runner, second=second,
                    cpus=pinning(ctx) if isinstance(second, Clone) else None)
        if seconds is None:
            seconds = DEFAULT_SEARCH_SECONDS
            state.decide(Decision.note(
                f"{label}: the duet search has {seconds} s (online.seconds sets none), so "
                f"that with the final race a run holds 10 minutes", design=DUET))
        try:
            return run_batched_session(ctx, state, session, space, evaluations, label, evals,
                                       after_eval, seconds)
        finally:
            evals.close()


#: measure a session by duet (:meth:`DuetEvaluations.run_session`)
run_duet_session = DuetEvaluations.run_session
