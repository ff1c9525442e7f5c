"""How the client reaches a Harmony server: the :class:`Backend` interface a session talks
through, and :class:`HttpBackend`, HTTP/JSON over pooled keep-alive connections (urllib3)
that retries with backoff while the server is unreachable and turns error answers into the
project's exceptions.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any, Protocol

import urllib3

from harmony.base.errors import (
    ClientExistsError,
    ClientNotFoundError,
    ConfigError,
    ForbiddenError,
    HarmonyError,
    LeaseLostError,
    ProtocolError,
    ServerUnavailableError,
    SessionNotFoundError,
    TrialError,
)
from harmony.base.tokens import CLIENT_SECRET_HEADER

logger = logging.getLogger(__name__)


_KIND_ERRORS: dict[str, type[HarmonyError]] = {
    "session_not_found": SessionNotFoundError,
    "trial_not_found": TrialError,
    "lease_lost": LeaseLostError,
    "client_not_found": ClientNotFoundError,
    "client_exists": ClientExistsError,
    "forbidden": ForbiddenError,
    "session_exists": ConfigError,
    "invalid_definition": ConfigError,
    "conflict": HarmonyError,
    "unavailable": ServerUnavailableError,
    "session_broken": HarmonyError,
    "internal": HarmonyError,
}


def error_from_answer(kind: str, message: str) -> HarmonyError:
    """The project exception for an error answer ``{"error": kind, "message": ...}``."""
    return _KIND_ERRORS.get(kind, ProtocolError)(message)


class Backend(Protocol):
    """What a :class:`Session` needs from the transport (HTTP or in-process)."""

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None, *,
                timeout: float | None = None, secret: str | None = None) -> dict[str, Any]:
        """Send one request; ``secret`` is the client secret of the body's client."""
        ...

    def close(self) -> None: ...


class _OneWriteConnection(urllib3.connection.HTTPConnection):
    """Sends the request line, headers and a small body in one write.

    urllib3 writes the header block and then the body, so every small JSON request costs
    two packets and two wake-ups of the server; appending the body to the header block
    makes it one.
    """

    _pending: bytes | None = None  # the body of the request being sent
    _in_headers = False  # endheaders() is about to send the header block
    _body_sent = False

    def request(self, method: str, url: str, body: Any = None, headers: Any = None,
                **kwargs: Any) -> None:
        small = isinstance(body, bytes) and 0 < len(body) <= 65536
        self._pending = body if small else None
        self._body_sent = False
        try:
            super().request(method, url, body=body, headers=headers, **kwargs)
        finally:
            self._pending, self._in_headers, self._body_sent = None, False, False

    def endheaders(self, message_body: Any = None, *, encode_chunked: bool = False) -> None:
        self._in_headers = self._pending is not None
        super().endheaders(message_body, encode_chunked=encode_chunked)

    def send(self, data: Any) -> None:
        if self._in_headers and self._pending is not None:
            self._in_headers = False
            self._body_sent = True
            super().send(bytes(data) + self._pending)
            return
        if self._body_sent and data is self._pending:
            self._body_sent = False  # already sent with the header block
            return
        super().send(data)


class HttpBackend:
    """JSON over HTTP with a keep-alive connection pool and retries on connection errors."""

    def __init__(self, url: str, *, token: str | None = None, retry_seconds: float = 30.0,
                 pool_size: int = 4, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.retry_seconds = retry_seconds
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        try:
            self.pool = urllib3.connection_from_url(self.url, maxsize=pool_size, block=False,
                                                    retries=False)
        except (urllib3.exceptions.LocationValueError, ValueError) as exc:
            raise ConfigError(f"server URL {url!r} is not a valid http(s) URL: {exc}") from None
        if type(self.pool) is urllib3.HTTPConnectionPool:
            self.pool.ConnectionCls = _OneWriteConnection

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None, *,
                timeout: float | None = None, secret: str | None = None) -> dict[str, Any]:
        """Send one request; retry with exponential backoff while the server is unreachable."""
        payload = json.dumps(body, allow_nan=False).encode() if body is not None else None
        headers = self.headers if secret is None else {**self.headers,
                                                        CLIENT_SECRET_HEADER: secret}
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.05
        while True:
            try:
                response = self.pool.request(
                    method, path, body=payload, headers=headers,
                    timeout=urllib3.Timeout(connect=5.0, read=timeout or self.timeout),
                    retries=False, preload_content=True)
            except (urllib3.exceptions.NewConnectionError, urllib3.exceptions.ProtocolError,
                    urllib3.exceptions.ConnectTimeoutError, ConnectionError) as exc:
                problem: str = f"{type(exc).__name__}: {exc}"
            except urllib3.exceptions.ReadTimeoutError as exc:
                raise ServerUnavailableError(f"{method} {self.url}{path}: no answer within "
                                             f"{timeout or self.timeout} s") from exc
            else:
                if response.status != 503:
                    return self._decode(method, path, response)
                problem = f"503: {response.data[:200]!r}"
            if time.monotonic() + delay > deadline:
                raise ServerUnavailableError(f"{method} {self.url}{path}: server unavailable for "
                                             f"{self.retry_seconds} s ({problem})")
            logger.debug("%s %s failed (%s); retrying in %.2f s", method, path, problem, delay)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _decode(self, method: str, path: str, response: urllib3.BaseHTTPResponse
                ) -> dict[str, Any]:
        try:
            data = json.loads(response.data) if response.data else {}
        except ValueError:
            data = None
        if response.status >= 400:
            if isinstance(data, dict) and "error" in data:
                raise error_from_answer(data["error"], data.get("message", ""))
            raise ProtocolError(f"{method} {self.url}{path}: HTTP {response.status}: "
                                f"{response.data[:200]!r}")
        if not isinstance(data, dict):
            raise ProtocolError(f"{method} {self.url}{path}: the answer is not a JSON object")
        return data

    def close(self) -> None:
        self.pool.close()
