"""The typed client API: connect to a Harmony server (or run standalone), fetch, report.

``connect(url)`` talks HTTP/JSON to a server (:mod:`tuner_client.api.transport`: pooled
keep-alive connections, retrying with backoff while the server is unreachable);
``connect(None)`` runs sessions in-process on the same
:class:`harmony_core.session.SessionCore` with the same semantics. The client never imports
the server's HTTP layer or store.

    with connect("http://127.0.0.1:1979") as client:
        session = client.create_session(definition, exist_ok=True)
        while (got := session.fetch(timeout=30)) is not None:
            session.report(got.trial_id, measure(got.point))
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from harmony_base.errors import (
    ConfigError,
    HarmonyError,
    LeaseLostError,
    ProtocolError,
    ReportRejectedError,
    ServerUnavailableError,
)
from harmony_base.hostinfo import host_metadata
from harmony_base.jsontypes import JSON, JSONObject
from harmony_core.definition import SessionDefinition
from tuner_client.api.standalone import StandaloneBackend
from tuner_client.api.transport import Backend, HttpBackend

logger = logging.getLogger(__name__)

__all__ = ["Backend", "Fetched", "HarmonyClient", "HttpBackend", "LeaseKeeper", "LeaseLostError",
           "ReportRejectedError", "ServerUnavailableError", "Session", "connect",
           "host_metadata"]

#: longest single long-poll the client asks the server for (seconds)
MAX_POLL = 30.0


@dataclass(frozen=True)
class Fetched:
    """A point to measure, and the trial id to report it under."""

    trial_id: int
    point: dict[str, Any]


class Session:
    """One session as seen by one client: fetch points, report values, steer the search.

    ``secret`` is the client secret the session's join issued this client; fetch, report,
    heartbeat and leave send it (:meth:`HarmonyClient.join` fills it in).
    """

    def __init__(self, backend: Backend, name: str, client_id: str,
                 secret: str | None = None) -> None:
        self._backend = backend
        self.name = name
        self.client_id = client_id
        self._secret = secret
        self._path = f"/sessions/{quote(name, safe='')}"

    @property
    def secret(self) -> str | None:
        """This client's secret for the session: keep it to rejoin under the same client id
        from another process (``HarmonyClient.join(name, secret=...)``)."""
        return self._secret

    def _call(self, method: str, action: str = "", body: Mapping[str, JSON] | None = None,
              timeout: float | None = None) -> dict[str, Any]:
        path = self._path + (f"/{action}" if action else "")
        return self._backend.request(method, path, body, timeout=timeout)

    def _as_client(self, action: str, body: Mapping[str, JSON],
                   timeout: float | None = None) -> dict[str, Any]:
        """POST a command this client makes for itself, proven by its secret."""
        return self._backend.request("POST", f"{self._path}/{action}", body, timeout=timeout,
                                     secret=self._secret)

    def _reported(self, trial_id: int, answer: Mapping[str, JSON]) -> None:
        """:class:`ReportRejectedError` unless the report was recorded or was a retry of the
        recorded one (``duplicate``: the answer to an earlier try was lost)."""
        if answer.get("accepted") or answer.get("duplicate"):
            return
        raise ReportRejectedError(
            f"session {self.name!r}: the report of trial {trial_id} by client "
            f"{self.client_id!r} was not recorded: "
            f"{answer.get('reason') or 'the server gave no reason'}")

    def fetch(self, timeout: float = 30.0) -> Fetched | None:
        """The next point to measure; ``None`` if none is ready within ``timeout`` seconds
        (or at once when the session has converged)."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            wait = min(max(deadline - time.monotonic(), 0.0), MAX_POLL)
            asked = time.monotonic()
            # the request id makes the backend's retries of this one call idempotent
            answer = self._as_client("fetch", {"client": self.client_id, "wait": wait,
                                               "request": uuid.uuid4().hex[:16]},
                                     timeout=wait + 30.0)
            if answer.get("status") == "trial":
                return Fetched(int(answer["trial_id"]), dict(answer["point"]))
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (answer.get("converged") and not answer.get("paused")):
                return None
            if time.monotonic() - asked < wait - 0.05:
                # the server answered early (e.g. it is shutting down): honour its retry hint
                time.sleep(min(float(answer.get("retry_after", 1.0)), remaining))

    def report(self, trial_id: int, value: float) -> None:
        """Report a measurement; NaN or infinite values are reported as a failure.

        :class:`ReportRejectedError` when the server did not record it (the trial had been
        reported with another outcome); a retried report the server had already recorded
        is fine.
        """
        value = float(value)
        if not math.isfinite(value):
            self.report_failure(trial_id, f"non-finite measurement {value!r}")
            return
        self._reported(trial_id, self._as_client(
            "report", {"client": self.client_id, "trial_id": int(trial_id), "value": value}))

    def report_and_fetch(self, trial_id: int, value: float,
                         timeout: float = 30.0) -> Fetched | None:
        """Report a measurement and fetch the next point in one round trip.

        The same as :meth:`report` then :meth:`fetch`, but the server answers the report
        with the next trial (Active Harmony's piggybacked fetch), halving the round trips
        of a tuning loop.
        """
        value = float(value)
        if not math.isfinite(value):
            self.report_failure(trial_id, f"non-finite measurement {value!r}")
            return self.fetch(timeout)
        deadline = time.monotonic() + max(timeout, 0.0)
        wait = min(max(timeout, 0.0), MAX_POLL)
        answer = self._as_client("report",
                                 {"client": self.client_id, "trial_id": int(trial_id),
                                  "value": value,
                                  "next": {"wait": wait, "request": uuid.uuid4().hex[:16]}},
                                 timeout=wait + 30.0)
        self._reported(trial_id, answer)
        nxt = answer.get("next") or {}
        if nxt.get("status") == "trial":
            return Fetched(int(nxt["trial_id"]), dict(nxt["point"]))
        remaining = deadline - time.monotonic()
        if remaining <= 0 or (nxt.get("converged") and not nxt.get("paused")):
            return None
        return self.fetch(remaining)

    def report_failure(self, trial_id: int, reason: str) -> None:
        """Report that the trial could not be measured, and why (:class:`ReportRejectedError`
        as :meth:`report`)."""
        self._reported(trial_id, self._as_client(
            "report", {"client": self.client_id, "trial_id": int(trial_id), "failure": True,
                       "reason": str(reason)[:4000]}))

    def heartbeat(self, trial_id: int) -> float:
        """Extend the trial's lease; returns its new expiry (seconds since the epoch).

        :class:`LeaseLostError` if this client no longer holds it (the lease ran out and the
        point was handed out again, the trial was reported, or it was never ours).
        """
        answer = self._as_client("heartbeat", {"client": self.client_id,
                                               "trial_id": int(trial_id)})
        return float(answer["lease_expires"])

    def keep_lease(self, trial_id: int, every: float) -> LeaseKeeper:
        """Heartbeat ``trial_id`` every ``every`` seconds while a long measurement runs.

            with session.keep_lease(got.trial_id, every=60) as lease:
                value = measure(got.point)
            session.report(got.trial_id, value)  # accepted even if lease.lost

        A lost lease stops the heartbeats and is kept in ``lease.lost``; it never raises
        into the measuring thread. The report afterwards is still accepted (a late report of
        this client's own trial), but the point may have been measured twice.
        """
        return LeaseKeeper(self, trial_id, every)

    def best(self) -> tuple[JSONObject, float] | None:
        """The best point and value so far (in the objective's own sign), or ``None``."""
        best = self._call("GET", "best")["best"]
        return None if best is None else (dict(best["point"]), float(best["value"]))

    @property
    def converged(self) -> bool:
        return bool(self._call("GET", "best")["converged"])

    def status(self) -> dict[str, Any]:
        """The session's full status (counts, best, definition)."""
        return self._call("GET")

    def pause(self) -> None:
        self._call("POST", "pause", {})

    def resume(self) -> None:
        self._call("POST", "resume", {})

    def restart(self, point: JSONObject | None = None) -> None:
        """Restart the search, optionally from ``point``."""
        self._call("POST", "restart", {"point": point})

    def trials(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "trials")["trials"])

    def leave(self) -> None:
        """Leave the session; trials still leased to this client are handed out again."""
        self._as_client("leave", {"client": self.client_id})

    def kill(self) -> None:
        """End the session and delete everything stored for it."""
        self._call("DELETE")

    def __repr__(self) -> str:
        return f"Session({self.name!r}, client={self.client_id!r})"


class LeaseKeeper:
    """Heartbeats one trial from a daemon thread until the ``with`` block ends (see
    :meth:`Session.keep_lease`)."""

    def __init__(self, session: Session, trial_id: int, every: float) -> None:
        if not (math.isfinite(every) and every > 0):
            raise ConfigError(f"keep_lease: 'every' must be a positive number of seconds, "
                              f"got {every!r}")
        self.session = session
        self.trial_id = int(trial_id)
        self.every = float(every)
        #: why the lease was lost (None while it is held)
        self.lost: LeaseLostError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"harmony-lease-{self.trial_id}")

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.session.heartbeat(self.trial_id)
            except LeaseLostError as exc:
                logger.warning("session %s: lost the lease of trial %d: %s",
                               self.session.name, self.trial_id, exc)
                self.lost = exc
                return
            except HarmonyError as exc:  # unreachable for a while: try again next period
                logger.warning("session %s: heartbeat of trial %d failed: %s",
                               self.session.name, self.trial_id, exc)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class HarmonyClient:
    """A connection to a server (or to in-process sessions); a context manager."""

    def __init__(self, backend: Backend, client_id: str,
                 secrets: dict[tuple[str, str], str] | None = None) -> None:
        self._backend = backend
        self.client_id = client_id
        #: (client id, session name) -> the secret that join issued, for a re-join; shared
        #: by the clients :meth:`as_client` makes on this connection
        self._secrets = secrets if secrets is not None else {}

    def create_session(self, definition: SessionDefinition | Mapping[str, JSON], *,
                       exist_ok: bool = False) -> Session:
        """Create a session and join it; with ``exist_ok`` an identical one is joined instead."""
        if not isinstance(definition, SessionDefinition):
            # validate here too, so a typo is reported before anything is sent
            definition = SessionDefinition.from_dict(definition)
        data = definition.to_dict()
        answer = self._backend.request("POST", "/sessions", {"definition": data,
                                                             "exist_ok": exist_ok})
        return self.join(answer["name"])

    def join(self, name: str, *, secret: str | None = None) -> Session:
        """Join an existing session by name (:class:`SessionNotFoundError` if unknown).

        The server issues a new client its secret; joining the same session again on this
        connection sends it back, as does ``secret`` (:attr:`Session.secret` of an earlier
        process under this client id). :class:`ClientExistsError` when the id has joined
        and the secret is missing or wrong: pick another client id.
        """
        key = (self.client_id, name)
        secret = secret or self._secrets.get(key)
        path = f"/sessions/{quote(name, safe='')}/join"
        answer = self._backend.request("POST", path, {"client": self.client_id,
                                                      "host": host_metadata()}, secret=secret)
        secret = answer.get("secret") or secret
        if not isinstance(secret, str):
            raise ProtocolError(f"join {name!r}: the server answered no client secret; it "
                                f"may predate client secrets (upgrade it)")
        self._secrets[key] = secret
        return Session(self._backend, name, self.client_id, secret)

    def as_client(self, client_id: str) -> HarmonyClient:
        """Another client on the same connection, under ``client_id`` (e.g. one per replica
        of a run); closing it closes the shared connection, so close only the original."""
        return HarmonyClient(self._backend, client_id, self._secrets)

    def describe(self, name: str) -> dict[str, Any]:
        """A session's full status and definition, without joining it."""
        return Session(self._backend, name, self.client_id).status()

    def list_sessions(self) -> list[dict[str, Any]]:
        """Every session with status and best result."""
        return list(self._backend.request("GET", "/sessions")["sessions"])

    def close(self) -> None:
        self._backend.close()

    def __enter__(self) -> HarmonyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def default_client_id() -> str:
    """A client id unique to this process: ``host-pid-random``."""
    return f"{socket.gethostname()[:64]}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def connect(url: str | None = None, *, token: str | None = None,
            client_id: str | None = None) -> HarmonyClient:
    """A client for the server at ``url``; ``None`` runs sessions in-process (standalone)."""
    client_id = client_id or default_client_id()
    if url is None:
        return HarmonyClient(StandaloneBackend(), client_id)
    return HarmonyClient(HttpBackend(url, token=token), client_id)
