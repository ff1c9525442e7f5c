"""Where the client and the shared core get prior data: a running server, or a session core.

The pure formats live in :mod:`harmony.priordata`. A server is read over its HTTP API
(``GET /priors`` and ``GET /priors/{name}``: every session of its store, live, closed or
imported); the store itself is opened only by the server's side,
:mod:`harmony_server.priordata_store`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

from harmony.priordata import HostInfo, PriorSession, PriorTrial, from_dict

__all__ = ["prior_from_core", "prior_from_server", "priors_from_server"]

logger = logging.getLogger(__name__)


def prior_from_server(url: str, name: str, *, token: str | None = None) -> PriorSession:
    """Session ``name`` of a running server (live, closed or imported) as prior data.

    Read-only (``GET /priors/{name}``): it does not join the session.
    """
    from tuner_client.client import HttpBackend

    backend = HttpBackend(url, token=token, retry_seconds=5.0)
    try:
        answer = backend.request("GET", f"/priors/{quote(name, safe='')}")
    finally:
        backend.close()
    return from_dict(answer, source=f"{url}/priors/{name}")


def priors_from_server(url: str, *, token: str | None = None,
                       exclude: Iterable[str] = ()) -> list[PriorSession]:
    """Every session of a running server's store as prior data (read-only, over HTTP)."""
    from tuner_client.client import HttpBackend

    backend = HttpBackend(url, token=token, retry_seconds=5.0)
    try:
        names = [s["name"] for s in backend.request("GET", "/priors")["sessions"]]
    finally:
        backend.close()
    skip = set(exclude)
    return [prior_from_server(url, name, token=token) for name in names if name not in skip]


def prior_from_core(core: Any, *, created: float | None = None,
                    hosts: Iterable[HostInfo] = ()) -> PriorSession:
    """A :class:`~harmony.session.SessionCore` (standalone mode) as prior data (no times)."""
    return PriorSession(name=core.name, definition=core.definition.to_dict(), created=created,
                        trials=[_trial_from_dict(r.to_dict()) for r in core.trials()],
                        hosts=list(hosts), status=core.status)


def _trial_from_dict(r: Mapping[str, Any]) -> PriorTrial:
    return PriorTrial(int(r["id"]), int(r["candidate"]), dict(r["point"]), r.get("client"),
                      str(r["status"]), r.get("value"), r.get("failure"), r.get("leased_at"),
                      r.get("reported_at"))
