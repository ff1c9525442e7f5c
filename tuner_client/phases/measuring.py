"""The measuring loop: one trial's path from the session to the server and back.

fetch a point from the session → apply it (:meth:`Measurer.apply`: ALTER SYSTEM + reload, or
a restart) → take one throughput sample (:meth:`Measurer.sample`) → report it to the session,
whose ``agg`` plugin asks for the same point ``measure.samples`` times and whose strategy
then moves on. A failure (a refused or failed apply, a failed sample) is reported as such.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable

from harmony.base.errors import DatabaseError, HarmonyError
from tuner_client.client import Session
from tuner_client.config import KnobSpace
from tuner_client.measurer import PointRecord, aggregate
from tuner_client.phases.blocks import Reference, measure_block
from tuner_client.phases.parallel import open_references, run_parallel
from tuner_client.phases.state import RunContext, RunState

logger = logging.getLogger(__name__)

#: how long one fetch waits for a point before the session is considered idle (seconds)
FETCH_TIMEOUT_S = 10.0


def run_session(ctx: RunContext, state: RunState, session: Session, space: KnobSpace,
                evaluations: int, label: str,
                after_eval: Callable[[PointRecord], bool] | None = None,
                reference: Reference | None = None, seconds: float | None = None) -> str:
    """Fetch, measure, report until converged, out of evaluations (or of ``seconds``: no new
    point starts after them), or stopped by ``after_eval`` (called with each finished record;
    True stops). Returns why it stopped: ``converged``, ``idle``, ``stopped``, ``budget`` or
    ``time``.

    With a ``reference`` each evaluation is one paired block (:mod:`.blocks`) reported as
    one value; without, each fetched trial is one sample and the session's ``agg`` plugin
    asks for ``measure.samples`` of them.
    """
    if ctx.pool is not None and reference is not None:
        return _run_on_replicas(ctx, state, session, space, evaluations, label, after_eval,
                                reference, seconds)
    measurer, samples = ctx.measurer, ctx.config.measure.samples
    done = 0
    current: PointRecord | None = None
    idle = 0
    started = time.monotonic()
    while done < evaluations:
        if seconds is not None and current is None and time.monotonic() - started >= seconds:
            logger.info("[%s] time budget of %.0f s spent after %d evaluations", label, seconds,
                        done)
            return "time"
        got = session.fetch(timeout=FETCH_TIMEOUT_S)
        if got is None:
            if session.converged:
                logger.info("[%s] converged after %d evaluations", label, done)
                return "converged"
            idle += 1
            if idle >= 3:
                logger.warning("[%s] no point to measure after %d tries; ending the session",
                               label, idle)
                return "idle"
            continue
        idle = 0
        settings = space.settings(got.point)
        if reference is not None:
            record = measure_block(ctx, reference, label, got.point, settings)
            if record.value is None:
                session.report_failure(got.trial_id, record.failure or "not measured")
            else:
                session.report(got.trial_id, record.value)
            done += 1
            best = state.best.value if state.best is not None else None
            logger.info("[%s] eval %d/%d %s: %s (best so far %s)", label, done, evaluations,
                        settings, f"{record.ratio:.3f}× the reference = {record.value:.1f}"
                        if record.value is not None and record.ratio is not None
                        else f"failed: {record.failure}",
                        f"{best:.1f}" if best is not None else "none")
            record_point(ctx, state, record)
            if after_eval is not None and after_eval(record):
                return "stopped"
            continue
        if current is None or current.point != got.point or len(current.samples) >= samples:
            current = PointRecord(session=label, point=dict(got.point), settings=settings)
            outcome = measurer.apply(settings)
            current.restart_s, current.apply_s = outcome.restart_s, outcome.apply_s
            current.in_force = dict(measurer.in_force)
            if outcome.failure is not None:
                current.failure = outcome.failure
                session.report_failure(got.trial_id, outcome.failure)
                logger.info("[%s] eval %d/%d %s failed: %s", label, done + 1, evaluations,
                            settings, outcome.failure)
                done += 1
                record_point(ctx, state, current)
                current = None
                continue
        try:
            sample = measurer.sample()
        except HarmonyError as exc:
            current.failure = f"sampling failed: {exc}"
            session.report_failure(got.trial_id, current.failure)
            logger.warning("[%s] %s: %s", label, settings, current.failure)
            done += 1
            record_point(ctx, state, current)
            current = None
            continue
        current.samples.append(sample)
        session.report(got.trial_id, sample.qpm)
        best = state.best.value if state.best is not None else None
        logger.info("[%s] eval %d/%d %s sample %d/%d: %.1f qpm (best so far %s)", label,
                    done + 1, evaluations, settings, len(current.samples), samples,
                    sample.qpm, f"{best:.1f} qpm" if best is not None else "none")
        if len(current.samples) >= samples:
            if _no_block_counts(current):
                current.window = measurer.point_window()
            current.value = aggregate([s.qpm for s in current.samples],
                                      ctx.config.measure.aggregate)
            done += 1
            record_point(ctx, state, current)
            finished, current = current, None
            if after_eval is not None and after_eval(finished):
                return "stopped"
    return "budget"


def _run_on_replicas(ctx: RunContext, state: RunState, session: Session, space: KnobSpace,
                     evaluations: int, label: str,
                     after_eval: Callable[[PointRecord], bool] | None, reference: Reference,
                     seconds: float | None) -> str:
    """:func:`run_session` over every replica of the run (:mod:`.parallel`); the session is
    paused afterwards so that replicas on other hosts leave it."""
    pool = ctx.pool
    assert pool is not None
    refs, level = pool.opened.pop(label, (None, None))
    if refs is None:
        refs, level = open_references(pool, label, reference.settings)
    if level is None:
        raise DatabaseError(f"[{label}] no replica could measure the reference configuration "
                            f"{reference.settings}")
    try:
        return run_parallel(ctx, state, session, space, evaluations, label, after_eval, refs,
                            level, seconds)
    finally:
        with contextlib.suppress(HarmonyError):
            session.pause()


def record_point(ctx: RunContext, state: RunState, record: PointRecord, *,
                 kind: str | None = None, ranks: bool = True) -> None:
    """Keep a finished record: the log, the metrics, and (when ``ranks``) the best so far."""
    state.records.append(record)
    ctx.metrics.record_point(record, kind=kind or evaluation_kind(record.session),
                             restarts=False)
    ctx.in_force_changed()
    if ranks and record.value is not None and (state.best is None
                                               or record.value > (state.best.value or 0.0)):
        state.best = record
        logger.info("new best: %.1f qpm with %s", record.value, record.in_force)
    if ranks and state.on_record is not None:
        state.on_record(record)
    if state.on_measured is not None:
        state.on_measured(record)


def evaluation_kind(label: str) -> str:
    """The metrics' evaluation kind of a record's session label."""
    if label.startswith("final-default"):
        return "baseline"
    if label.startswith("final"):
        return "final"
    return "offline" if "offline" in label else "online"


def _no_block_counts(record: PointRecord) -> bool:
    """True when the samples' counters show no block access (not flushed yet)."""
    total = record.stats_total()
    return total is None or total.blks_hit + total.blks_read == 0
