"""A session core with leases: who holds which trial, until when, and who may answer for it.

The one leased-session service: the server (:mod:`harmony_server.hosted`) extends it with a
durable command log and long polls, the client's standalone mode
(:mod:`tuner_client.api.standalone`) runs it in-process as it is. No HTTP and no store here.

Identity: ``join`` issues each client a secret (the session keeps only its digest) and
:meth:`LeasedSession.authenticate` checks it before fetch, report, heartbeat and leave, so a
client cannot act under another's id. A second join under a taken id needs that client's
secret (:class:`ClientExistsError`, HTTP 409, otherwise).

The ownership rule: a fetched trial belongs to the client it was handed to. Only that client
may report it or extend its lease with a heartbeat; anyone else gets :class:`LeaseLostError`
(HTTP 409, which does not say who holds the trial). A lease runs ``lease_seconds`` from the
fetch or the last heartbeat; when it runs out the trial is released and its point handed out
again as a new trial. The original client's late report of a released trial is still
accepted (it is a real measurement); a second report of a trial is not recorded, never
double counted: the answer says whether it repeated the first (a retry) or differed.
"""

from __future__ import annotations

import enum
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

from harmony_base.errors import (
    ClientExistsError,
    ClientNotFoundError,
    ConfigError,
    ForbiddenError,
    LeaseLostError,
    ProtocolError,
    SessionNotFoundError,
)
from harmony_base.hostinfo import HostInfo
from harmony_base.jsontypes import JSONObject
from harmony_base.space import Space
from harmony_base.tokens import new_client_secret, secret_digest, secret_matches
from harmony_base.trial import SessionStatus, TrialRecord
from harmony_core.definition import SessionDefinition
from harmony_core.session import Assignment, SessionCore

logger = logging.getLogger(__name__)

T = TypeVar("T")


class CommandKind(enum.StrEnum):
    """The commands that may change a session, as its command log names them."""

    JOIN = "join"
    FETCH = "fetch"
    REPORT = "report"
    RELEASE = "release"
    LEAVE = "leave"
    PAUSE = "pause"
    RESUME = "resume"
    RESTART = "restart"


@dataclass
class Lease:
    """A trial held by a client until ``expires`` (``time.monotonic`` seconds)."""

    trial_id: int
    client: str | None
    expires: float


@dataclass(frozen=True)
class FetchResult:
    """What a fetch answers: an assignment with its lease, or nothing for now."""

    assignment: Assignment | None
    lease_expires: float | None = None  # wall-clock seconds since the epoch


def finite_or_failure(value: float | None) -> tuple[float | None, str | None]:
    """A reported value as (value, failure): NaN and infinities become a failure reason."""
    if value is None:
        return None, None
    if not math.isfinite(value):
        return None, f"non-finite measurement {value!r}"
    return float(value), None


def check_restart_point(space: Space, point: JSONObject) -> None:
    """:class:`ConfigError` unless ``point`` is a valid point of ``space`` (on the grid)."""
    space.check_point(point)
    if not space.contains(point):
        raise ConfigError(f"restart point {point} is not in the space (off the grid or out of "
                          f"bounds); the nearest valid point is {space.snap(point)}")


class LeasedSession:
    """A :class:`SessionCore` plus leases, heartbeats, ownership checks, leave and describe.

    Every command that may change the core runs through :meth:`_command`, the hook a
    subclass overrides to make it durable. Not thread-safe: callers serialise access.
    """

    def __init__(self, definition: SessionDefinition, *, created: float) -> None:
        self.definition = definition
        self.name = definition.name
        self.created = created
        self.core = SessionCore(definition)
        self.leases: dict[int, Lease] = {}
        self.closed = False
        self._leased_at: dict[int, float] = {}
        self._reported_at: dict[int, float] = {}
        #: client id -> its host (one ``hosts`` entry of :meth:`describe`)
        self._hosts: dict[str, HostInfo] = {}
        #: the last fetch each client was answered: (request id, trial id), for retries
        self._answered: dict[str, tuple[str, int]] = {}
        #: client id -> SHA-256 digest of the secret its join was issued (never the secret)
        self._secret_digests: dict[str, str] = {}

    # -- the command hook -------------------------------------------------------
    def _command(self, kind: CommandKind, payload: dict[str, Any], client: str | None,
                 action: Callable[[], T], touched: Callable[[T], list[int]] = lambda _: [],
                 host: HostInfo | None = None) -> T:
        """Run one core command (a subclass logs it durably; ``host`` is a changed host row)."""
        if self.closed:
            raise SessionNotFoundError(f"session {self.name!r} has been closed")
        return action()

    # -- commands -----------------------------------------------------------------
    def join(self, client: str, host: JSONObject | None = None,
             secret: str | None = None) -> str | None:
        """Register a client and its host metadata (hostname, CPUs, RAM, OS).

        A new client is issued a secret, returned here and never again (the session keeps
        its digest, in the command log). A client that has joined may join again (to update
        its host) only with that secret: :class:`ClientExistsError` otherwise, and nothing
        changes; returns ``None`` then.
        """
        previous = self._hosts.get(client)
        row = HostInfo.of(client, previous.joined if previous is not None else time.time(), host)
        if client in self.core.clients:
            digest = self._secret_digests.get(client)
            if digest is None or not secret_matches(secret, digest):
                raise ClientExistsError(
                    f"session {self.name!r}: client {client!r} has already joined; a second "
                    f"join must prove it is that client by sending its secret (what the first "
                    f"join answered), or join under another client id")
            self._command(CommandKind.JOIN, {"client": client}, client, lambda: None, host=row)
            self._hosts[client] = row
            return None
        issued = new_client_secret()
        digest = secret_digest(issued)
        self._command(CommandKind.JOIN, {"client": client, "secret_sha256": digest}, client,
                      lambda: self.core.join(client), host=row)
        self._hosts[client] = row
        self._secret_digests[client] = digest
        return issued

    def authenticate(self, client: str, secret: str | None) -> None:
        """Check that the caller is ``client``: it joined and ``secret`` is the one its join
        was issued. :class:`ClientNotFoundError` for a client that never joined,
        :class:`ForbiddenError` for a missing or wrong secret (one hash and one
        constant-time compare)."""
        digest = self._secret_digests.get(client)
        if digest is None:
            if client not in self.core.clients:
                raise ClientNotFoundError(
                    f"session {self.name!r}: client {client!r} never joined this session; "
                    f"join first (its answer carries the secret the other commands need)")
            raise ForbiddenError(
                f"session {self.name!r}: client {client!r} joined without a secret (before "
                f"this server issued them) and cannot prove its identity; join again under "
                f"a new client id")
        if not secret_matches(secret, digest):
            raise ForbiddenError(
                f"session {self.name!r}: {'a wrong' if secret else 'no'} client secret for "
                f"client {client!r}; send the secret its join answered")

    def try_fetch(self, client: str, request: str | None = None) -> FetchResult:
        """One non-blocking fetch: expire leases, then ask the core for a trial.

        ``request`` makes a retried fetch idempotent: when the client repeats the request id
        of a fetch whose answer it never received, it gets the same (still leased) trial.
        """
        self.expire_leases()
        if request is not None:
            repeated = self._answered.get(client)
            if repeated is not None and repeated[0] == request and repeated[1] in self.leases:
                return self._leased(self.core.trial(repeated[1]))
        if client not in self.core.clients:
            self.join(client)
        payload: JSONObject = {"client": client}
        if request is not None:
            payload["request"] = request
        assignment = self._command(
            CommandKind.FETCH, payload, client, lambda: self._fetch_and_lease(client, request),
            touched=lambda a: [a.trial_id] if a is not None else [])
        if assignment is None:
            return FetchResult(None)
        return self._leased(self.core.trial(assignment.trial_id))

    def _leased(self, record: TrialRecord) -> FetchResult:
        lease = self.leases[record.id]
        return FetchResult(Assignment(record.id, dict(record.point), record.candidate),
                           time.time() + (lease.expires - time.monotonic()))

    def _fetch_and_lease(self, client: str, request: str | None) -> Assignment | None:
        assignment = self.core.fetch(client)
        if assignment is not None:
            self.leases[assignment.trial_id] = Lease(
                assignment.trial_id, client, time.monotonic() + self.definition.lease_seconds)
            self._leased_at[assignment.trial_id] = time.time()
            if request is not None:
                self._answered[client] = (request, assignment.trial_id)
        return assignment

    def _check_holder(self, record: TrialRecord, client: str, action: str) -> None:
        """:class:`LeaseLostError` unless ``client`` is the one the trial was handed to."""
        if record.client != client:  # which client holds it is not said: not the caller's
            raise LeaseLostError(
                f"session {self.name!r}: trial {record.id} was handed to another client, not "
                f"to {client!r}; only the client holding a trial may {action} it")

    def report(self, trial_id: int, value: float | None = None, failure: str | None = None,
               client: str | None = None) -> bool:
        """Record a measurement; ``False`` when the trial was already reported (ignored).

        :class:`LeaseLostError` when ``client`` is not the client the trial was handed to.
        """
        if not client:
            raise ProtocolError("report: 'client' must name the client that fetched the trial")
        record = self.core.trial(trial_id)  # TrialError for an unknown id, before any change
        self._check_holder(record, client, "report")
        value, non_finite = finite_or_failure(value)
        failure = failure if failure is not None else non_finite
        if record.status.reported:
            return False
        payload = {"trial_id": trial_id, "value": value, "failure": failure, "client": client}
        self._reported_at[trial_id] = time.time()
        accepted = self._command(CommandKind.REPORT, payload, client,
                                 lambda: self.core.report(trial_id, value, failure, client),
                                 touched=lambda ok: [trial_id] if ok else [])
        self.leases.pop(trial_id, None)
        return accepted

    def report_answer(self, trial_id: int, value: float | None = None,
                      failure: str | None = None, client: str | None = None) -> JSONObject:
        """:meth:`report` as the API answers it: ``accepted``, and for a report that was not,
        ``duplicate`` -- true when it repeats the recorded outcome (a retry after a lost
        answer), false with a ``reason`` when it tried to change a reported trial."""
        accepted = self.report(trial_id, value, failure, client)
        if accepted:
            return {"accepted": True}
        record = self.core.trial(trial_id)
        value, non_finite = finite_or_failure(value)
        failure = failure if failure is not None else non_finite
        if (record.value, record.failure) == (value, failure):
            return {"accepted": False, "duplicate": True}
        return {"accepted": False, "duplicate": False,
                "reason": f"trial {trial_id} was already reported with another outcome; a "
                          f"trial's first report stands"}

    def heartbeat(self, trial_id: int, client: str | None) -> float:
        """Extend the lease ``client`` holds on a trial; returns the new expiry (epoch seconds).

        :class:`LeaseLostError` when the trial is not leased any more, or not to ``client``.
        """
        if not client:
            raise ProtocolError("heartbeat: 'client' must name the client holding the lease")
        record = self.core.trial(trial_id)
        self.expire_leases()
        lease = self.leases.get(trial_id)
        if lease is None:
            raise LeaseLostError(f"session {self.name!r}: trial {trial_id} is {record.status}, "
                                 f"not leased; there is no lease to extend",
                                 holder=None)
        self._check_holder(record, client, "heartbeat")
        lease.expires = time.monotonic() + self.definition.lease_seconds
        return time.time() + self.definition.lease_seconds

    def release(self, trial_id: int) -> None:
        """Give a trial's point back to the session (lease expired or client left)."""
        self.leases.pop(trial_id, None)
        self._command(CommandKind.RELEASE, {"trial_id": trial_id}, None,
                      lambda: self.core.release(trial_id), touched=lambda _: [trial_id])

    def expire_leases(self, now: float | None = None) -> int:
        """Release every trial whose lease has run out; returns how many."""
        now = time.monotonic() if now is None else now
        expired = [tid for tid, lease in self.leases.items() if lease.expires <= now]
        for tid in expired:
            logger.info("session %s: lease of trial %d (client %s) expired; handing it out again",
                        self.name, tid, self.leases[tid].client)
            self.release(tid)
        return len(expired)

    def leave(self, client: str) -> int:
        """A client leaves: its leased trials are released; returns how many.

        :class:`ClientNotFoundError` for a client that never joined (it is not made a host).
        """
        if client not in self.core.clients:
            raise ClientNotFoundError(f"session {self.name!r}: client {client!r} never joined "
                                      f"this session, so it cannot leave it")
        mine = [tid for tid, lease in self.leases.items() if lease.client == client]
        for tid in mine:
            self.release(tid)
        now = time.time()
        row = replace(self._hosts.get(client, HostInfo(client, now)), left=now)
        self._command(CommandKind.LEAVE, {"client": client}, client, lambda: None, host=row)
        self._hosts[client] = row
        return len(mine)

    def pause(self) -> None:
        self._command(CommandKind.PAUSE, {}, None, self.core.pause)

    def resume(self) -> None:
        self._command(CommandKind.RESUME, {}, None, self.core.resume)

    def restart(self, point: dict[str, Any] | None = None) -> None:
        """Start the search again, optionally from ``point`` (checked against the space)."""
        if point is not None:
            check_restart_point(self.core.space, point)
        self._command(CommandKind.RESTART, {"point": point}, None,
                      lambda: self.core.restart(point))

    def close(self) -> None:
        """The session ends (killed or shut down): plugins' fini; every lease is dropped."""
        if not self.closed:
            self.closed = True
            self.leases.clear()
            self.core.close()

    # -- queries ------------------------------------------------------------------
    def best(self) -> JSONObject | None:
        best = self.core.best()
        return None if best is None else {"point": best[0], "value": best[1]}

    def status(self) -> SessionStatus:
        return self.core.status

    def summary(self) -> JSONObject:
        """The short form used by the session list."""
        counts = self.core.counts()
        return {"name": self.name, "status": self.status(), "strategy": self.definition.strategy,
                "objective": self.definition.objective,
                "goal": "maximize" if self.definition.maximize else "minimize",
                "best": self.best(), "trials": len(self.core.trials()),
                "completed": counts.get("completed", 0), "clients": len(self.core.clients),
                "created": self.created}

    def describe(self) -> JSONObject:
        """The full status: summary, counts, leases, hosts and the definition."""
        return {**self.summary(), "paused": self.core.paused, "converged": self.core.converged,
                "convergence_reason": self.core.convergence_reason,
                "counts": self.core.counts(), "leases": len(self.leases),
                "hosts": [asdict(row) for row in self._hosts.values()],
                "definition": self.definition.to_dict()}

    def record(self, trial_id: int) -> TrialRecord:
        """The core's record of a trial with its lease and report times."""
        return self._timed(self.core.trial(trial_id))

    def records(self) -> list[TrialRecord]:
        """Every trial, in id order, with its lease and report times."""
        return [self._timed(r) for r in self.core.trials()]

    def _timed(self, record: TrialRecord) -> TrialRecord:
        return replace(record, leased_at=self._leased_at.get(record.id),
                       reported_at=self._reported_at.get(record.id))

    def trial_dicts(self) -> list[JSONObject]:
        """Every trial with its lease and timing information (the ``/trials`` answer)."""
        now = time.monotonic()
        out = []
        for record in self.records():
            lease = self.leases.get(record.id)
            remaining = None if lease is None else max(lease.expires - now, 0.0)
            out.append({**record.to_dict(), "lease_remaining": remaining})
        return out
