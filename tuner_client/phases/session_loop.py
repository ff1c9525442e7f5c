"""The measuring loop of a search session, on every database of the run's pool at once.

Every live replica (one in a run on one database) runs the same loop, in its own thread when
there are several (and a replica on another host runs it in its own process,
:mod:`tuner_client.cli.replica_worker`): claim an evaluation of the session's budget, fetch a
trial under the replica's own client id, measure it, report, keep the record. A trial is
measured paired (one block beside the session's reference on that replica) or unpaired (one
sample per fetched trial): :mod:`tuner_client.phases.trials`.

A failure (a refused or failed apply, a failed sample) is reported as such. A replica whose
measurement fails while its database no longer answers is dropped: it leaves the session,
which hands its trial to another replica (never counted twice: the session ignores a second
report of a candidate); the run goes on with the others and says so. A replica process that
dies outright stops heartbeating and loses its lease the same way.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from harmony_base.errors import DatabaseError, HarmonyError
from tuner_client.api.client import Session
from tuner_client.config import KnobSpace, MeasureConfig
from tuner_client.measurer import PointRecord
from tuner_client.metrics.exporter import TunerMetrics
from tuner_client.phases.blocks import PairedTrials, SessionReferences
from tuner_client.phases.decisions import Decision, Kind
from tuner_client.phases.state import RunContext, RunState, record_point
from tuner_client.phases.trials import Measured, SampledTrials, Trials
from tuner_client.replicas import Replica, ReplicaPool

logger = logging.getLogger(__name__)

#: how long one fetch waits for a point (seconds) before looking at the session again
FETCH_WAIT_S = 5.0
#: fetches in a row that find nothing while no replica measures: the session is idle
IDLE_FETCHES = 3


#: how often a replica that found the budget all claimed looks again while another measures
CLAIM_WAIT_S = 0.1


@dataclass
class Shared:
    """What the replicas working on one session share (guarded by ``lock``)."""

    evaluations: int
    deadline: float | None = None
    claimed: int = 0  # evaluations started (a trial fetched) or finished
    busy: int = 0  # replicas measuring right now
    idle: int = 0
    stop: str | None = None
    #: evaluations replicas on other hosts hold or reported (they count toward the budget)
    others: Callable[[], int] | None = None
    #: called once the budget is all claimed (to stop remote replicas fetching more)
    exhausted: Callable[[], None] | None = None
    _remote: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def claim(self) -> str | None:
        """Reserve one evaluation; the reason to stop instead, if any.

        With the budget all claimed while another replica is still measuring, this waits:
        a replica whose database stops answering gives its claim back (:meth:`unclaim`), and
        its trial must go to a replica still looping, even when it was the last one."""
        while True:
            remote = self.others() if self.others is not None else 0
            with self.lock:
                if self.stop is not None:
                    return self.stop
                late = self.deadline is not None and time.monotonic() >= self.deadline
                if self.claimed + remote >= self.evaluations:
                    if self.busy == 0:
                        self._exhausted()
                        return "budget"
                    if late:
                        return "time"
                elif late:
                    return "time"
                else:
                    self.claimed += 1
                    self._remote = remote
                    return None
            time.sleep(CLAIM_WAIT_S)

    def fetched(self) -> None:
        """A claimed evaluation got its trial: when it was the last, remote replicas take no
        more (called after the fetch, so that pausing the session does not starve it)."""
        with self.lock:
            if self.claimed + self._remote >= self.evaluations:
                self._exhausted()

    def _exhausted(self) -> None:
        if self.exhausted is not None:
            self.exhausted()
            self.exhausted = None

    def unclaim(self) -> None:
        with self.lock:
            self.claimed -= 1


def run_session(ctx: RunContext, state: RunState, session: Session, space: KnobSpace,
                evaluations: int, label: str,
                after_eval: Callable[[PointRecord], bool] | None = None,
                references: SessionReferences | None = None,
                seconds: float | None = None) -> str:
    """Measure ``session`` on every live replica of the run until it converges, the
    evaluations or ``seconds`` are spent (no new evaluation starts after them), ``after_eval``
    (called with each finished record) returns True, or no replica is left. Returns why it
    stopped: ``converged``, ``idle``, ``stopped``, ``budget`` or ``time``.

    With ``references`` (``measure.paired``) each evaluation is one paired block; without,
    one point's ``measure.samples`` samples. A replicated session is paused at the end, so
    that replicas on other hosts leave it.
    """
    pool = ctx.pool
    if references is not None and references.replicated and references.pooled_level is None:
        raise DatabaseError(f"[{label}] no replica could measure the reference configuration "
                            f"{references.settings}")
    local_ids = {pool.client_id(ctx.client, r) for r in pool.replicas}
    remote = bool(ctx.config.replicas.remote)
    shared = Shared(evaluations, None if seconds is None else time.monotonic() + seconds,
                    others=(lambda: claimed_by_others(session, local_ids)) if remote else None,
                    exhausted=session.pause if remote else None)

    def keep(record: PointRecord, ask: bool) -> None:
        with pool.lock:
            record_point(ctx, state, record,
                         reference=None if references is None else references.settings)
            if ask and after_eval is not None and after_eval(record):
                with shared.lock:
                    shared.stop = "stopped"

    def work(replica: Replica) -> None:
        trials = _trials(replica, label, references, ctx.config.measure, ctx.metrics, ctx.unit)
        why = member_loop(pool.session_for(session, ctx.client, replica), trials, space, shared,
                          keep, name=pool.record_name(replica),
                          on_dead=lambda reason: _drop(state.decide, pool, replica, reason),
                          alive=replica.answers, lease_s=pool.session_lease_s)
        logger.info("[%s] replica %s stops: %s", label, replica.name, why)

    def interrupted() -> None:
        with shared.lock:
            shared.stop = "interrupted"

    try:
        pool.run_each(work, stop=interrupted)
        if remote:
            _wait_for_remote(session, pool.lease_s)
            adopt_remote(session, space, label, local_ids, ctx.measurer.in_force,
                         lambda record: record_point(ctx, state, record), state.decide)
    finally:
        pool.session_done(session)
    if not pool.live:
        raise HarmonyError(f"[{label}] every replica was dropped: "
                           + "; ".join(f"{r.name}: {r.dropped}" for r in pool.replicas))
    with shared.lock:
        if shared.stop is not None:
            return shared.stop
    if session.converged:
        return "converged"
    if shared.deadline is not None and time.monotonic() >= shared.deadline:
        return "time"
    return "budget" if shared.claimed >= evaluations else "idle"


def _trials(replica: Replica, label: str, references: SessionReferences | None,
            cfg: MeasureConfig, metrics: TunerMetrics, unit: str) -> Trials:
    """How ``replica`` measures the session's trials (``unit``: the objective's, as logged)."""
    if references is None:
        trials: Trials = SampledTrials(replica.joined(), label, cfg.samples, cfg.aggregate)
    else:
        trials = PairedTrials(replica.joined(), metrics, label, references.of(replica),
                              pooled_level=references.pooled_level)
    trials.unit = unit
    return trials


def claimed_by_others(session: Session, local_ids: set[str]) -> int:
    """Evaluations clients other than ``local_ids`` hold or reported (they count toward the
    budget): for the coordinator the replicas on other hosts, for one of those everyone
    else."""
    return sum(1 for t in session.trials()
               if t["status"] in ("leased", "done", "failed") and t["client"] not in local_ids)


def _wait_for_remote(session: Session, lease_s: float) -> None:
    """No new trial for anyone; the remote ones in flight finish (up to the lease)."""
    session.pause()
    deadline = time.monotonic() + lease_s
    while time.monotonic() < deadline and any(t["status"] == "leased"
                                              for t in session.trials()):
        time.sleep(0.5)


def adopt_remote(session: Session, space: KnobSpace, label: str, local_ids: set[str],
                 in_force: Mapping[str, str], keep: Callable[[PointRecord], None],
                 decide: Callable[[Decision], None]) -> int:
    """Keep (``keep``) the evaluations replicas on other hosts reported to ``session`` as
    records of this run (their point, normalised value and replica; the raw samples stay on
    that host; ``in_force``: the settings they leave out), so that the final rounds can pick
    among them too; returns how many."""
    adopted = 0
    for trial in session.trials():
        if trial["status"] != "done" or trial["client"] in local_ids:
            continue
        settings = space.settings(trial["point"])
        record = PointRecord(session=label, point=dict(trial["point"]), settings=settings,
                             in_force={**in_force, **settings},
                             value=float(trial["value"]), replica=str(trial["client"]))
        keep(record)
        adopted += 1
    if adopted:
        decide(Decision.of(label, Kind.REPLICAS, step="adopted", count=adopted))
    return adopted


def _drop(decide: Callable[[Decision], None], pool: ReplicaPool, replica: Replica,
          reason: str) -> None:
    """Take a dead replica out of the run and record it (``decide``)."""
    left = pool.drop(replica, reason)
    if left is not None:
        decide(Decision.of("replicas", Kind.REPLICAS, step="dropped",
                                 labels=(replica.name, *left), reason=reason))


def member_loop(session: Session, trials: Trials, space: KnobSpace, shared: Shared,
                keep: Callable[[PointRecord, bool], None], *, name: str | None,
                on_dead: Callable[[str], None], alive: Callable[[], bool],
                lease_s: float) -> str:
    """One replica's loop on one session (see the module docstring); ``name`` goes into its
    records (None in a pool of one); ``keep(record, ask)`` keeps each finished record
    (``ask``: whether the session's ``after_eval`` sees it). Returns why it ended."""
    label = trials.label
    while True:
        claimed = not trials.midway  # the next sample of a point started needs no claim
        if claimed:
            why = shared.claim()
            if why is not None:
                return why
        try:
            got = session.fetch(timeout=FETCH_WAIT_S)
        except HarmonyError:
            if claimed:
                shared.unclaim()
            raise
        if got is None:
            if claimed:
                shared.unclaim()
            status = session.status()
            if status.get("converged") and not status.get("paused"):
                return "converged"
            if status.get("paused"):
                return "paused"
            with shared.lock:
                shared.idle = shared.idle + 1 if shared.busy == 0 else 0
                if shared.idle >= IDLE_FETCHES:
                    return "idle"
            continue
        shared.fetched()
        with shared.lock:
            shared.busy += 1
            shared.idle = 0
        try:
            settings = space.settings(got.point)
            try:
                with session.keep_lease(got.trial_id, every=max(1.0, lease_s / 4)):
                    measured = trials.measure(got.point, settings)
            except (HarmonyError, OSError) as exc:
                measured = Measured(None, f"{type(exc).__name__}: {exc}")
            failure = measured.failure
            if failure is not None and not failure.startswith("infeasible") and not alive():
                reason = (f"its database stopped answering while measuring trial "
                          f"{got.trial_id} ({failure}); the trial goes back to the session")
                logger.warning("[%s] replica %s: %s", label, name, reason)
                shared.unclaim()
                session.leave()
                on_dead(reason)
                return "dropped"
            if measured.value is None:
                session.report_failure(got.trial_id, failure or "not measured")
            else:
                session.report(got.trial_id, measured.value)
            record = measured.record
            if record is None:
                continue
            record.replica = name
            logger.info("[%s] %strial %d %s: %s", label, f"{name} " if name else "",
                        got.trial_id, settings, _outcome(record, trials.unit))
            keep(record, measured.ask)
        finally:
            with shared.lock:
                shared.busy -= 1


def _outcome(record: PointRecord, unit: str) -> str:
    """How a finished evaluation is logged."""
    if record.value is None:
        return f"failed: {record.failure}"
    if record.ratio is not None:
        return f"{record.ratio:.3f}× its reference → {record.value:.4g} {unit}"
    return f"{record.value:.4g} {unit}"

