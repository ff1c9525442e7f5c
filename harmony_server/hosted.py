"""One session served over the network: a :class:`SessionCore` plus leases and durability.

Every command that changes the core (its ``version`` moves) is appended to the store's
command log and committed before the caller gets an answer; replaying that log on a fresh
core rebuilds the session after a crash. Leases live here, not in the core: a fetched
trial belongs to its client until ``lease_seconds`` pass without a report or heartbeat,
then the trial is released (a logged command) and its point is handed out again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any, TypeVar

from harmony.definition import SessionDefinition
from harmony.errors import ConfigError, HarmonyError, SessionNotFoundError, TrialError
from harmony.session import Assignment, SessionCore, TrialRecord
from harmony_server.protocol import LeaseLostError, UnavailableError, finite_or_failure
from harmony_server.stats import ServerStats
from harmony_server.store import ClientRow, CommandRecord, Store, StoreError, TrialRow
from strategies.space import Space

logger = logging.getLogger(__name__)

T = TypeVar("T")


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


class ReplayMismatchError(HarmonyError):
    """Replaying the command log did not reproduce what was logged (non-deterministic code)."""


def _check_restart_point(space: Space, point: dict[str, Any]) -> None:
    space.check_point(point)
    if not space.contains(point):
        raise ConfigError(f"restart point {point} is not in the space (off the grid or out of "
                          f"bounds); the nearest valid point is {space.snap(point)}")


class HostedSession:
    """A session core wrapped with leases, a durable command log and wake-ups for long polls."""

    def __init__(self, definition: SessionDefinition, store: Store, *, created: float,
                 stats: ServerStats | None = None) -> None:
        self.definition = definition
        self.name = definition.name
        self.created = created
        self.store = store
        self.stats = stats if stats is not None else ServerStats()
        self.core = SessionCore(definition)
        self.seq = 0
        self.leases: dict[int, Lease] = {}
        self.closed = False
        self._stale = False  # the core may differ from the log: rebuild before the next command
        self._leased_at: dict[int, float] = {}
        self._reported_at: dict[int, float] = {}
        self._clients: dict[str, ClientRow] = {}
        #: the last fetch each client was answered: (request id, trial id), for retries
        self._answered: dict[str, tuple[str, int]] = {}
        self._changed = asyncio.Event()

    # -- recovery ---------------------------------------------------------------
    @classmethod
    def recover(cls, definition: SessionDefinition, store: Store, *, created: float,
                stats: ServerStats | None = None) -> HostedSession:
        """Rebuild a session from its command log; outstanding trials get a fresh lease."""
        hosted = cls(definition, store, created=created, stats=stats)
        hosted._replay(store.commands(definition.name))
        for row in store.trials(definition.name):
            if row.leased_at is not None:
                hosted._leased_at[row.id] = row.leased_at
            if row.reported_at is not None:
                hosted._reported_at[row.id] = row.reported_at
        hosted._clients = {row.client_id: row for row in store.clients(definition.name)}
        now = time.monotonic()
        for record in hosted.core.trials():
            if record.status == "leased":
                hosted.leases[record.id] = Lease(record.id, record.client,
                                                 now + definition.lease_seconds)
        logger.info("session %s: replayed %d commands, %d trials, %d outstanding leases",
                    hosted.name, hosted.seq, len(hosted.core.trials()), len(hosted.leases))
        return hosted

    def _replay(self, log: list[CommandRecord]) -> None:
        core = self.core
        core.replaying = True
        try:
            for command in log:
                if command.seq != self.seq + 1:
                    raise ReplayMismatchError(f"session {self.name!r}: command log jumps from "
                                              f"seq {self.seq} to {command.seq}")
                self._replay_one(command)
                self.seq = command.seq
        finally:
            core.replaying = False

    def _replay_one(self, command: CommandRecord) -> None:
        core, p = self.core, command.payload
        if command.kind == "join":
            core.join(p["client"])
        elif command.kind == "fetch":
            got = core.fetch(p["client"])
            got_id = got.trial_id if got is not None else None
            if got is not None and p.get("request") is not None:
                self._answered[p["client"]] = (p["request"], got.trial_id)
            if got_id != p.get("trial_id"):
                raise ReplayMismatchError(
                    f"session {self.name!r}: replaying fetch seq {command.seq} handed out trial "
                    f"{got_id}, the log says {p.get('trial_id')}")
        elif command.kind == "report":
            core.report(p["trial_id"], p.get("value"), p.get("failure"), p.get("client"))
        elif command.kind == "release":
            core.release(p["trial_id"])
        elif command.kind == "pause":
            core.pause()
        elif command.kind == "resume":
            core.resume()
        elif command.kind == "restart":
            core.restart(p.get("point"))
        else:
            raise ReplayMismatchError(f"session {self.name!r}: unknown command kind "
                                      f"{command.kind!r} at seq {command.seq}")

    def _rebuild(self) -> None:
        """Throw the in-memory core away and rebuild it from the durable log.

        If the store cannot be read right now the session stays marked stale and every
        command retries the rebuild first (answering 503 until it succeeds).
        """
        logger.warning("session %s: rebuilding from the command log", self.name)
        self._stale = True
        try:
            fresh = HostedSession.recover(self.definition, self.store, created=self.created,
                                          stats=self.stats)
        except Exception as exc:
            logger.error("session %s: cannot rebuild from the store now (%s); will retry",
                         self.name, exc)
            return
        old, leases = self.core, self.leases
        # keep the deadlines of leases we already had; add those only the log knows
        fresh.leases = {tid: lease for tid, lease in leases.items() if tid in fresh.leases} | {
            tid: lease for tid, lease in fresh.leases.items() if tid not in leases}
        self.core, self.seq, self.leases = fresh.core, fresh.seq, fresh.leases
        self._leased_at, self._reported_at = fresh._leased_at, fresh._reported_at
        self._clients, self._answered = fresh._clients, fresh._answered
        self._stale = False
        try:
            old.close()
        except Exception:  # the discarded core's plugins must not break the rebuild
            logger.exception("session %s: closing the discarded core failed", self.name)

    # -- the logged command wrapper ----------------------------------------------
    def _command(self, kind: str, payload: dict[str, Any], client: str | None,
                 action: Callable[[], T], touched: Callable[[T], list[int]] = lambda _: [],
                 client_row: ClientRow | None = None) -> T:
        """Run one core command; if it changed the core, log it durably before returning."""
        if self.closed:
            raise SessionNotFoundError(f"session {self.name!r} has been killed")
        if self._stale:
            self._rebuild()
            if self._stale:
                raise UnavailableError(f"session {self.name!r} cannot be restored from the "
                                       f"store right now; retry later")
        before = self.core.version
        try:
            result = action()
        except TrialError:
            raise  # checked before any state change (unknown trial id)
        except Exception:
            logger.exception("session %s: %s failed; restoring the last durable state",
                             self.name, kind)
            self._rebuild()
            raise
        if self.core.version == before and client_row is None:
            return result
        log: list[CommandRecord] = []
        if self.core.version != before:
            payload = dict(payload)
            if kind == "fetch":
                payload["trial_id"] = result.trial_id if result is not None else None  # type: ignore[attr-defined]
            log.append(CommandRecord(self.seq + 1, kind, payload, time.time(), client))
        rows = [self._trial_row(self.core.trial(tid)) for tid in touched(result)]
        try:
            self.store.write(self.name, log, rows, [client_row] if client_row else [])
        except StoreError:
            self._rebuild()
            raise UnavailableError(f"session {self.name!r}: the store refused the write; "
                                   f"the command was not applied, retry later") from None
        self.seq += len(log)
        if log:
            self._notify()
        return result

    def _trial_row(self, record: TrialRecord) -> TrialRow:
        return TrialRow(record.id, record.candidate, dict(record.point), record.client,
                        record.status, record.value, record.failure,
                        self._leased_at.get(record.id), self._reported_at.get(record.id))

    def _notify(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    # -- commands -----------------------------------------------------------------
    def join(self, client: str, host: dict[str, Any] | None = None) -> None:
        """Register a client and its host metadata (hostname, CPUs, RAM, OS)."""
        host = host or {}
        previous = self._clients.get(client)
        row = ClientRow(client_id=client,
                        joined=previous.joined if previous is not None else time.time(),
                        hostname=host.get("hostname"), cpu_count=host.get("cpu_count"),
                        ram_bytes=host.get("ram_bytes"), os=host.get("os"),
                        python=host.get("python"))
        self._command("join", {"client": client}, client, lambda: self.core.join(client),
                      client_row=row)
        self._clients[client] = row

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
        payload: dict[str, Any] = {"client": client}
        if request is not None:
            payload["request"] = request
        assignment = self._command(
            "fetch", payload, client, lambda: self._fetch_and_lease(client, request),
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

    async def fetch(self, client: str, wait: float, *, request: str | None = None,
                    closing: asyncio.Event | None = None) -> FetchResult:
        """Long-poll fetch: a trial as soon as one is ready, or nothing after ``wait`` seconds."""
        deadline = time.monotonic() + wait
        while True:
            if self.closed:
                raise SessionNotFoundError(f"session {self.name!r} has been killed")
            result = self.try_fetch(client, request)
            if result.assignment is not None:
                self.stats.fetch_trials += 1
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.closed or (self.core.converged and not self.core.paused) \
                    or (closing is not None and closing.is_set()):
                self.stats.fetch_waits += 1
                return result
            next_expiry = min((lease.expires for lease in self.leases.values()), default=None)
            timeout = remaining if next_expiry is None else min(
                remaining, max(next_expiry - time.monotonic(), 0.0) + 0.001)
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                pass

    def report(self, trial_id: int, value: float | None = None, failure: str | None = None,
               client: str | None = None) -> bool:
        """Record a measurement; ``False`` when the trial was already reported (ignored)."""
        self.core.trial(trial_id)  # TrialError for an unknown id, before any change
        value, non_finite = finite_or_failure(value)
        failure = failure if failure is not None else non_finite
        payload = {"trial_id": trial_id, "value": value, "failure": failure, "client": client}
        if self.core.trial(trial_id).status in ("done", "failed"):
            self.stats.duplicate_reports += 1
            return False
        self._reported_at[trial_id] = time.time()
        accepted = self._command("report", payload, client,
                                 lambda: self.core.report(trial_id, value, failure, client),
                                 touched=lambda ok: [trial_id] if ok else [])
        self.leases.pop(trial_id, None)
        if accepted:
            self.stats.reports += 1
        else:
            self.stats.duplicate_reports += 1
        return accepted

    def heartbeat(self, trial_id: int, client: str | None = None) -> float:
        """Extend a trial's lease; returns the new expiry (wall-clock seconds since the epoch)."""
        record = self.core.trial(trial_id)
        self.expire_leases()
        lease = self.leases.get(trial_id)
        if lease is None:
            raise LeaseLostError(f"session {self.name!r}: trial {trial_id} is {record.status}, "
                                 f"not leased; there is no lease to extend")
        lease.expires = time.monotonic() + self.definition.lease_seconds
        return time.time() + self.definition.lease_seconds

    def release(self, trial_id: int) -> None:
        """Give a trial's point back to the session (lease expired or client left)."""
        self.leases.pop(trial_id, None)
        self._command("release", {"trial_id": trial_id}, None,
                      lambda: self.core.release(trial_id), touched=lambda _: [trial_id])

    def expire_leases(self, now: float | None = None) -> int:
        """Release every trial whose lease has run out; returns how many."""
        now = time.monotonic() if now is None else now
        expired = [tid for tid, lease in self.leases.items() if lease.expires <= now]
        for tid in expired:
            logger.info("session %s: lease of trial %d (client %s) expired; handing it out again",
                        self.name, tid, self.leases[tid].client)
            self.release(tid)
            self.stats.leases_expired += 1
        return len(expired)

    def leave(self, client: str) -> int:
        """A client leaves: its leased trials are released; returns how many."""
        mine = [tid for tid, lease in self.leases.items() if lease.client == client]
        for tid in mine:
            self.release(tid)
        now = time.time()
        row = replace(self._clients.get(client, ClientRow(client_id=client, joined=now)), left=now)
        self._clients[client] = row
        self.store.write(self.name, [], [], [row])
        return len(mine)

    def pause(self) -> None:
        self._command("pause", {}, None, self.core.pause)

    def resume(self) -> None:
        self._command("resume", {}, None, self.core.resume)

    def restart(self, point: dict[str, Any] | None = None) -> None:
        """Start the search again, optionally from ``point`` (checked against the space)."""
        if point is not None:
            _check_restart_point(self.core.space, point)
        self._command("restart", {"point": point}, None, lambda: self.core.restart(point))

    def close(self) -> None:
        """The session ends (killed or server shutdown): plugins' fini, wake every waiter."""
        if not self.closed:
            self.closed = True
            self.leases.clear()
            try:
                self.core.close()
            finally:
                self._notify()

    # -- queries ------------------------------------------------------------------
    def best(self) -> dict[str, Any] | None:
        best = self.core.best()
        return None if best is None else {"point": best[0], "value": best[1]}

    def status(self) -> str:
        return self.core.status

    def summary(self) -> dict[str, Any]:
        """The short form used by the session list."""
        counts = self.core.counts()
        return {"name": self.name, "status": self.status(), "strategy": self.definition.strategy,
                "objective": self.definition.objective,
                "goal": "maximize" if self.definition.maximize else "minimize",
                "best": self.best(), "trials": len(self.core.trials()),
                "completed": counts.get("completed", 0), "clients": len(self.core.clients),
                "created": self.created}

    def describe(self) -> dict[str, Any]:
        """The full status: summary, counts, leases and the definition."""
        return {**self.summary(), "paused": self.core.paused, "converged": self.core.converged,
                "counts": self.core.counts(), "leases": len(self.leases), "seq": self.seq,
                "hosts": [asdict(row) for row in self._clients.values()],
                "definition": self.definition.to_dict()}

    def trial_dicts(self) -> list[dict[str, Any]]:
        """Every trial with its lease and timing information."""
        out = []
        now = time.monotonic()
        for record in self.core.trials():
            lease = self.leases.get(record.id)
            remaining = None if lease is None else max(lease.expires - now, 0.0)
            out.append({**record.to_dict(), "leased_at": self._leased_at.get(record.id),
                        "reported_at": self._reported_at.get(record.id),
                        "lease_remaining": remaining})
        return out
