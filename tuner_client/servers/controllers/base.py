"""The controller protocol: restart PostgreSQL with new offline knobs, roll back on failure.

Every controller follows the same protocol in :meth:`Controller.restart_with`:

1. the server must be up; its ``postgresql.auto.conf`` is remembered as *last good* (when no
   setting is pending a restart, the file is exactly what the running server uses) and
   written next to the backups (``postgresql.auto.conf.last-good``, plus ``.original`` on
   first use);
2. the new values are written with ``ALTER SYSTEM`` (composed SQL, checked against the
   catalog), the server is stopped, a pre-check runs where the controller can do one
   (``postgres -C shared_memory_size`` on the stopped data directory, PG ≥ 15: the server
   would need more shared memory than the machine or cgroup has), then it is started and
   must accept connections within ``timeout_s``;
3. the values are verified in ``pg_settings`` of a fresh session;
4. on any failure the last good ``postgresql.auto.conf`` is put back and the server started
   again; the report says ``ok=False`` with the reason (the FATAL lines of the server log).
   Only when even that fails is :class:`DatabaseError` raised: the server is down.

Interruptions: inside ``restart_with`` SIGINT/SIGTERM are held until the restart finished or
was rolled back, then delivered. Wrap a tuning run in ``with controller.safe_restart_guard():``
to turn SIGTERM into ``SystemExit`` and, when the block is left for any reason (or the
interpreter exits), to make sure the server is running, restoring the last good
configuration when it is not. After a ``kill -9`` of the tuner, copy
``postgresql.auto.conf.last-good`` over the data directory's ``postgresql.auto.conf``, or
let the restore journal do it (:mod:`tuner_client.crashsafe`: the guard process restores the
original configuration by itself; ``harmony restore`` does it by hand).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import ClassVar

import psycopg
from psycopg.rows import TupleRow

from harmony_base.errors import DatabaseError, HarmonyError
from harmony_base.jsontypes import JSON, JSONObject
from harmony_base.registry import Registry
from tuner_client.knobs.apply import alter_system, check_settings, read_settings
from tuner_client.knobs.catalog import Knob, KnobCatalog, KnobValue

logger = logging.getLogger(__name__)

#: how long a server that is not answering is given to finish automatic crash recovery
RECOVERY_WAIT_S = 30.0

AUTO_CONF = "postgresql.auto.conf"
_FATAL_RE = re.compile(r"\b(FATAL|PANIC|ERROR):")


@dataclass
class RestartReport:
    """Outcome of one :meth:`Controller.restart_with` call."""

    ok: bool
    requested: dict[str, str]  # knob -> value written with ALTER SYSTEM
    in_force: dict[str, str] = field(default_factory=dict)  # current_setting() after it all
    restart_s: float = 0.0  # stop + start (+ rollback) wall time
    reason: str | None = None  # why the point failed (None when ok)
    rolled_back: bool = False
    precheck: str | None = None  # what the pre-check found, e.g. "shared_memory_size=143MB"


class Controller(ABC):
    """Restarts one PostgreSQL server; subclasses register with ``kind=`` (local, pg_ctl, ...)."""

    registry: ClassVar[Registry[Controller]] = Registry("controller kind")
    kind: ClassVar[str] = ""
    #: whether the tuner may change this server's configuration (ALTER SYSTEM, restarts);
    #: False for a managed server, where only sessions are tuned
    changes_server: ClassVar[bool] = True

    def __init_subclass__(cls, kind: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if kind is not None:
            Controller.registry.add(kind, cls)
            cls.kind = kind

    def __init__(self, dsn: str, *, backup_dir: Path | None = None,
                 connect_timeout_s: float = 5.0) -> None:
        self.dsn = dsn
        self.backup_dir = Path(backup_dir) if backup_dir is not None else None
        self.connect_timeout_s = connect_timeout_s
        self.last_good: str | None = None
        self.original: str | None = None
        self.restarts = 0
        self.failures = 0
        self._catalog: KnobCatalog | None = None
        self._in_restart = False
        self._held: list[int] = []

    # -- primitives subclasses provide -----------------------------------------------
    @abstractmethod
    def stop_server(self, timeout_s: float) -> None:
        """Stop the server (no-op when it is already down); DatabaseError if it will not stop."""

    @abstractmethod
    def start_server(self, timeout_s: float) -> None:
        """Start the server and wait until it accepts connections; DatabaseError with the reason."""

    @abstractmethod
    def read_auto_conf(self) -> str | None:
        """The server's ``postgresql.auto.conf`` (None when this controller cannot reach it)."""

    @abstractmethod
    def write_auto_conf(self, text: str) -> None:
        """Replace the server's ``postgresql.auto.conf`` (the server may be down)."""

    def recipe(self) -> JSONObject | None:
        """How another process rebuilds this controller (``{"kind": ..., "options": {...}}``,
        JSON; :func:`make_controller` takes it with the DSN): the restore journal keeps it so
        that the guard can restart the server after the tuner died. None: it cannot."""
        return None

    def precheck(self, knobs: Mapping[str, tuple[Knob, KnobValue]]
                 ) -> tuple[str | None, str | None]:
        """Check the stopped server's new configuration: (what was found, failure or None)."""
        return None, None

    def log_mark(self) -> int:
        """A position in the server log; :meth:`log_since` returns what was written after it."""
        return 0

    def log_since(self, mark: int) -> str:
        return ""

    # -- shared machinery ------------------------------------------------------------------
    def connect(self) -> psycopg.Connection[TupleRow]:
        """An autocommit connection to the server (DatabaseError when it is unreachable)."""
        try:
            return psycopg.connect(self.dsn, autocommit=True,
                                   connect_timeout=max(1, int(self.connect_timeout_s)))
        except psycopg.Error as exc:
            raise DatabaseError(f"cannot connect to PostgreSQL ({self.dsn}): {exc}") from exc

    def is_up(self) -> bool:
        """True when the server accepts connections and answers a query."""
        try:
            with self.connect() as conn:
                conn.execute("SELECT 1")
            return True
        except (DatabaseError, psycopg.Error):
            return False

    def wait_until_up(self, timeout_s: float, *,
                      still_starting: Callable[[], bool] | None = None) -> bool:
        """Poll until the server answers; ``still_starting()`` False stops early (it died)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.is_up():
                return True
            if still_starting is not None and not still_starting():
                return False
            time.sleep(0.2)
        return self.is_up()

    def catalog(self, conn: psycopg.Connection[TupleRow] | None = None) -> KnobCatalog:
        if self._catalog is None:
            if conn is None:
                with self.connect() as c:
                    self._catalog = KnobCatalog.from_connection(c)
            else:
                self._catalog = KnobCatalog.from_connection(conn)
        return self._catalog

    def _remember_last_good(self, text: str | None) -> None:
        if text is None:
            return
        self.last_good = text
        if self.original is None:
            self.original = text
            self._write_backup(f"{AUTO_CONF}.original", text)
        self._write_backup(f"{AUTO_CONF}.last-good", text)

    def _write_backup(self, name: str, text: str) -> None:
        if self.backup_dir is None:
            return
        path = self.backup_dir / name
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.chmod(0o600)
        os.replace(tmp, path)

    def restart_with(self, offline_values: Mapping[str, JSON], timeout_s: float = 60.0
                     ) -> RestartReport:
        """Restart with the given knob values; roll back and report failure if they do not work.

        Values are strings with units (``'256MB'``) or canonical values (bytes, ms, numbers).
        Raises ConfigError for unknown or out-of-range knobs (nothing changed) and
        DatabaseError only when the server cannot be brought back even with the last good
        configuration.
        """
        with self._signals_held():
            return self._restart_with(offline_values, timeout_s)

    def _restart_with(self, offline_values: Mapping[str, JSON], timeout_s: float
                      ) -> RestartReport:
        self.ensure_running(timeout_s)
        with self.connect() as conn:
            catalog = self.catalog(conn)
            knobs: dict[str, tuple[Knob, KnobValue]] = {}
            for name, raw in offline_values.items():
                knob = catalog.tunable(name)
                knobs[knob.name.lower()] = (knob, knob.coerce(raw))
            formatted = {k.name: k.format(v) for k, v in knobs.values()}
            pending = conn.execute("SELECT count(*) FROM pg_settings WHERE pending_restart"
                                   ).fetchone()
            if self.last_good is None or (pending is not None and pending[0] == 0):
                self._remember_last_good(self.read_auto_conf())
            if self.last_good is None:
                logger.warning("%s controller cannot read postgresql.auto.conf: a failed restart "
                               "cannot be rolled back by restoring it", self.kind)
            self._in_restart = True
            try:
                alter_system(conn, formatted)
            except HarmonyError:
                # the server refused a value: undo what was already written, nothing restarted
                if self.last_good is not None:
                    self.write_auto_conf(self.last_good)
                self._in_restart = False
                raise
        started = time.monotonic()
        self.restarts += 1
        reason, found = self._cycle(knobs, timeout_s)
        in_force: dict[str, str] = {}
        if reason is None:
            reason, in_force = self._verify(knobs)
        if reason is None:
            self._remember_last_good(self.read_auto_conf())
            self._in_restart = False
            elapsed = time.monotonic() - started
            logger.info("restarted with %s in %.2f s", formatted, elapsed)
            return RestartReport(True, formatted, in_force, elapsed, precheck=found)
        self.failures += 1
        logger.warning("restart with %s failed: %s; restoring the last good configuration",
                       formatted, reason)
        self.roll_back(timeout_s)
        self._in_restart = False
        with contextlib.suppress(DatabaseError, psycopg.Error), self.connect() as conn:
            states = read_settings(conn, knobs)
            in_force = {k.name: states[key].shown for key, (k, _) in knobs.items()
                        if key in states}
        return RestartReport(False, formatted, in_force, time.monotonic() - started,
                             reason=reason, rolled_back=True, precheck=found)

    def _cycle(self, knobs: Mapping[str, tuple[Knob, KnobValue]], timeout_s: float
               ) -> tuple[str | None, str | None]:
        """Stop, pre-check, start: (failure reason or None, pre-check finding)."""
        try:
            self.stop_server(timeout_s)
            found, failure = self.precheck(knobs)
            if failure is not None:
                return f"pre-check: {failure}", found
            mark = self.log_mark()
            try:
                self.start_server(timeout_s)
            except DatabaseError as exc:
                fatal = [ln for ln in self.log_since(mark).splitlines() if _FATAL_RE.search(ln)]
                reason = "; ".join(fatal[-3:]) if fatal else str(exc)
                return f"server did not start: {reason}", found
            return None, found
        except DatabaseError as exc:
            return str(exc), None

    def _verify(self, knobs: Mapping[str, tuple[Knob, KnobValue]]
                ) -> tuple[str | None, dict[str, str]]:
        try:
            with self.connect() as conn:
                states = read_settings(conn, knobs)
        except DatabaseError as exc:
            return f"server is not reachable after the restart: {exc}", {}
        in_force = {k.name: states[key].shown for key, (k, _) in knobs.items() if key in states}
        problems = check_settings(knobs, states)
        return ("; ".join(problems.values()) if problems else None), in_force

    def roll_back(self, timeout_s: float = 60.0) -> None:
        """Put the last good ``postgresql.auto.conf`` back and (re)start the server."""
        with contextlib.suppress(DatabaseError):
            self.stop_server(timeout_s)
        if self.last_good is not None:
            self.write_auto_conf(self.last_good)
        try:
            self.start_server(timeout_s)
        except DatabaseError as first:
            if self.original is not None and self.original != self.last_good:
                logger.error("the last good configuration did not start either (%s); "
                             "trying the original one", first)
                self.write_auto_conf(self.original)
                try:
                    self.start_server(timeout_s)
                    return
                except DatabaseError:
                    pass
            raise DatabaseError(
                f"PostgreSQL is DOWN: it did not start with the last good configuration "
                f"either ({first}); check the server log and {AUTO_CONF}"
                + (f" (backups in {self.backup_dir})" if self.backup_dir else "")
            ) from first
        logger.info("PostgreSQL is running again with the last good configuration")

    def ensure_running(self, timeout_s: float = 60.0) -> None:
        """Make sure the server is up: start it, and restore the last good config if needed.

        A server that is down because a backend was killed (the OOM killer) is in automatic
        crash recovery and comes back by itself within seconds: it is waited for (up to
        ``RECOVERY_WAIT_S``) rather than stopped mid-recovery, which left PostgreSQL 15's
        postmaster idle until pg_ctl's fast-stop timeout (120 s in the end-to-end runs).
        """
        if not self._in_restart and not self.is_up():
            if self.wait_until_up(min(timeout_s, RECOVERY_WAIT_S)):
                logger.info("PostgreSQL was recovering (a crash-restart); it is up again")
                return
        if self._in_restart or not self.is_up():
            logger.warning("PostgreSQL is not running%s: restoring the last good configuration",
                           " (a restart was interrupted)" if self._in_restart else "")
            self.roll_back(timeout_s)
            self._in_restart = False

    # -- signals -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _signals_held(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        held: list[int] = []

        def hold(signum: int, frame: FrameType | None) -> None:
            logger.warning("signal %s received during a restart: it is delivered once the "
                           "server is back", signal.Signals(signum).name)
            held.append(signum)

        previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            for signum in dict.fromkeys(held):
                signal.raise_signal(signum)

    @contextlib.contextmanager
    def safe_restart_guard(self, timeout_s: float = 60.0) -> Iterator[Controller]:
        """Run a tuning loop so that an interrupted tuner leaves the server up and sane.

        SIGTERM becomes ``SystemExit(143)`` (SIGINT stays KeyboardInterrupt), so ``finally``
        blocks run; on leaving the block, and at interpreter exit, :meth:`ensure_running`
        restarts the server with the last good configuration if it is down or a restart was
        cut short.
        """
        def on_exit() -> None:
            try:
                self.ensure_running(timeout_s)
            except HarmonyError as exc:
                logger.error("could not leave PostgreSQL running: %s", exc)

        def on_term(signum: int, frame: FrameType | None) -> None:
            raise SystemExit(128 + signum)

        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, on_term) if main else None
        atexit.register(on_exit)
        try:
            yield self
        finally:
            try:
                on_exit()
            finally:
                atexit.unregister(on_exit)
                if main and previous is not None:
                    signal.signal(signal.SIGTERM, previous)


def make_controller(kind: str, **options: object) -> Controller:
    """Build a registered controller by kind (``local``, ``pg_ctl``, ``docker``, ``command``);
    options that do not fit its constructor are a :class:`ConfigError`."""
    return Controller.registry.build(kind, **options)
