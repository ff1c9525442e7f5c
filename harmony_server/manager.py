"""The set of sessions one server hosts: create, look up, kill, recover, and expire leases."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from harmony_base.errors import HarmonyError, SessionNotFoundError
from harmony_base.jsontypes import JSON
from harmony_base.trial import SessionStatus
from harmony_core.definition import SessionDefinition
from harmony_server.hosted import HostedSession
from harmony_server.protocol import SessionBrokenError, SessionExistsError, UnavailableError
from harmony_server.stats import ServerStats
from harmony_server.store import Store, StoreError

logger = logging.getLogger(__name__)


class SessionManager:
    """Owns every :class:`HostedSession` of a server and the store they write to."""

    def __init__(self, store: Store, *, sweep_interval: float = 0.05) -> None:
        self.store = store
        self.stats = ServerStats()
        self.sessions: dict[str, HostedSession] = {}
        #: sessions whose log could not be replayed: name -> reason (kept in the store)
        self.broken: dict[str, str] = {}
        self.sweep_interval = sweep_interval
        self._sweeper: asyncio.Task[None] | None = None
        #: sessions whose lease expiry failed in the last sweep (logged once per streak)
        self._sweep_failing: set[str] = set()

    # -- lifecycle ---------------------------------------------------------------
    def recover(self) -> None:
        """Rebuild every live session of the store by replaying its command log."""
        started = time.perf_counter()
        for stored in self.store.live_sessions():
            try:
                definition = SessionDefinition.from_dict(stored.definition,
                                                         source=f"stored session {stored.name!r}")
                self.sessions[stored.name] = HostedSession.recover(
                    definition, self.store, created=stored.created, stats=self.stats)
            except (HarmonyError, KeyError, TypeError, ValueError) as exc:
                logger.error("session %s cannot be recovered and is not served: %s",
                             stored.name, exc)
                self.broken[stored.name] = str(exc)
        logger.info("recovered %d sessions in %.3f s (%d broken)", len(self.sessions),
                    time.perf_counter() - started, len(self.broken))

    def start_sweeper(self, *, restart_delay: float = 1.0) -> None:
        """Start the supervised background task that releases expired leases."""
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(
                self._supervised("lease_sweeper", self._sweep_forever, restart_delay))

    async def _supervised(self, task: str, run: Callable[[], Awaitable[None]],
                          restart_delay: float) -> None:
        """Run a background task for the server's lifetime: when it crashes the error is
        logged and counted (``harmony_background_task_restarts_total``) and it starts again
        after ``restart_delay`` seconds. It never dies silently."""
        while True:
            try:
                await run()
                logger.error("background task %s ended on its own; starting it again", task)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("background task %s crashed; starting it again in %g s",
                                 task, restart_delay)
            self.stats.background_restarts[task] += 1
            await asyncio.sleep(restart_delay)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_interval)
            self._sweep_once(time.monotonic())

    def _sweep_once(self, now: float) -> None:
        """Expire the leases of every session; one session's failure does not stop the rest."""
        for hosted in list(self.sessions.values()):
            if hosted.leases and not hosted.closed:
                try:
                    hosted.expire_leases(now)
                except Exception as exc:
                    self.stats.background_errors["lease_sweeper"] += 1
                    if hosted.name in self._sweep_failing:  # said once per streak, counted always
                        continue
                    self._sweep_failing.add(hosted.name)
                    if isinstance(exc, HarmonyError):
                        logger.warning("session %s: could not expire leases: %s", hosted.name,
                                       exc)
                    else:
                        logger.exception("session %s: expiring leases failed", hosted.name)
                else:
                    if hosted.name in self._sweep_failing:
                        self._sweep_failing.discard(hosted.name)
                        logger.info("session %s: expiring leases works again", hosted.name)

    async def close(self) -> None:
        """Stop the sweeper and end every session (their state stays in the store)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        for hosted in self.sessions.values():
            try:
                hosted.close()
            except Exception:  # a plugin's fini must not stop the shutdown
                logger.exception("session %s: error while closing", hosted.name)

    # -- sessions ----------------------------------------------------------------
    def get(self, name: str) -> HostedSession:
        try:
            return self.sessions[name]
        except KeyError:
            if name in self.broken:
                raise SessionBrokenError(f"session {name!r} could not be recovered from the "
                                         f"store: {self.broken[name]}") from None
            raise SessionNotFoundError(f"no session named {name!r} on this server; known: "
                                       f"{sorted(self.sessions)[:20]}") from None

    def create(self, data: Mapping[str, JSON], *, exist_ok: bool = False
               ) -> tuple[HostedSession, bool]:
        """Create a session from a definition dict; returns ``(session, created)``.

        With ``exist_ok`` an existing session of the same name and definition is returned;
        a different definition under the same name is always a conflict.
        """
        definition = self.parse(data)
        existing = self.existing(definition, exist_ok=exist_ok)
        if existing is not None:
            return existing, False
        return self.add(self.build(definition), exist_ok=exist_ok)

    # the three steps of ``create``: the HTTP layer runs parse and build on a worker thread
    @staticmethod
    def parse(data: Mapping[str, JSON]) -> SessionDefinition:
        """Check a definition dict (pure: no session or store is touched)."""
        return SessionDefinition.from_dict(data, source="session definition")

    def existing(self, definition: SessionDefinition, *, exist_ok: bool
                 ) -> HostedSession | None:
        """The session already hosted under the definition's name, when ``exist_ok`` allows
        it; :class:`SessionExistsError` when the name is taken otherwise."""
        existing = self.sessions.get(definition.name)
        if existing is None and definition.name not in self.broken:
            return None
        if existing is not None and exist_ok and \
                existing.definition.to_dict() == definition.to_dict():
            return existing
        why = ("with a different definition" if exist_ok else
               "(pass exist_ok to join it, or pick another name)")
        raise SessionExistsError(f"a session named {definition.name!r} already exists {why}")

    def build(self, definition: SessionDefinition) -> HostedSession:
        """A new session's core, plugins and strategy (pure work: no store, no registry)."""
        return HostedSession(definition, self.store, created=time.time(), stats=self.stats)

    def add(self, hosted: HostedSession, *, exist_ok: bool = False
            ) -> tuple[HostedSession, bool]:
        """Store and host a session :meth:`build` made; ``(session, created)``."""
        definition = hosted.definition
        try:
            existing = self.existing(definition, exist_ok=exist_ok)  # created meanwhile?
        except SessionExistsError:
            hosted.close()
            raise
        if existing is not None:
            hosted.close()
            return existing, False
        try:
            self.store.create_session(definition.name, definition.to_dict(), hosted.created)
        except StoreError as exc:
            hosted.close()
            raise UnavailableError(f"could not store session {definition.name!r}: {exc}") from None
        self.sessions[definition.name] = hosted
        logger.info("created session %s (strategy %s, %d parameters)", definition.name,
                    definition.strategy, definition.space.dim)
        return hosted, True

    def kill(self, name: str) -> None:
        """End a session and delete everything stored for it."""
        if name in self.broken:
            self.store.delete_session(name)
            del self.broken[name]
            return
        hosted = self.get(name)
        self.store.delete_session(name)
        del self.sessions[name]
        hosted.close()
        logger.info("killed session %s", name)

    def list(self) -> list[dict[str, Any]]:
        """A summary of every session, with the broken ones flagged."""
        out = [hosted.summary() for hosted in self.sessions.values()]
        out += [{"name": name, "status": SessionStatus.BROKEN, "error": reason}
                for name, reason in self.broken.items()]
        return sorted(out, key=lambda s: s["name"])
