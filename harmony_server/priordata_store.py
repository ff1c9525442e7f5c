"""Prior data in and out of the server's store: the store side of :mod:`harmony_core.priordata`.

Only the server (and its CLI) opens the store; clients get prior data over the HTTP API
(``GET /priors``, ``GET /priors/{name}``) or from exported files. Imported sessions are
stored with status ``imported``: the server never replays them (they have no command log),
but they are there for reports and warm starts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace

import sqlalchemy as sa

from harmony_base.errors import ConfigError, HarmonyError, SessionNotFoundError
from harmony_base.jsontypes import JSONObject
from harmony_base.trial import SessionStatus
from harmony_core.definition import SessionDefinition
from harmony_core.priordata import PriorSession
from harmony_server.hosted import HostedSession
from harmony_server.store import Store, StoredSession, StoreError, sessions

__all__ = ["IMPORTED", "import_into_store", "list_store_sessions", "prior_from_store",
           "priors_from_store", "store_session_summaries"]

logger = logging.getLogger(__name__)

#: the status of a session row created by an import
IMPORTED = SessionStatus.IMPORTED


def prior_from_store(store: Store, name: str, *,
                     status: SessionStatus | None = None) -> PriorSession:
    """One session of the store (live, closed or imported) as prior data; a live session's
    status is ``status`` if given (a hosted session's own), else its replayed state (running,
    converged or paused)."""
    stored = store.get_session(name)
    if stored is None:
        raise SessionNotFoundError(f"the store {store._safe_url()} has no session named {name!r}; "
                                   f"known: {list_store_sessions(store)[:20]}")
    return PriorSession(
        name=stored.name, definition=dict(stored.definition), created=stored.created,
        trials=store.trials(name),
        hosts=store.clients(name),
        status=status if status is not None else
        _replayed_status(store, stored) if stored.status is SessionStatus.LIVE else stored.status)


def _replayed_status(store: Store, stored: StoredSession) -> SessionStatus:
    """A live row's real state (``running``, ``converged``, ``paused``): the store keeps only
    "live", so replay the command log the way the server recovers it; "live" if that fails."""
    # the server's own recovery
    try:
        definition = SessionDefinition.from_dict(stored.definition,
                                                 source=f"stored session {stored.name!r}")
        hosted = HostedSession.recover(definition, store, created=stored.created)
    except (HarmonyError, KeyError, TypeError, ValueError) as exc:
        logger.warning("session %s: cannot replay its log for its status (%s); shown as live",
                       stored.name, exc)
        return stored.status
    try:
        return hosted.status()
    finally:
        hosted.close()


def list_store_sessions(store: Store) -> list[str]:
    """Names of every session row in the store, whatever its status, oldest first."""
    try:
        with store.engine.connect() as conn:
            rows = conn.execute(sa.select(sessions.c.name)
                                .order_by(sessions.c.created, sessions.c.name))
            return [r.name for r in rows]
    except sa.exc.SQLAlchemyError as exc:
        raise ConfigError(f"cannot list the sessions of {store._safe_url()}: {exc}") from None


def store_session_summaries(store: Store) -> list[JSONObject]:
    """Name, stored status (live, closed, imported) and creation time of every session row,
    oldest first: what ``GET /priors`` lists."""
    try:
        with store.engine.connect() as conn:
            rows = conn.execute(sa.select(sessions.c.name, sessions.c.status, sessions.c.created)
                                .order_by(sessions.c.created, sessions.c.name))
            return [{"name": r.name, "status": r.status, "created": r.created} for r in rows]
    except sa.exc.SQLAlchemyError as exc:
        raise StoreError(f"cannot list the sessions of {store._safe_url()}: {exc}") from None


def priors_from_store(store: Store, *, exclude: Iterable[str] = ()) -> list[PriorSession]:
    """Every session of the store that has at least one trial, as prior data."""
    skip = set(exclude)
    out = []
    for name in list_store_sessions(store):
        if name in skip:
            continue
        prior = prior_from_store(store, name)
        if prior.trials:
            out.append(prior)
    return out


def import_into_store(store: Store, prior: PriorSession, *, name: str | None = None) -> str:
    """Store ``prior`` (under ``name`` if given) as an ``imported`` session; returns the name.

    The definition's ``name`` follows the new name, so the stored definition stays valid.
    """
    target = name or prior.name
    definition = {**prior.definition, "name": target}
    if store.get_session(target) is not None:
        raise ConfigError(f"the store already has a session named {target!r}; import it under "
                          f"another name (--rename)")
    trial_rows = list(prior.trials)
    # the store needs a join time: an unknown one is stored as 0 (the epoch)
    client_rows = [h if h.joined is not None else replace(h, joined=0.0) for h in prior.hosts]
    created = prior.created if prior.created is not None else 0.0
    try:
        with store.engine.begin() as conn:
            conn.execute(sessions.insert().values(name=target, definition=definition,
                                                  created=created, status=IMPORTED))
    except sa.exc.SQLAlchemyError as exc:
        raise ConfigError(f"cannot store session {target!r}: {exc}") from None
    store.write(target, [], trial_rows, client_rows)
    logger.info("imported session %s (%d trials, %d hosts)", target, len(trial_rows),
                len(client_rows))
    return target

