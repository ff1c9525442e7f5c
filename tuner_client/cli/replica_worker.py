"""A replica on another host: ``harmony tune CONFIG --server URL --replica NAME``.

The coordinator (the ``harmony tune`` run without ``--replica``) owns the flow: it opens the
sessions, runs screening and the final rounds, and decides. A replica worker only measures:
it waits for a replicated session of the same tuner name on the server (one whose metadata
carries the pooled level, the reference and the settings in force on the coordinator), joins
it under the client id ``NAME``, puts the coordinator's settings in force on its own database,
and runs the same loop as a local replica (:func:`tuner_client.phases.session_loop.member_loop`)
until the coordinator pauses the session (it does at the end of each session) or the search
converges; then it looks for the next one. It stops after ``idle_s`` seconds without a
session to join, and always leaves its database with the original configuration. A worker
restarted under a ``NAME`` that already joined a session cannot prove it is that client (the
secret died with the old process): it joins that session as ``NAME-<random>``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harmony_base.errors import ClientExistsError, ConfigError, DatabaseError
from harmony_base.jsontypes import JSONObject
from tuner_client.api.client import HarmonyClient, Session, connect
from tuner_client.config import KnobSpace, TunerConfig
from tuner_client.crashsafe.run import RunSafety, config_key
from tuner_client.measurer import PointRecord
from tuner_client.metrics.exporter import TunerMetrics
from tuner_client.phases.blocks import METADATA_KEY, PairedTrials, Reference
from tuner_client.phases.prepare import leave_server, prepare
from tuner_client.phases.session_loop import Shared, claimed_by_others, member_loop
from tuner_client.phases.state import RunContext
from tuner_client.servers.target import Target, open_target

logger = logging.getLogger(__name__)

#: how often the worker looks for a session to join (seconds)
POLL_S = 2.0


def run_replica(config: TunerConfig, *, server: str, replica: str, state_dir: Path | None = None,
                idle_s: float = 600.0, client: HarmonyClient | None = None,
                target: Target | None = None, stop: threading.Event | None = None) -> int:
    """Measure for the coordinator's replicated sessions on ``server`` as replica
    ``replica`` (on ``target``, default the config's database) until ``idle_s`` pass
    without a session to join or ``stop`` is set; returns how many evaluations this replica
    reported."""
    stop = stop or threading.Event()
    if not server:
        raise ConfigError("--replica joins a run hosted on a Harmony server: give --server URL "
                          "(or HARMONY_SERVER)")
    # each member of a replicated run keeps its own restore journal and guard
    safety = RunSafety(config, f"replica-{replica}")
    safety.recover_leftovers(config_key(config, state_dir))
    own_target = target is None
    target = target or open_target(config, state_dir)
    own_client = client is None
    client = client or connect(server, client_id=replica)
    metrics = TunerMetrics([k.name for k in config.knob_specs()], tuner=config.name)
    ctx: RunContext | None = None
    reported = 0
    restored = True
    try:
        safety.protect(target)
        ctx = prepare(config, run_id=f"replica-{replica}", client=client, target=target,
                      metrics=metrics, priors=[])
        finished: set[str] = set()
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < idle_s and not stop.is_set():
            found = _next_session(client, config.name, finished)
            if found is None:
                stop.wait(POLL_S)
                continue
            name, definition = found
            reported += _work_on(ctx, client, replica, name, definition)
            finished.add(name)
            quiet_since = time.monotonic()
        logger.info("replica %s: no session to join for %.0f s; %d evaluations reported",
                    replica, idle_s, reported)
        return reported
    finally:
        if ctx is not None:
            restored = leave_server(ctx, None, keep_best=False)
        safety.finish(restored)
        if own_client:
            client.close()
        if own_target:
            target.close()


def _next_session(client: HarmonyClient, tuner: str, finished: set[str]
                  ) -> tuple[str, JSONObject] | None:
    """A running replicated session of ``tuner`` not worked on yet, with its definition."""
    for summary in client.list_sessions():
        if summary["name"] in finished or summary["status"] != "running":
            continue
        definition = client.describe(summary["name"])["definition"]
        metadata = definition.get("metadata") or {}
        if metadata.get("tuner") == tuner and METADATA_KEY in metadata:
            return summary["name"], definition
    return None


def _work_on(ctx: RunContext, client: HarmonyClient, replica: str, name: str,
             definition: Mapping[str, Any]) -> int:
    """Measure session ``name`` until the coordinator pauses it or it converges."""
    meta = definition["metadata"]
    info = meta[METADATA_KEY]
    label = str(meta.get("session", name))
    level = info.get("pooled_level")
    if level is None:
        logger.warning("session %s has no pooled level; not joining it", name)
        return 0
    names = [p["name"] for p in definition["parameters"]]
    space = _subspace(ctx, names)
    # the coordinator's settings in force (e.g. the offline best during the online pass)
    outcome = ctx.apply(dict(info.get("in_force") or {}), check_budget=False)
    if outcome.failure is not None:
        raise DatabaseError(f"replica {replica}: cannot put the coordinator's settings in "
                            f"force: {outcome.failure}")
    session = _join_as(client, replica, name)
    ref = Reference(f"{label}@{replica}", dict(info["reference"]))
    # the session's budget counts every client's trials: claim none once all are taken (the
    # coordinator pauses the session then; until it does, a trial given back is claimable)
    budget = info.get("evaluations")
    shared = Shared(evaluations=int(budget) if budget else 10**9,
                    others=lambda: claimed_by_others(session, {session.client_id}))
    records: list[PointRecord] = []
    logger.info("replica %s joins session %s (%s), pooled level %.1f", replica, name, names,
                level)
    dead: list[str] = []
    trials = PairedTrials(ctx.measurer, ctx.metrics, label, ref, pooled_level=float(level))
    lease_s = float(info.get("lease_s", 120))
    waiting_since: float | None = None
    while True:
        why = member_loop(session, trials, space, shared,
                          lambda record, _ask: records.append(record), name=replica,
                          on_dead=dead.append, alive=ctx.pool.primary.answers,
                          lease_s=lease_s)
        if dead:
            raise DatabaseError(f"replica {replica}: {dead[0]}")
        if why in ("paused", "converged"):
            break
        if why == "budget":
            # wait for the coordinator's pause (a trial given back is claimed meanwhile), but
            # not past a lease: the coordinator may be gone
            status = session.status()
            waiting_since = waiting_since or time.monotonic()
            if status.get("paused") or status.get("converged") \
                    or time.monotonic() - waiting_since > lease_s:
                break
            time.sleep(POLL_S)
        else:
            waiting_since = None
    logger.info("replica %s leaves session %s (%s) after %d evaluations", replica, name, why,
                len(records))
    return len(records)


def _subspace(ctx: RunContext, names: list[str]) -> KnobSpace:
    """The knobs of a session's space (the online or the offline ones, in its order)."""
    params = {p.name: p for p in (*ctx.offline_space.params, *ctx.online_space.params)}
    missing = [n for n in names if n not in params]
    if missing:
        raise ConfigError(f"the session tunes {missing}, which this replica's config does not "
                          f"list; give every replica the coordinator's config")
    return KnobSpace(tuple(params[n] for n in names))



def _join_as(client: HarmonyClient, replica: str, name: str) -> Session:
    """Join ``name`` as ``replica``, or under a fresh id when an earlier process of this
    replica joined it (its id is taken and only that process held the secret)."""
    try:
        return client.join(name)
    except ClientExistsError:
        fresh = f"{replica}-{uuid.uuid4().hex[:6]}"
        logger.warning("replica %s: session %s was joined under this name by an earlier "
                       "process; joining it as %s", replica, name, fresh)
        return client.as_client(fresh).join(name)
