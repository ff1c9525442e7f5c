"""Standalone mode: sessions run in-process on :class:`harmony.session.SessionCore`.

The backend answers the same requests, with the same answers and errors, as the server's
HTTP API, so :class:`tuner_client.client.Session` works unchanged on top of it; there is
no network and no store. Thread-safe: several threads may share one client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from harmony.definition import SessionDefinition
from harmony.errors import ConfigError, ProtocolError, SessionNotFoundError
from harmony.session import SessionCore

logger = logging.getLogger(__name__)


@dataclass
class _LocalSession:
    core: SessionCore
    created: float
    #: trial id -> (client, expiry in ``time.monotonic`` seconds)
    leases: dict[int, tuple[str | None, float]] = field(default_factory=dict)

    def best(self) -> dict[str, Any] | None:
        best = self.core.best()
        return None if best is None else {"point": best[0], "value": best[1]}

    def status(self) -> str:
        return self.core.status

    def expire(self, now: float) -> bool:
        expired = [tid for tid, (_, expires) in self.leases.items() if expires <= now]
        for tid in expired:
            del self.leases[tid]
            self.core.release(tid)
        return bool(expired)

    def describe(self) -> dict[str, Any]:
        counts = self.core.counts()
        d = self.core.definition
        return {"name": d.name, "status": self.status(), "strategy": d.strategy,
                "objective": d.objective, "goal": "maximize" if d.maximize else "minimize",
                "best": self.best(), "trials": len(self.core.trials()),
                "completed": counts.get("completed", 0), "clients": len(self.core.clients),
                "created": self.created, "paused": self.core.paused,
                "converged": self.core.converged, "counts": counts,
                "leases": len(self.leases), "hosts": [], "definition": d.to_dict()}


class StandaloneBackend:
    """In-process sessions behind the client's request interface."""

    def __init__(self) -> None:
        self._sessions: dict[str, _LocalSession] = {}
        self._cond = threading.Condition()

    def close(self) -> None:
        with self._cond:
            for local in self._sessions.values():
                local.core.close()
            self._sessions.clear()
            self._cond.notify_all()

    def request(self, method: str, path: str, body: Mapping[str, Any] | None = None, *,
                timeout: float | None = None) -> dict[str, Any]:
        """Serve one request of the HTTP API's shape, in-process."""
        parts = [unquote(p) for p in path.strip("/").split("/")]
        body = dict(body or {})
        if parts[0] != "sessions" or len(parts) > 3:
            raise ProtocolError(f"standalone: no route {method} {path}")
        with self._cond:
            if len(parts) == 1:
                return self._create(body) if method == "POST" else {
                    "sessions": sorted((s.describe() for s in self._sessions.values()),
                                       key=lambda s: s["name"])}
            name = parts[1]
            local = self._get(name)
            action = parts[2] if len(parts) == 3 else ""
            if action == "fetch":
                return self._fetch(local, body["client"], float(body.get("wait", 0.0)))
            answer = self._dispatch(local, method, action, body)
            self._cond.notify_all()
            if action == "report" and "next" in body:
                answer["next"] = self._fetch(local, body["client"],
                                             float(body["next"].get("wait", 0.0)))
            return answer

    def _get(self, name: str) -> _LocalSession:
        try:
            return self._sessions[name]
        except KeyError:
            raise SessionNotFoundError(f"no session named {name!r} in this process; known: "
                                       f"{sorted(self._sessions)[:20]}") from None

    def _create(self, body: dict[str, Any]) -> dict[str, Any]:
        definition = SessionDefinition.from_dict(body["definition"])
        existing = self._sessions.get(definition.name)
        if existing is not None:
            if body.get("exist_ok") and existing.core.definition.to_dict() == definition.to_dict():
                return existing.describe()
            raise ConfigError(f"a session named {definition.name!r} already exists"
                              + (" with a different definition" if body.get("exist_ok") else ""))
        local = _LocalSession(SessionCore(definition), time.time())
        self._sessions[definition.name] = local
        return local.describe()

    def _fetch(self, local: _LocalSession, client: str, wait: float) -> dict[str, Any]:
        core = local.core
        deadline = time.monotonic() + wait
        core.join(client)
        while True:
            local.expire(time.monotonic())
            assignment = core.fetch(client)
            if assignment is not None:
                lease = core.definition.lease_seconds
                local.leases[assignment.trial_id] = (client, time.monotonic() + lease)
                return {"status": "trial", "trial_id": assignment.trial_id,
                        "point": assignment.point, "candidate": assignment.candidate,
                        "lease_expires": time.time() + lease}
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (core.converged and not core.paused) \
                    or local.core.name not in self._sessions:
                return {"status": "wait", "best": local.best(), "paused": core.paused,
                        "converged": core.converged, "retry_after": 1.0}
            next_expiry = min((e for _, e in local.leases.values()), default=None)
            if next_expiry is not None:
                remaining = min(remaining, max(next_expiry - time.monotonic(), 0.0) + 0.001)
            self._cond.wait(remaining)

    def _dispatch(self, local: _LocalSession, method: str, action: str,
                  body: dict[str, Any]) -> dict[str, Any]:
        core = local.core
        if action == "" and method == "GET":
            return local.describe()
        if action == "" and method == "DELETE":
            del self._sessions[core.name]
            core.close()
            return {"killed": core.name}
        if action == "join":
            core.join(body["client"])
            return {"session": core.name, "client": body["client"]}
        if action == "report":
            trial_id = int(body["trial_id"])
            core.trial(trial_id)  # TrialError for an unknown id
            failure = (body.get("reason") or "failed") if body.get("failure") else None
            accepted = core.report(trial_id, body.get("value"), failure, body.get("client"))
            local.leases.pop(trial_id, None)
            return {"accepted": accepted, "converged": core.converged}
        if action == "heartbeat":
            from tuner_client.client import LeaseLostError

            trial_id = int(body["trial_id"])
            record = core.trial(trial_id)
            local.expire(time.monotonic())
            if trial_id not in local.leases:
                raise LeaseLostError(f"session {core.name!r}: trial {trial_id} is "
                                     f"{record.status}, not leased; there is no lease to extend")
            lease = core.definition.lease_seconds
            local.leases[trial_id] = (local.leases[trial_id][0], time.monotonic() + lease)
            return {"trial_id": trial_id, "lease_expires": time.time() + lease}
        if action == "best":
            return {"best": local.best(), "converged": core.converged}
        if action == "pause":
            core.pause()
            return {"status": local.status()}
        if action == "resume":
            core.resume()
            return {"status": local.status()}
        if action == "restart":
            point = body.get("point")
            if point is not None:
                core.space.check_point(point)
                if not core.space.contains(point):
                    raise ConfigError(f"restart point {point} is not in the space (off the grid "
                                      f"or out of bounds); the nearest valid point is "
                                      f"{core.space.snap(point)}")
            core.restart(point)
            return {"status": local.status()}
        if action == "leave":
            mine = [tid for tid, (c, _) in local.leases.items() if c == body["client"]]
            for tid in mine:
                del local.leases[tid]
                core.release(tid)
            return {"released": len(mine)}
        if action == "trials":
            return {"trials": [r.to_dict() for r in core.trials()]}
        raise ProtocolError(f"standalone: no route {method} /sessions/{core.name}/{action}")
