"""Helpers shared by the server and client tests (plain functions, no fixtures)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import urllib3

from harmony_base.tokens import CLIENT_SECRET_HEADER
from harmony_server.server import ServerHandle, start_server


def sphere(point: dict[str, Any]) -> float:
    """The synthetic objective the test clients compute: sum of squares (optimum 0)."""
    return float(sum(float(v) ** 2 for v in point.values()))


def definition(name: str, *, strategy: str = "random", dims: int = 2, lease: float = 300.0,
               seed: int = 0, options: dict[str, Any] | None = None,
               plugins: list[Any] | None = None) -> dict[str, Any]:
    """A session definition on an integer grid -20..20 per dimension."""
    d: dict[str, Any] = {
        "name": name,
        "parameters": [{"name": f"x{i}", "type": "int", "min": -20, "max": 20}
                       for i in range(dims)],
        "strategy": {"name": strategy, "options": options or {}},
        "seed": seed,
        "lease_seconds": lease,
    }
    if plugins:
        d["plugins"] = plugins
    return d


@contextmanager
def running_server(state_dir: Path, **overrides: Any) -> Iterator[ServerHandle]:
    """An in-process server on a free port with a SQLite store under ``state_dir``."""
    handle = start_server(port=0, state_dir=state_dir, **overrides)
    try:
        yield handle
    finally:
        handle.stop()


#: the session commands a client makes for itself, proven by its client secret
CLIENT_COMMANDS = frozenset({"fetch", "report", "heartbeat", "leave"})


def _client_in(body: Any) -> str | None:
    """The ``client`` of a request body (a raw body is read as JSON when it is JSON)."""
    if isinstance(body, bytes):
        try:
            body = json.loads(body)
        except (ValueError, RecursionError):
            return None
    client = body.get("client") if isinstance(body, dict) else None
    return client if isinstance(client, str) else None


class Raw:
    """Raw HTTP requests, for checking the wire protocol and bad input.

    Like a real client it keeps the secret each join answers, and sends it with that
    client's fetch, report, heartbeat and leave of the same session, unless the call gives
    the header itself (``headers={CLIENT_SECRET_HEADER: ...}``, or ``secret=False`` for none).
    """

    def __init__(self, url: str) -> None:
        self.pool = urllib3.connection_from_url(url, retries=False)
        #: (session path, client id) -> the secret its join answered
        self.secrets: dict[tuple[str, str], str] = {}

    def __call__(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                 headers: dict[str, str] | None = None, secret: bool = True
                 ) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        session, _, action = path.rpartition("/")
        client = _client_in(body if raw is None else raw)
        sent = {"Content-Type": "application/json", **(headers or {})}
        known = self.secrets.get((session, client)) if client is not None else None
        if secret and action in CLIENT_COMMANDS and known is not None:
            sent.setdefault(CLIENT_SECRET_HEADER, known)
        r = self.pool.request(method, path, body=data, headers=sent)
        try:
            decoded = json.loads(r.data) if r.data else None
        except ValueError:
            decoded = r.data.decode(errors="replace")
        if action == "join" and r.status == 200 and client is not None \
                and isinstance(decoded, dict) and "secret" in decoded:
            self.secrets[(session, client)] = decoded["secret"]
        return r.status, decoded

    def secret(self, session: str, client: str) -> dict[str, str]:
        """The header that proves ``client`` of ``session`` (for bodies Raw cannot read)."""
        return {CLIENT_SECRET_HEADER: self.secrets[(f"/sessions/{session}", client)]}

    def join(self, session: str, *clients: str) -> None:
        """Join ``clients`` to ``session`` (their secrets are then sent for them)."""
        for client in clients:
            status, answer = self("POST", f"/sessions/{session}/join", {"client": client})
            assert status == 200, answer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
