"""One search session measured on several replicas at once, with per-replica normalisation.

Every live replica runs the same loop in its own thread (and a replica on another host runs
it in its own process, :mod:`tuner_client.replica_worker`): fetch a trial from the session
under the replica's own client id, measure it in a paired block beside the session's
reference *on that replica* (:func:`tuner_client.phases.blocks.measure_block`), report.
The strategy is told ``ratio × pooled level``: the candidate's ratio to its own replica's
reference in the same block (so a slower or drifting replica cancels out) times one level
for the whole session (the geometric mean of the replicas' first reference measurements,
published in the session's metadata so that remote replicas scale by the same number).

A replica whose measurement fails while its database no longer answers is dropped: it leaves
the session, which hands its trial to another replica (never counted twice: the session
ignores a second report of a candidate); the run goes on with the others and says so. A
replica process that dies outright stops heartbeating and loses its lease the same way.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harmony.base.errors import HarmonyError
from tuner_client.client import HarmonyClient, Session
from tuner_client.config import KnobSpace
from tuner_client.measurer import PointRecord
from tuner_client.phases.blocks import Reference, measure_block, measure_reference
from tuner_client.phases.state import RunContext, RunState

if TYPE_CHECKING:
    from tuner_client.replicas import Replica, ReplicaPool

logger = logging.getLogger(__name__)

#: how long one fetch waits for a point (seconds) before looking at the session again
FETCH_WAIT_S = 5.0
#: fetches in a row that find nothing while no replica measures: the session is idle
IDLE_FETCHES = 3
#: the metadata key of a replicated session: pooled level, reference settings, lease
METADATA_KEY = "replicas"


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
        """Reserve one evaluation; the reason to stop instead, if any."""
        remote = self.others() if self.others is not None else 0
        with self.lock:
            if self.stop is not None:
                return self.stop
            if self.claimed + remote >= self.evaluations:
                self._exhausted()
                return "budget"
            if self.deadline is not None and time.monotonic() >= self.deadline:
                return "time"
            self.claimed += 1
            self._remote = remote
            return None

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


def pooled_level(levels: list[float]) -> float | None:
    """The geometric mean of the replicas' reference levels (None without one)."""
    good = [v for v in levels if v is not None and math.isfinite(v) and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in good)) if good else None


def open_references(pool: ReplicaPool, label: str, settings: Mapping[str, str]
                    ) -> tuple[dict[str, Reference], float | None]:
    """Measure the reference once on every live replica, in parallel: each replica's
    :class:`Reference` (the value opens its first block) and the pooled level."""
    refs = {r.name: Reference(f"{label}@{r.name}", dict(settings)) for r in pool.live}

    def first(replica: Replica) -> None:
        assert replica.ctx is not None
        try:
            value = measure_reference(replica.ctx, refs[replica.name])
        except (HarmonyError, OSError) as exc:
            logger.warning("replica %s: reference measurement failed: %s", replica.name, exc)
            value = None
        refs[replica.name].last = value
        refs[replica.name].level.add(value)

    _in_threads(pool.live, first)
    return refs, pooled_level([v for r in refs.values() if (v := r.last) is not None])


def replicated_metadata(level: float | None, settings: Mapping[str, str],
                        in_force: Mapping[str, str], pool: ReplicaPool) -> dict[str, Any]:
    """The session metadata that lets any replica (local or remote) join and scale the same
    way: the pooled level, the reference, the coordinator's settings in force, the lease."""
    return {"pooled_level": level, "reference": dict(settings), "in_force": dict(in_force),
            "lease_s": pool.lease_s, "replicas": [r.name for r in pool.live]}


def run_parallel(ctx: RunContext, state: RunState, session: Session, space: KnobSpace,
                 evaluations: int, label: str,
                 after_eval: Callable[[PointRecord], bool] | None,
                 refs: dict[str, Reference], level: float, seconds: float | None) -> str:
    """Measure the session on every live replica of ``ctx.pool`` until it converges, the
    evaluations or ``seconds`` are spent, ``after_eval`` stops it or no replica is left.
    Returns why it stopped, as :func:`tuner_client.phases.measuring.run_session` does."""
    from tuner_client.phases.measuring import record_point

    pool = ctx.pool
    assert pool is not None
    local_ids = {replica_client(ctx.client, r.name).client_id for r in pool.replicas}

    def remote_claimed() -> int:
        return sum(1 for t in session.trials()
                   if t["status"] in ("leased", "done", "failed")
                   and t["client"] not in local_ids)

    remote = bool(ctx.config.replicas.remote)
    shared = Shared(evaluations, None if seconds is None else time.monotonic() + seconds,
                    others=remote_claimed if remote else None,
                    exhausted=session.pause if remote else None)

    def keep(record: PointRecord) -> None:
        with pool.lock:
            record_point(ctx, state, record)
            if after_eval is not None and after_eval(record):
                with shared.lock:
                    shared.stop = "stopped"

    def work(replica: Replica) -> None:
        assert replica.ctx is not None
        client = replica_client(ctx.client, replica.name)
        mine = client.join(session.name)
        ref = refs.get(replica.name) or Reference(f"{label}@{replica.name}",
                                                  dict(next(iter(refs.values())).settings))
        why = measure_loop(replica.ctx, mine, replica.name, space, label, ref, level, shared,
                           keep,
                           on_dead=lambda reason: pool.drop(replica, reason, state),
                           alive=replica.answers, lease_s=pool.lease_s)
        logger.info("[%s] replica %s stops: %s", label, replica.name, why)

    def interrupted() -> None:
        with shared.lock:
            shared.stop = "interrupted"

    _in_threads(pool.live, work, stop=interrupted, grace_s=pool.lease_s)
    if ctx.config.replicas.remote:
        session.pause()  # no new trial for anyone; the remote ones in flight finish
        deadline = time.monotonic() + pool.lease_s
        while time.monotonic() < deadline and any(t["status"] == "leased"
                                                  for t in session.trials()):
            time.sleep(0.5)
        adopt_remote(ctx, state, session, space, label, local_ids)
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


def adopt_remote(ctx: RunContext, state: RunState, session: Session, space: KnobSpace,
                 label: str, local_ids: set[str]) -> int:
    """Keep the evaluations replicas on other hosts reported to ``session`` as records of
    this run (their point, normalised value and replica; the raw samples stay on that host),
    so that the final rounds can pick among them too; returns how many."""
    from tuner_client.phases.measuring import record_point

    adopted = 0
    for trial in session.trials():
        if trial["status"] != "done" or trial["client"] in local_ids:
            continue
        settings = space.settings(trial["point"])
        record = PointRecord(session=label, point=dict(trial["point"]), settings=settings,
                             in_force={**ctx.measurer.in_force, **settings},
                             value=float(trial["value"]), replica=str(trial["client"]))
        record_point(ctx, state, record)
        adopted += 1
    if adopted:
        state.decide(f"{label}: {adopted} evaluation(s) reported by replicas on other hosts")
    return adopted


def measure_loop(rctx: RunContext, session: Session, name: str, space: KnobSpace, label: str,
                 ref: Reference, level: float, shared: Shared,
                 keep: Callable[[PointRecord], None], *, on_dead: Callable[[str], None],
                 alive: Callable[[], bool], lease_s: float) -> str:
    """Replica ``name``'s loop on one session (see the module docstring); returns why it
    ended."""
    while True:
        why = shared.claim()
        if why is not None:
            return why
        try:
            got = session.fetch(timeout=FETCH_WAIT_S)
        except HarmonyError:
            shared.unclaim()
            raise
        if got is None:
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
            failure: str | None = None
            try:
                with session.keep_lease(got.trial_id, every=max(1.0, lease_s / 4)):
                    record = measure_block(rctx, ref, label, got.point, settings)
                failure = record.failure
            except (HarmonyError, OSError) as exc:
                record, failure = None, f"{type(exc).__name__}: {exc}"
            if failure is not None and not failure.startswith("infeasible") and not alive():
                reason = (f"its database stopped answering while measuring trial "
                          f"{got.trial_id} ({failure}); the trial goes back to the session")
                logger.warning("[%s] replica %s: %s", label, name, reason)
                shared.unclaim()
                session.leave()
                on_dead(reason)
                return "dropped"
            if record is None:
                session.report_failure(got.trial_id, failure or "not measured")
                continue
            record.replica = name
            if record.ratio is not None:
                record.value = record.ratio * level
            if record.value is None:
                session.report_failure(got.trial_id, record.failure or "not measured")
            else:
                session.report(got.trial_id, record.value)
            logger.info("[%s] %s trial %d %s: %s", label, name, got.trial_id, settings,
                        f"{record.ratio:.3f}× its reference → {record.value:.1f}"
                        if record.ratio is not None and record.value is not None
                        else f"failed: {record.failure}")
            keep(record)
        finally:
            with shared.lock:
                shared.busy -= 1


def replica_client(client: HarmonyClient, replica: str) -> HarmonyClient:
    """A client on the same connection under the replica's own client id."""
    return client.as_client(f"{client.client_id}-{replica}")


def _in_threads(replicas: list[Replica], target: Callable[[Replica], None], *,
                stop: Callable[[], None] | None = None, grace_s: float = 120.0) -> None:
    """Run ``target(replica)`` for every replica at once; re-raise the first error.

    Interrupted (Ctrl-C, SIGTERM), it calls ``stop`` and waits up to ``grace_s`` for the
    threads to finish their measurement, so that no replica applies a candidate after the
    run has restored its configuration.
    """
    errors: list[BaseException] = []

    def run(replica: Replica) -> None:
        try:
            target(replica)
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,), name=f"harmony-replica-{r.name}",
                                daemon=True) for r in replicas]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        if stop is not None:
            stop()
        deadline = time.monotonic() + grace_s
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
        raise
    if errors:
        raise errors[0]
