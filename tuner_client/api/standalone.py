"""Standalone mode: sessions run in-process on :class:`harmony_core.leased.LeasedSession`.

The very leased-session service the server hosts (leases, ownership, heartbeats, leave,
the restart check, ``describe``), answering the HTTP API's requests with the same answers
and errors (client secrets included), so :class:`tuner_client.api.client.Session` works unchanged
on top of it; there is no network and no store. Thread-safe: several threads may share one
client.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from harmony_base.errors import ConfigError, ProtocolError, SessionNotFoundError
from harmony_base.jsontypes import JSONObject
from harmony_core.definition import SessionDefinition
from harmony_core.leased import LeasedSession

logger = logging.getLogger(__name__)


class StandaloneBackend:
    """In-process sessions behind the client's request interface."""

    def __init__(self) -> None:
        self._sessions: dict[str, LeasedSession] = {}
        self._cond = threading.Condition()

    def close(self) -> None:
        with self._cond:
            for local in self._sessions.values():
                local.close()
            self._sessions.clear()
            self._cond.notify_all()

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None, *,
                timeout: float | None = None, secret: str | None = None) -> dict[str, Any]:
        """Serve one request of the HTTP API's shape, in-process (``secret`` as the HTTP
        API's client-secret header)."""
        parts = [unquote(p) for p in path.strip("/").split("/")]
        body = dict(body or {})
        if parts[0] != "sessions" or len(parts) > 3:
            raise ProtocolError(f"standalone: no route {method} {path}")
        with self._cond:
            if len(parts) == 1:
                return self._create(body) if method == "POST" else {
                    "sessions": sorted((s.summary() for s in self._sessions.values()),
                                       key=lambda s: s["name"])}
            local = self._get(parts[1])
            action = parts[2] if len(parts) == 3 else ""
            if action in ("fetch", "report", "heartbeat", "leave"):
                local.authenticate(body["client"], secret)
            if action == "join":
                return self._join(local, body, secret)
            if action == "fetch":
                return self._fetch(local, body["client"], body.get("wait", 0.0))
            answer = self._dispatch(local, method, action, body)
            self._cond.notify_all()
            if action == "report" and "next" in body:
                answer["next"] = self._fetch(local, body["client"],
                                             body["next"].get("wait", 0.0))
            return answer

    def _get(self, name: str) -> LeasedSession:
        try:
            return self._sessions[name]
        except KeyError:
            raise SessionNotFoundError(f"no session named {name!r} in this process; known: "
                                       f"{sorted(self._sessions)[:20]}") from None

    def _create(self, body: dict[str, Any]) -> JSONObject:
        definition = SessionDefinition.from_dict(body["definition"])
        existing = self._sessions.get(definition.name)
        if existing is not None:
            if body.get("exist_ok") and existing.definition.to_dict() == definition.to_dict():
                return existing.describe()
            raise ConfigError(f"a session named {definition.name!r} already exists"
                              + (" with a different definition" if body.get("exist_ok") else ""))
        local = LeasedSession(definition, created=time.time())
        self._sessions[definition.name] = local
        return local.describe()

    def _fetch(self, local: LeasedSession, client: str, wait: Any) -> JSONObject:
        """A long poll on the condition variable (the server's is on its event loop)."""
        wait = float(wait)
        if not math.isfinite(wait) or wait < 0:
            raise ProtocolError(f"fetch: 'wait' must be a finite number >= 0, got {wait!r}")
        deadline = time.monotonic() + wait
        core = local.core
        while True:
            got = local.try_fetch(client)
            if got.assignment is not None:
                a = got.assignment
                return {"status": "trial", "trial_id": a.trial_id, "point": a.point,
                        "candidate": a.candidate, "lease_expires": got.lease_expires}
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (core.converged and not core.paused) or local.closed:
                return {"status": "wait", "best": local.best(), "paused": core.paused,
                        "converged": core.converged, "retry_after": 1.0}
            next_expiry = min((lease.expires for lease in local.leases.values()), default=None)
            if next_expiry is not None:
                remaining = min(remaining, max(next_expiry - time.monotonic(), 0.0) + 0.001)
            self._cond.wait(remaining)

    @staticmethod
    def _join(local: LeasedSession, body: dict[str, Any], secret: str | None) -> JSONObject:
        issued = local.join(body["client"], body.get("host"), secret)
        answer = {"session": local.name, "client": body["client"],
                  "lease_seconds": local.definition.lease_seconds,
                  "definition": local.definition.to_dict()}
        return answer if issued is None else {**answer, "secret": issued}

    def _dispatch(self, local: LeasedSession, method: str, action: str,
                  body: dict[str, Any]) -> JSONObject:
        if action == "" and method == "GET":
            return local.describe()
        if action == "" and method == "DELETE":
            del self._sessions[local.name]
            local.close()
            return {"killed": local.name}
        if action == "report":
            failure = (body.get("reason") or "failed") if body.get("failure") else None
            return {**local.report_answer(int(body["trial_id"]), body.get("value"), failure,
                                          body.get("client")),
                    "converged": local.core.converged}
        if action == "heartbeat":
            expires = local.heartbeat(int(body["trial_id"]), body.get("client"))
            return {"trial_id": int(body["trial_id"]), "lease_expires": expires}
        if action == "best":
            return {"best": local.best(), "converged": local.core.converged}
        if action == "pause":
            local.pause()
            return {"status": local.status()}
        if action == "resume":
            local.resume()
            return {"status": local.status()}
        if action == "restart":
            local.restart(body.get("point"))
            return {"status": local.status()}
        if action == "leave":
            return {"released": local.leave(body["client"])}
        if action == "trials":
            return {"trials": local.trial_dicts()}
        raise ProtocolError(f"standalone: no route {method} /sessions/{local.name}/{action}")
