"""Helpers shared by the server and client tests (plain functions, no fixtures)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import urllib3

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


class Raw:
    """Raw HTTP requests, for checking the wire protocol and bad input."""

    def __init__(self, url: str) -> None:
        self.pool = urllib3.connection_from_url(url, retries=False)

    def __call__(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
                 headers: dict[str, str] | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        r = self.pool.request(method, path, body=data,
                              headers={"Content-Type": "application/json", **(headers or {})})
        try:
            decoded = json.loads(r.data) if r.data else None
        except ValueError:
            decoded = r.data.decode(errors="replace")
        return r.status, decoded


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
