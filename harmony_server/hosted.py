"""One session served over the network: a :class:`LeasedSession` made durable.

Leases, ownership and the queries live in :mod:`harmony_core.leased` (shared with the client's
standalone mode); this adds the durable command log and the long poll. Every command that
changes the core (its ``version`` moves) is appended to the store's command log and
committed before the caller gets an answer; replaying that log on a fresh core rebuilds
the session after a crash.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import TypeVar

from harmony_base.errors import (
    ProtocolError,
    ReplayMismatchError,
    SessionNotFoundError,
    TrialError,
)
from harmony_base.hostinfo import HostInfo
from harmony_base.jsontypes import JSONObject
from harmony_base.trial import TrialStatus
from harmony_core.definition import SessionDefinition
from harmony_core.leased import CommandKind, FetchResult, Lease, LeasedSession
from harmony_server.protocol import UnavailableError
from harmony_server.stats import ServerStats
from harmony_server.store import CommandRecord, Store, StoreError

__all__ = ["FetchResult", "HostedSession", "Lease", "ReplayMismatchError"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: how often a long poll checks that its client is still connected (seconds)
_DISCONNECT_CHECK = 0.5



class HostedSession(LeasedSession):
    """A leased session with a durable command log and wake-ups for long polls."""

    def __init__(self, definition: SessionDefinition, store: Store, *, created: float,
                 stats: ServerStats | None = None) -> None:
        super().__init__(definition, created=created)
        self.store = store
        self.stats = stats if stats is not None else ServerStats()
        self.seq = 0
        self._stale = False  # the core may differ from the log: rebuild before the next command
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
        hosted._hosts = {row.client_id: row for row in store.clients(definition.name)}
        now = time.monotonic()
        for record in hosted.core.trials():
            if record.status is TrialStatus.LEASED:
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
        kind = next((k for k in CommandKind if k.value == command.kind), None)
        if kind is CommandKind.JOIN:
            core.join(p["client"])
            if p.get("secret_sha256"):  # absent in logs written before clients had secrets
                self._secret_digests[p["client"]] = p["secret_sha256"]
        elif kind is CommandKind.FETCH:
            got = core.fetch(p["client"])
            got_id = got.trial_id if got is not None else None
            if got is not None and p.get("request") is not None:
                self._answered[p["client"]] = (p["request"], got.trial_id)
            if got_id != p.get("trial_id"):
                raise ReplayMismatchError(
                    f"session {self.name!r}: replaying fetch seq {command.seq} handed out trial "
                    f"{got_id}, the log says {p.get('trial_id')}")
        elif kind is CommandKind.REPORT:
            core.report(p["trial_id"], p.get("value"), p.get("failure"), p.get("client"))
        elif kind is CommandKind.RELEASE:
            core.release(p["trial_id"])
        elif kind is CommandKind.PAUSE:
            core.pause()
        elif kind is CommandKind.RESUME:
            core.resume()
        elif kind is CommandKind.RESTART:
            core.restart(p.get("point"))
        else:  # never logged (leave changes no core state), or not ours
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
        self._hosts, self._answered = fresh._hosts, fresh._answered
        self._secret_digests = fresh._secret_digests
        self._stale = False
        try:
            old.close()
        except Exception:  # the discarded core's plugins must not break the rebuild
            logger.exception("session %s: closing the discarded core failed", self.name)

    # -- the logged command wrapper ----------------------------------------------
    def _command(self, kind: CommandKind, payload: JSONObject, client: str | None,
                 action: Callable[[], T], touched: Callable[[T], list[int]] = lambda _: [],
                 host: HostInfo | None = None) -> T:
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
        if self.core.version == before and host is None:
            return result
        log: list[CommandRecord] = []
        if self.core.version != before:
            payload = dict(payload)
            if kind is CommandKind.FETCH:  # the trial handed out: the one it touched, if any
                payload["trial_id"] = next(iter(touched(result)), None)
            log.append(CommandRecord(self.seq + 1, kind.value, payload, time.time(), client))
        rows = [self.record(tid) for tid in touched(result)]
        try:
            self.store.write(self.name, log, rows, [host] if host is not None else [])
        except StoreError:
            self._rebuild()
            raise UnavailableError(f"session {self.name!r}: the store refused the write; "
                                   f"the command was not applied, retry later") from None
        except Exception:
            # not the store's fault (a value it cannot hold got past the edge): the memory
            # moved and the log did not, so put the memory back as the log says
            logger.exception("session %s: %s could not be written; undoing it in memory",
                             self.name, kind)
            self._rebuild()
            raise
        self.seq += len(log)
        if log:
            self._notify()
        return result

    def _notify(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    # -- commands -----------------------------------------------------------------
    async def fetch(self, client: str, wait: float, *, request: str | None = None,
                    closing: asyncio.Event | None = None,
                    disconnected: Callable[[], bool] | None = None) -> FetchResult:
        """Long-poll fetch: a trial as soon as one is ready, or nothing after ``wait`` seconds.

        ``disconnected`` tells whether the asking client has gone away: the poll then ends
        without taking a trial, so no point is leased to a client that cannot receive it.
        """
        if not math.isfinite(wait) or wait < 0:
            # a NaN deadline would poison the event loop's timer heap for every session
            raise ProtocolError(f"fetch: 'wait' must be a finite number >= 0, got {wait!r}")
        deadline = time.monotonic() + wait
        while True:
            if self.closed:
                raise SessionNotFoundError(f"session {self.name!r} has been killed")
            if disconnected is not None and disconnected():
                logger.info("session %s: client %s went away during its long poll",
                            self.name, client)
                self.stats.fetch_waits += 1
                return FetchResult(None)
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
            if disconnected is not None:
                timeout = min(timeout, _DISCONNECT_CHECK)
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                pass

    def report(self, trial_id: int, value: float | None = None, failure: str | None = None,
               client: str | None = None) -> bool:
        accepted = super().report(trial_id, value, failure, client)
        if accepted:
            self.stats.reports += 1
        else:
            self.stats.duplicate_reports += 1
        return accepted

    def expire_leases(self, now: float | None = None) -> int:
        expired = super().expire_leases(now)
        self.stats.leases_expired += expired
        return expired

    def close(self) -> None:
        """The session ends (killed or server shutdown): plugins' fini, wake every waiter."""
        try:
            super().close()
        finally:
            self._notify()

    def describe(self) -> JSONObject:
        return {**super().describe(), "seq": self.seq}
