"""How the client reaches a Harmony server: the :class:`Backend` interface a session talks
through, and :class:`HttpBackend`, HTTP/JSON over keep-alive connections (the standard
library's :mod:`http.client`, one connection per thread) that retries with backoff while the
server is unreachable and turns error answers into the project's exceptions.
"""

from __future__ import annotations

import http.client
import json
import logging
import select
import ssl
import threading
import time
from collections.abc import Mapping
from typing import Any, Protocol
from urllib.parse import urlsplit

from harmony_base.errors import (
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
from harmony_base.jsontypes import JSON, JSONObject
from harmony_base.tokens import CLIENT_SECRET_HEADER

logger = logging.getLogger(__name__)

#: seconds to wait for a connection to the server to open
CONNECT_TIMEOUT = 5.0

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

    def request(self, method: str, path: str, body: Mapping[str, JSON] | None = None, *,
                timeout: float | None = None, secret: str | None = None) -> dict[str, Any]:
        """Send one request; ``secret`` is the client secret of the body's client."""
        ...

    def close(self) -> None: ...


class _HTTPConnection(http.client.HTTPConnection):
    """A keep-alive connection that sends the request line, headers and body in one write.

    :meth:`http.client.HTTPConnection.request` writes the header block and then the body,
    so every small JSON request would cost two packets and two wake-ups of the server.
    """

    _body = b""
    #: the socket's current read timeout (set again only when a request asks for another)
    read_timeout: float | None = None

    def send_request(self, method: str, path: str, body: bytes | None,
                     headers: Mapping[str, str]) -> None:
        """Send one request: the header block with ``body`` appended, in one ``send``."""
        self.putrequest(method, path)
        for name, value in headers.items():
            self.putheader(name, value)
        if body is not None or method in ("POST", "PUT", "PATCH"):
            self.putheader("Content-Length", str(len(body or b"")))
        self._body = body or b""
        self.endheaders()  # sends the header block through send() below

    def send(self, data: Any) -> None:
        body, self._body = self._body, b""
        super().send(bytes(data) + body if body else data)


class _HTTPSConnection(_HTTPConnection, http.client.HTTPSConnection):
    """:class:`_HTTPConnection` over TLS (the certificate is verified)."""


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle keep-alive connection was closed by the server (it is readable: EOF)."""
    if conn.sock is None:
        return False
    poller = select.poll()
    poller.register(conn.sock, select.POLLIN)
    return bool(poller.poll(0))


class HttpBackend:
    """JSON over HTTP with one keep-alive connection per thread and retries on connection
    errors."""

    def __init__(self, url: str, *, token: str | None = None, retry_seconds: float = 30.0,
                 timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.retry_seconds = retry_seconds
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        try:  # "host:port" alone means http://host:port
            parts = urlsplit(self.url if "://" in self.url else f"http://{self.url}")
            self._port = parts.port
        except ValueError as exc:
            raise ConfigError(f"server URL {url!r} is not a valid http(s) URL: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"server URL {url!r} is not a valid http(s) URL: it needs "
                              f"http:// or https:// and a host, e.g. http://127.0.0.1:1979")
        self._host = parts.hostname
        self._prefix = parts.path
        self._connection_class = _HTTPSConnection if parts.scheme == "https" else _HTTPConnection
        self._lock = threading.Lock()
        self._local = threading.local()
        #: every open connection, by the thread that uses it
        self._open: dict[threading.Thread, _HTTPConnection] = {}

    # -- connections ---------------------------------------------------------------
    def _connection(self) -> _HTTPConnection:
        """This thread's keep-alive connection, opened (and reopened) as needed."""
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connection_class(self._host, self._port, timeout=CONNECT_TIMEOUT)
            with self._lock:  # close what threads that have ended left open
                for thread in [t for t in self._open if not t.is_alive()]:
                    self._open.pop(thread).close()
                self._open[threading.current_thread()] = conn
            self._local.conn = conn
        elif _dropped(conn):  # the server closed it while it was idle: open a new one
            conn.close()
        if conn.sock is None:
            conn.timeout = CONNECT_TIMEOUT
            conn.connect()
            conn.read_timeout = None
        return conn

    def _exchange(self, conn: _HTTPConnection, method: str, path: str, payload: bytes | None,
                  headers: Mapping[str, str], timeout: float) -> tuple[int, bytes]:
        """One request and its whole answer on ``conn``: ``(status, body)``."""
        if conn.read_timeout != timeout and conn.sock is not None:
            conn.sock.settimeout(timeout)
            conn.read_timeout = timeout
        conn.send_request(method, self._prefix + path, payload, headers)
        response = conn.getresponse()
        return response.status, response.read()

    # -- requests -----------------------------------------------------------------
    def request(self, method: str, path: str, body: Mapping[str, JSON] | None = None, *,
                timeout: float | None = None, secret: str | None = None) -> dict[str, Any]:
        """Send one request; retry with exponential backoff while the server is unreachable."""
        payload = json.dumps(body, allow_nan=False).encode() if body is not None else None
        headers = self.headers if secret is None else {**self.headers,
                                                        CLIENT_SECRET_HEADER: secret}
        read_timeout = timeout or self.timeout
        deadline = time.monotonic() + self.retry_seconds
        delay = 0.05
        while True:
            conn = None
            try:
                conn = self._connection()
                status, data = self._exchange(conn, method, path, payload, headers,
                                              read_timeout)
            except ssl.SSLError as exc:  # a certificate or TLS set-up problem: retrying won't help
                if conn is not None:
                    conn.close()
                raise ServerUnavailableError(f"{method} {self.url}{path}: TLS failed: {exc}"
                                             ) from exc
            except TimeoutError as exc:
                if conn is None or conn.sock is None:  # opening the connection timed out
                    problem = f"no connection within {CONNECT_TIMEOUT:g} s"
                else:
                    conn.close()
                    raise ServerUnavailableError(f"{method} {self.url}{path}: no answer within "
                                                 f"{read_timeout} s") from exc
            except (OSError, http.client.HTTPException) as exc:
                if conn is not None:
                    conn.close()
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if status != 503:
                    return self._decode(method, path, status, data)
                problem = f"503: {data[:200]!r}"
            if time.monotonic() + delay > deadline:
                raise ServerUnavailableError(f"{method} {self.url}{path}: server unavailable for "
                                             f"{self.retry_seconds} s ({problem})")
            logger.debug("%s %s failed (%s); retrying in %.2f s", method, path, problem, delay)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _decode(self, method: str, path: str, status: int, raw: bytes) -> JSONObject:
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = None
        if status >= 400:
            if isinstance(data, dict) and "error" in data:
                raise error_from_answer(data["error"], data.get("message", ""))
            raise ProtocolError(f"{method} {self.url}{path}: HTTP {status}: {raw[:200]!r}")
        if not isinstance(data, dict):
            raise ProtocolError(f"{method} {self.url}{path}: the answer is not a JSON object")
        return data

    def close(self) -> None:
        """Close every connection; a later request opens new ones."""
        with self._lock:
            for conn in self._open.values():
                conn.close()
            self._open.clear()
            self._local = threading.local()
