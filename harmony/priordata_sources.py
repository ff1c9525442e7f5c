"""Where prior data comes from and goes to: the server's store, a running server, a core.

The pure formats live in :mod:`harmony.priordata`; this module does the I/O. Imported
sessions are stored with status ``imported``: the server never replays them (they have no
command log), but they are there for reports and warm starts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

import sqlalchemy as sa

from harmony.errors import ConfigError, SessionNotFoundError
from harmony.priordata import HostInfo, PriorSession, PriorTrial
from harmony_server.store import ClientRow, Store, TrialRow, sessions

__all__ = ["IMPORTED", "import_into_store", "list_store_sessions", "prior_from_core",
           "prior_from_server", "prior_from_store", "priors_from_store"]

logger = logging.getLogger(__name__)

#: the status of a session row created by an import
IMPORTED = "imported"


def prior_from_store(store: Store, name: str) -> PriorSession:
    """One session of the store (live, closed or imported) as prior data."""
    stored = store.get_session(name)
    if stored is None:
        raise SessionNotFoundError(f"the store {store._safe_url()} has no session named {name!r}; "
                                   f"known: {list_store_sessions(store)[:20]}")
    return PriorSession(
        name=stored.name, definition=dict(stored.definition), created=stored.created,
        trials=[_trial_from_row(r) for r in store.trials(name)],
        hosts=[HostInfo(c.client_id, c.joined, c.hostname, c.cpu_count, c.ram_bytes, c.os,
                        c.python, c.left) for c in store.clients(name)],
        status=stored.status)


def list_store_sessions(store: Store) -> list[str]:
    """Names of every session row in the store, whatever its status, oldest first."""
    try:
        with store.engine.connect() as conn:
            rows = conn.execute(sa.select(sessions.c.name)
                                .order_by(sessions.c.created, sessions.c.name))
            return [r.name for r in rows]
    except sa.exc.SQLAlchemyError as exc:
        raise ConfigError(f"cannot list the sessions of {store._safe_url()}: {exc}") from None


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
    trial_rows = [TrialRow(t.id, t.candidate, dict(t.point), t.client, t.status, t.value,
                           t.failure, t.leased_at, t.reported_at) for t in prior.trials]
    client_rows = [ClientRow(h.client_id, h.joined if h.joined is not None else 0.0, h.hostname,
                             h.cpu_count, h.ram_bytes, h.os, h.python, h.left)
                   for h in prior.hosts]
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


def prior_from_server(url: str, name: str, *, token: str | None = None) -> PriorSession:
    """A session of a running server as prior data (hosts: the clients seen in its trials).

    Read-only: it does not join the session.
    """
    from tuner_client.client import HttpBackend

    backend = HttpBackend(url, token=token, retry_seconds=5.0)
    try:
        path = f"/sessions/{quote(name, safe='')}"
        described = backend.request("GET", path)
        rows = backend.request("GET", path + "/trials")["trials"]
    finally:
        backend.close()
    hosts = described.get("hosts")
    if isinstance(hosts, list):
        host_info = [HostInfo(str(h["client_id"]), h.get("joined"), h.get("hostname"),
                              h.get("cpu_count"), h.get("ram_bytes"), h.get("os"),
                              h.get("python"), h.get("left"))
                     for h in hosts if isinstance(h, Mapping) and h.get("client_id")]
    else:
        seen = dict.fromkeys(r.get("client") for r in rows if r.get("client"))
        host_info = [HostInfo(client_id=c) for c in seen]  # type: ignore[arg-type]
    return PriorSession(name=described.get("name", name), definition=described["definition"],
                        created=described.get("created"),
                        trials=[_trial_from_dict(r) for r in rows], hosts=host_info,
                        status=described.get("status", "live"))


def priors_from_server(url: str, *, token: str | None = None,
                       exclude: Iterable[str] = ()) -> list[PriorSession]:
    """Every session of a running server as prior data (read-only, over HTTP)."""
    from tuner_client.client import HttpBackend

    backend = HttpBackend(url, token=token, retry_seconds=5.0)
    try:
        names = [s["name"] for s in backend.request("GET", "/sessions")["sessions"]]
    finally:
        backend.close()
    skip = set(exclude)
    return [prior_from_server(url, name, token=token) for name in names if name not in skip]


def prior_from_core(core: Any, *, created: float | None = None,
                    hosts: Iterable[HostInfo] = ()) -> PriorSession:
    """A :class:`~harmony.session.SessionCore` (standalone mode) as prior data (no times)."""
    return PriorSession(name=core.name, definition=core.definition.to_dict(), created=created,
                        trials=[_trial_from_dict(r.to_dict()) for r in core.trials()],
                        hosts=list(hosts), status="live")


def _trial_from_row(r: TrialRow) -> PriorTrial:
    return PriorTrial(r.id, r.candidate, dict(r.point), r.client, r.status, r.value, r.failure,
                      r.leased_at, r.reported_at)


def _trial_from_dict(r: Mapping[str, Any]) -> PriorTrial:
    return PriorTrial(int(r["id"]), int(r["candidate"]), dict(r["point"]), r.get("client"),
                      str(r["status"]), r.get("value"), r.get("failure"), r.get("leased_at"),
                      r.get("reported_at"))
