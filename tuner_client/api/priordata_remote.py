"""Prior data read from a running server over its HTTP API (``GET /priors`` and
``GET /priors/{name}``: every session of its store, live, closed or imported), read-only.

The formats live in :mod:`harmony_core.priordata`; the store itself is opened only by the
server's side, :mod:`harmony_server.priordata_store`.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import quote

from harmony_core.priordata import PriorSession, from_dict
from tuner_client.api.client import HttpBackend

__all__ = ["prior_from_server", "priors_from_server"]


def prior_from_server(url: str, name: str, *, token: str | None = None) -> PriorSession:
    """Session ``name`` of a running server (live, closed or imported) as prior data.

    Read-only (``GET /priors/{name}``): it does not join the session.
    """
    backend = HttpBackend(url, token=token, retry_seconds=5.0)
    try:
        answer = backend.request("GET", f"/priors/{quote(name, safe='')}")
    finally:
        backend.close()
    return from_dict(answer, source=f"{url}/priors/{name}")


def priors_from_server(url: str, *, token: str | None = None,
                       exclude: Iterable[str] = ()) -> list[PriorSession]:
    """Every session of a running server's store as prior data (read-only, over HTTP)."""
    backend = HttpBackend(url, token=token, retry_seconds=5.0)
    try:
        names = [s["name"] for s in backend.request("GET", "/priors")["sessions"]]
    finally:
        backend.close()
    skip = set(exclude)
    return [prior_from_server(url, name, token=token) for name in names if name not in skip]
