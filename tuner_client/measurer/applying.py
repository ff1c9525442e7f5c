"""Putting settings in force on the server, and putting the original ones back.

Online knobs go through :func:`tuner_client.knobs.apply.apply_online_knobs` (verified in a fresh
session); offline knobs through the controller's restart with rollback, the workload stopped
meanwhile. A configuration that the memory budget forbids is never applied.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, cast

import psycopg

from harmony_base.errors import ConfigError, DatabaseError, HarmonyError, KnobApplyError
from tuner_client.knobs.apply import apply_online_knobs, reload_and_wait
from tuner_client.knobs.in_force import InForce
from tuner_client.measurer.connection import AdminConnection
from tuner_client.measurer.options import ApplyHooks, ServerAccess
from tuner_client.measurer.prewarm import BufferRecord, Prewarmer, PrewarmResult
from tuner_client.measurer.traffic import Traffic
from tuner_client.servers.controllers.managed import NO_RESTART

logger = logging.getLogger(__name__)

#: what a failed change of online knobs raises (the server keeps its previous values)
APPLY_ERRORS = (KnobApplyError, ConfigError, DatabaseError, psycopg.Error)


class AutoConfWriter(Protocol):
    """A controller that can write ``postgresql.auto.conf`` back and restart the server."""

    def write_auto_conf(self, text: str) -> None: ...

    def stop_server(self, timeout_s: float) -> None: ...

    def start_server(self, timeout_s: float) -> None: ...


@dataclass
class ApplyOutcome:
    """What :meth:`Applier.change` did: whether anything changed, the seconds the restart
    and the online apply took, and why it failed (the server then keeps its last good
    configuration)."""

    changed: bool
    restart_s: float | None = None
    apply_s: float | None = None
    failure: str | None = None
    #: what the warm restart loaded back into the buffer (None: no restart, or prewarm off)
    prewarm: PrewarmResult | None = None


class Applier:
    """Changes the server's configuration: only what differs from :class:`InForce`, online
    knobs by ALTER SYSTEM and reload, offline knobs by a restart the controller rolls back
    when the server does not come up. ``applied_log`` keeps every configuration sent.

    With ``prewarm`` every restart is warm (:mod:`tuner_client.measurer.prewarm`): the
    buffer's blocks are recorded before it and loaded back after it; ``prewarms`` keeps what
    each restart restored."""

    def __init__(self, server: ServerAccess, hooks: ApplyHooks, in_force: InForce,
                 connection: AdminConnection, traffic: Traffic, *,
                 prewarm: bool = True) -> None:
        self.controller = server.controller
        self.restart_timeout_s = server.restart_timeout_s
        self.feasible = hooks.feasible
        self.on_restart = hooks.on_restart
        self.in_force = in_force
        self.connection = connection
        self.traffic = traffic
        self.applied_log: list[dict[str, str]] = []
        self.prewarm = prewarm
        self.prewarmer = Prewarmer()
        self.prewarms: list[PrewarmResult] = []
        #: what the latest restart restored (None: prewarm off)
        self.last_prewarm: PrewarmResult | None = None

    def change(self, settings: Mapping[str, str], *, check_budget: bool = True,
               prewarm: bool = True) -> tuple[ApplyOutcome, bool]:
        """Put ``settings`` in force, and say whether a restart was part of it
        (``prewarm=False``: a restart leaves the buffer cold even when prewarm is on)."""
        changed = self.in_force.differs(settings)
        if not changed:
            return ApplyOutcome(changed=False), False
        if self.feasible is not None and check_budget:
            reason = self.feasible({**self.in_force.values, **settings}, changed)
            if reason is not None:
                logger.warning("refusing to apply %s: %s", changed, reason)
                return ApplyOutcome(changed=False, failure=f"infeasible: {reason}"), False
        offline = self.in_force.offline(changed)
        online = {n: v for n, v in changed.items() if n not in offline}
        outcome = ApplyOutcome(changed=True)
        if offline:
            outcome.restart_s, outcome.failure = self.restart(offline, prewarm=prewarm)
            outcome.prewarm = self.last_prewarm
            if outcome.failure is not None:
                return outcome, True
        if online:
            started = time.monotonic()
            self.applied_log.append(dict(online))
            try:
                self.set_online(online)
            except APPLY_ERRORS as exc:
                outcome.failure = f"applying {online} failed: {exc}"
                logger.warning("%s", outcome.failure)
                self.in_force.refresh(self.connection, list(online))
                return outcome, bool(offline)
            outcome.apply_s = time.monotonic() - started
        self.in_force.applied_at = self.in_force.changed_at = time.monotonic()
        return outcome, bool(offline)

    def set_online(self, online: dict[str, str]) -> None:
        """Reload-time knobs by ALTER SYSTEM and reload, verified (raises on failure); a
        controller that may not change the server (managed mode) refuses, nothing sent."""
        if self.controller is not None and not self.controller.changes_server:
            raise KnobApplyError(f"not applying {online} server-wide: {NO_RESTART}; managed "
                                 f"mode sets knobs per transaction only")
        apply_online_knobs(self.connection.live(), self.in_force.catalog, online)
        self.in_force.values.update(online)

    def restart(self, offline: dict[str, str], *,
                prewarm: bool = True) -> tuple[float, str | None]:
        """Restart the server with ``offline`` (the workload paused): the seconds it took and
        why it failed (the controller then restored the last good configuration)."""
        if self.controller is None:
            return 0.0, (f"offline knobs {sorted(offline)} need a restart, but no controller "
                         f"is configured")
        logger.info("restarting PostgreSQL with %s", offline)
        self.applied_log.append(dict(offline))
        was_running = self.traffic.running
        record = self.record_buffer() if prewarm else None
        self.traffic.stop()
        self.connection.close()
        started = time.monotonic()
        failure: str | None = None
        try:
            report = self.controller.restart_with(offline, self.restart_timeout_s)
            if not report.ok:
                failure = f"restart with {offline} failed: {report.reason or report}"
        except HarmonyError as exc:
            failure = f"restart with {offline} failed: {exc}"
        elapsed = time.monotonic() - started
        self.restarted(elapsed, failure is None)
        if failure is None:
            self.in_force.values.update(offline)
            logger.info("restart with %s took %.1f s", offline, elapsed)
        else:
            logger.warning("%s (after %.1f s); the controller restored the last good "
                           "configuration", failure, elapsed)
            self.in_force.refresh(self.connection, list(offline))
        self.load_buffer(record)
        if was_running:
            self.traffic.start()
        return elapsed, failure

    def record_buffer(self) -> BufferRecord | str | None:
        """Before a restart: the buffer's blocks, hottest first, or why not (None: prewarm
        off)."""
        if not self.prewarm:
            return None
        try:
            return self.prewarmer.record(self.connection.live())
        except (HarmonyError, psycopg.Error) as exc:
            return f"the buffer could not be read before the restart: {exc}"

    def load_buffer(self, record: BufferRecord | str | None) -> None:
        """After a restart: load ``record`` back (the workload still stopped), keep what it
        restored in ``last_prewarm`` and ``prewarms``."""
        self.last_prewarm = None
        if record is None:
            return
        try:
            result = self.prewarmer.load(self.connection.live(), record)
        except (HarmonyError, psycopg.Error) as exc:
            result = PrewarmResult("none", reason=f"the server was not reachable after the "
                                                  f"restart: {exc}")
        if result.method == "none":
            logger.info("restart not prewarmed: %s", result.reason)
        else:
            logger.info("warm restart: %s", result.text())
        self.last_prewarm = result
        self.prewarms.append(result)

    def restarted(self, seconds: float, ok: bool) -> None:
        if self.on_restart is not None:
            self.on_restart(seconds, ok)

    def put_back(self, back: dict[str, str]) -> str | None:
        """Restore ``back`` at once (a guardrail trip): online knobs by ALTER SYSTEM and
        reload, offline ones by a restart; why it failed, or None."""
        offline = self.in_force.offline(back)
        online = {n: v for n, v in back.items() if n not in offline}
        failure = None
        try:
            if online:
                self.set_online(online)
            if offline:
                _, failure = self.restart(offline)
        except APPLY_ERRORS as exc:
            failure = f"restoring {online} failed: {exc}"
            self.in_force.refresh(self.connection, list(online))
        return failure

    def restore(self, settings: Mapping[str, str], *, auto_conf: str | None = None) -> str:
        """Put ``settings`` back in force without warm-up or budget checks; say what was done.

        With ``auto_conf`` (the original ``postgresql.auto.conf`` text) and a controller that
        can write it, the file itself is restored, so knobs that were at their defaults go
        back to *not set* rather than to an explicit value. Extensions created for warm
        restarts are dropped afterwards.
        """
        try:
            return self._restore(settings, auto_conf)
        finally:
            if self.prewarmer.created:
                try:
                    self.prewarmer.cleanup(self.connection.live())
                except (HarmonyError, psycopg.Error) as exc:
                    logger.warning("could not drop the extensions %s created for warm "
                                   "restarts: %s", self.prewarmer.created, exc)

    def _restore(self, settings: Mapping[str, str], auto_conf: str | None) -> str:
        self.traffic.stop()
        differs = self.in_force.differs(settings)
        if auto_conf is not None and self.controller is not None \
                and hasattr(self.controller, "write_auto_conf"):
            done, differs = self._restore_auto_conf(cast(AutoConfWriter, self.controller),
                                                    settings, auto_conf, differs)
            if done is not None:
                return done
        if not differs:
            return "nothing to change"
        offline = self.in_force.offline(differs)
        if offline:
            _, failure = self.restart(offline)
            if failure is not None:
                raise HarmonyError(f"could not restore {offline}: {failure}")
        online = {n: v for n, v in differs.items() if n not in offline}
        if online:
            self.set_online(online)
        return f"set {differs} with ALTER SYSTEM"

    def _restore_auto_conf(self, controller: AutoConfWriter, settings: Mapping[str, str],
                           auto_conf: str,
                           differs: dict[str, str]) -> tuple[str | None, dict[str, str]]:
        """Write the original ``postgresql.auto.conf`` back, then restart (an offline knob
        differs) or reload: what was done, or ``None`` and what still differs."""
        offline = self.in_force.offline(differs)
        record = self.record_buffer() if offline else None
        self.connection.close()
        try:
            controller.write_auto_conf(auto_conf)
        except (HarmonyError, OSError) as exc:
            logger.warning("could not write postgresql.auto.conf back (%s); restoring "
                           "with ALTER SYSTEM instead", exc)
            return None, differs
        if offline:
            started = time.monotonic()
            controller.stop_server(self.restart_timeout_s)
            controller.start_server(self.restart_timeout_s)
            self.restarted(time.monotonic() - started, True)
            self.load_buffer(record)
        elif not reload_and_wait(self.connection.get(), self.restart_timeout_s):
            logger.warning("the reload after restoring postgresql.auto.conf was not "
                           "seen within %.0f s", self.restart_timeout_s)
        self.in_force.refresh(self.connection, list(settings))
        still = self.in_force.differs(settings)
        if not still:
            return ("postgresql.auto.conf restored" + (", restarted" if offline else
                                                        ", reloaded")), still
        logger.warning("after restoring postgresql.auto.conf %s differ from %s",
                       sorted(still), {n: settings[n] for n in still})
        return None, still
