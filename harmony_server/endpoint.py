"""One route of the HTTP API as data: the route table in :mod:`harmony_server.app` is a tuple of
these, and :mod:`harmony_server.openapi` documents the same tuple (both import this module, so
neither imports the other)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Endpoint:
    """One route: method, path, handler, and what the OpenAPI document says about it."""

    method: str
    path: str
    handler: Handler
    operation: str
    summary: str
    request: str | None = None  # name in protocol.REQUEST_SCHEMAS
    responses: tuple[int, ...] = (200,)
    public: bool = False  # no bearer token needed
    client_secret: bool = False  # the body's client must send its secret (X-Harmony-Client-Secret)
