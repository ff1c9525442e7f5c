"""The loop of a search session measured in batches: every fetch that finds several trials
ready measures them together beside the session's reference, in one run of a paired design
(per transaction, :mod:`tuner_client.phases.search_per_transaction`; by switchback,
:mod:`tuner_client.phases.search_switchback`), then reports each trial to the strategy and
keeps each record with its paired ratio to the reference (:func:`record_point`, so that the
ledger ranks it by that ratio, never by an absolute level).

The design is an argument (:class:`SessionEvaluations`): the loop, its stops (the budget, the
time, convergence, an idle or paused session, a stall) and the reporting are one code for
both.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import ClassVar

from tuner_client.api.client import Fetched, Session
from tuner_client.budget import BudgetView
from tuner_client.config import KnobSpace
from tuner_client.measurer import Measurer, PointRecord
from tuner_client.metrics.exporter import TunerMetrics
from tuner_client.phases.blocks import Reference, SessionReferences, measure_reference
from tuner_client.phases.decisions import Decision
from tuner_client.phases.search_stops import Stall
from tuner_client.phases.session_loop import FETCH_WAIT_S, IDLE_FETCHES
from tuner_client.phases.state import RunContext, RunState, record_point

logger = logging.getLogger(__name__)

#: most candidates measured in one run beside the reference (a 6-knob simplex's first batch
#: has 7 vertices; more arms thin every comparison's share of the transactions or slices)
MAX_BATCH = 6
#: the interval level of each evaluation (the search ranks; only the final race claims)
LEVEL = 0.95
#: the reference's label in a search's run
REFERENCE = "reference"


def run_seconds(base_s: float, candidates: int) -> float:
    """How long a run of ``candidates`` beside the reference lasts: ``base_s`` for one, and
    (k + 1) / 2 times that for k, so each arm keeps the transactions (or slices) of a
    one-candidate run."""
    return base_s * (candidates + 1) / 2.0


def feasible(budget: BudgetView, in_force: Mapping[str, str], batch: list[Evaluation]
             ) -> list[Evaluation]:
    """The evaluations of ``batch`` whose settings, over ``in_force``, keep the memory
    budget's inequalities they enter; the others' records fail as infeasible (never
    applied). The inequalities they leave alone are the user's own (the original may break a
    budget tighter than what it runs today)."""
    runnable = []
    for ev in batch:
        wanted = {**in_force, **ev.settings}
        reason = budget.violation(wanted, ev.settings)
        if reason is not None:
            ev.record.failure = f"infeasible: {reason}"
        else:
            runnable.append(ev)
    return runnable


def reference_level(measurer: Measurer, metrics: TunerMetrics, reference: Reference
                    ) -> float | None:
    """The reference's window level (measured once, when the session first needs it): the
    scale the strategy's values keep (a candidate's value is its paired ratio times it)."""
    if reference.level.level is None:
        reference.level.add(measure_reference(measurer, metrics, reference))
    return reference.level.level


@dataclass
class Evaluation:
    """One fetched trial of the batch and its settings."""

    got: Fetched
    settings: dict[str, str]
    record: PointRecord


@dataclass(eq=False)
class SessionEvaluations(abc.ABC):
    """A design measuring batches of a session's candidates beside its reference: the run,
    the session's label and space, its reference, the runs made so far and their seconds;
    what every design does first with a batch (:meth:`measure`), and how its session runs
    (:meth:`run_session`). A design is a dataclass subclass: its name, its own counters as
    fields with defaults, :meth:`measure_feasible` and :meth:`summary`."""

    #: the design's name (each record's ``design``)
    design: ClassVar[str]

    ctx: RunContext
    state: RunState
    label: str
    space: KnobSpace
    reference: Reference
    #: runs made so far, and their seconds
    runs: int = 0
    seconds: float = 0.0
    #: what the runs' ratios count (the workload's client model; empty before a run)
    counts: str = ""

    def measure(self, batch: list[Evaluation]) -> None:
        """Run the candidates of ``batch`` that keep the memory budget beside the reference
        (:meth:`measure_feasible`; the others fail as infeasible); fill each record (its
        value, ratio, interval and design, or its failure)."""
        ctx = self.ctx
        runnable = feasible(ctx.budget, ctx.measurer.in_force, batch)
        if not runnable:
            return
        level = reference_level(ctx.measurer, ctx.metrics, self.reference)
        if level is None:
            for ev in runnable:
                ev.record.failure = "the reference could not be measured in a window"
            return
        self.measure_feasible(runnable, level)

    def arms(self, runnable: list[Evaluation]) -> tuple[list[str], list[dict[str, str]]]:
        """The labels and settings (the session's knobs) of one run: the reference, then
        ``runnable`` as ``candidate-1`` ... in order."""
        names = self.space.names
        labels = [REFERENCE, *(f"candidate-{k}" for k in range(1, len(runnable) + 1))]
        configs = [{n: self.reference.settings[n] for n in names},
                   *({n: ev.settings[n] for n in names} for ev in runnable)]
        return labels, configs

    @contextmanager
    def counted(self) -> Iterator[None]:
        """One run of the design: counted in :attr:`runs` and its wall-clock in
        :attr:`seconds` however it ends."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.runs += 1
            self.seconds += time.monotonic() - started

    def least_run_seconds(self) -> float:
        """The seconds the shortest run (one candidate) is planned to take: a session with a
        time budget starts no run that would not end within it (0: unknown, a run is
        started while any time is left)."""
        return 0.0

    @abc.abstractmethod
    def measure_feasible(self, runnable: list[Evaluation], level: float) -> None:
        """Measure ``runnable`` (they keep the budget) beside the reference, whose window
        level is ``level``; fill each record."""

    @abc.abstractmethod
    def summary(self) -> Decision:
        """The session's design in one decision."""

    @classmethod
    def run_session(cls, ctx: RunContext, state: RunState, session: Session,
                    space: KnobSpace, evaluations: int, label: str,
                    after_eval: Callable[[PointRecord], bool] | None = None,
                    references: SessionReferences | None = None,
                    seconds: float | None = None) -> str:
        """Measure ``session`` in this design until it converges, the evaluations or
        ``seconds`` are spent, ``after_eval`` returns True, it stays idle or it stalls;
        returns why it stopped (as :func:`tuner_client.phases.session_loop.run_session`).
        Every fetch that finds several trials ready measures them in one run (up to
        :data:`MAX_BATCH`), beside the session's reference (:func:`session_reference`)."""
        reference = session_reference(ctx.measurer.in_force, label, space, references)
        return run_batched_session(ctx, state, session, space, evaluations, label,
                                   cls(ctx, state, label, space, reference), after_eval,
                                   seconds)


def session_reference(in_force: Mapping[str, str], label: str, space: KnobSpace,
                      references: SessionReferences | None) -> Reference:
    """The session's reference: the primary one of ``references``, else ``in_force``'s
    values of the space's knobs."""
    return references.primary_reference if references is not None \
        else Reference(label, {n: in_force[n] for n in space.names})


def run_batched_session(ctx: RunContext, state: RunState, session: Session,
                        space: KnobSpace, evaluations: int, label: str,
                        evals: SessionEvaluations,
                        after_eval: Callable[[PointRecord], bool] | None = None,
                        seconds: float | None = None) -> str:
    """Measure ``session`` with ``evals`` until it converges, the evaluations or ``seconds``
    are spent (no run is started that would not end within them:
    :meth:`SessionEvaluations.least_run_seconds`), ``after_eval`` returns True, it stays
    idle or it stalls; returns why it stopped (as
    :func:`tuner_client.phases.session_loop.run_session`). Every fetch that finds several
    trials ready measures them in one run (up to :data:`MAX_BATCH`)."""
    def keep(record: PointRecord) -> None:
        record_point(ctx, state, record, reference=evals.reference.settings)
    stall = Stall(len(space.names))
    deadline = None if seconds is None else time.monotonic() + seconds
    claimed, idle = 0, 0
    try:
        while True:
            if claimed >= evaluations:
                return "budget"
            if deadline is not None and \
                    time.monotonic() + evals.least_run_seconds() > deadline:
                state.decide(Decision.note(
                    f"{label}: stopped after {claimed} evaluation(s): the session's "
                    f"{seconds:g} s would not hold another run", design=evals.design,
                    reason="time"))
                return "time"
            batch = fetch_batch(session, space, label, min(MAX_BATCH, evaluations - claimed))
            if not batch:
                status = session.status()
                if status.get("converged") and not status.get("paused"):
                    return "converged"
                idle += 1
                if status.get("paused") or idle >= IDLE_FETCHES:
                    return "paused" if status.get("paused") else "idle"
                continue
            idle, claimed = 0, claimed + len(batch)
            if _measure_and_report(session, evals, batch, after_eval, keep,
                                   measurer=ctx.measurer, lease_s=ctx.pool.session_lease_s,
                                   unit=ctx.unit):
                return "stopped"
            for ev in batch:
                stall.add(ev.record)
            if stall.stalled:
                state.decide(Decision.note(f"{label}: {stall.text()}", design=evals.design,
                                           reason="stalled"))
                return "stalled"
    finally:
        if evals.runs:
            state.decide(evals.summary())


def fetch_batch(session: Session, space: KnobSpace, label: str, most: int
                ) -> list[Evaluation]:
    """The trials ready now (waiting for the first), at most ``most``."""
    batch: list[Evaluation] = []
    got = session.fetch(timeout=FETCH_WAIT_S)
    while got is not None:
        settings = space.settings(got.point)
        batch.append(Evaluation(got, settings, PointRecord(session=label, point=dict(got.point),
                                                           settings=settings)))
        got = session.fetch(timeout=0.0) if len(batch) < most else None
    return batch


def _measure_and_report(session: Session, evals: SessionEvaluations, batch: list[Evaluation],
                        after_eval: Callable[[PointRecord], bool] | None,
                        keep: Callable[[PointRecord], None], *, measurer: Measurer,
                        lease_s: float, unit: str) -> bool:
    """Measure ``batch`` holding its leases (renewed every quarter of ``lease_s``), report
    every trial, keep every record (``keep``; its settings in force over ``measurer``'s);
    True when ``after_eval`` asks to stop."""
    every = max(1.0, lease_s / 4)
    with ExitStack() as leases:
        for ev in batch:
            leases.enter_context(session.keep_lease(ev.got.trial_id, every=every))
        evals.measure(batch)
    stop = False
    for ev in batch:
        record = ev.record
        record.in_force = {**measurer.in_force, **ev.settings}
        if record.value is None:
            session.report_failure(ev.got.trial_id, record.failure or "not measured")
            logger.info("[%s] trial %d %s: failed: %s", evals.label, ev.got.trial_id,
                        ev.settings, record.failure)
        else:
            session.report(ev.got.trial_id, record.value)
            logger.info("[%s] trial %d %s: %.3f× its reference (%s) → %.4g %s",
                        evals.label, ev.got.trial_id, ev.settings, record.ratio or 0.0,
                        evals.design, record.value, unit)
        keep(record)
        if record.value is not None and after_eval is not None and after_eval(record):
            stop = True
    return stop
