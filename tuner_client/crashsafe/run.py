"""What a tuning run does to stay crash-safe (:class:`RunSafety`).

Before touching a server: a journal left by an earlier run that died is found and restored
first (refused while that run still lives: two tuners on one server would each take the
other's candidate for the original). Before the first change: the server's journal is written
and fsynced, made the place every ``ALTER SYSTEM`` is recorded, and the guard is started.
At the end: the journals are removed once the run has put every server back (the completion
mark); a server the run could not restore is restored from its journal at once, and the
journal stays for the guard, the next run or ``harmony restore`` when that fails too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg

from harmony_base.errors import DatabaseError, HarmonyError
from tuner_client.crashsafe.clones import remove_clones
from tuner_client.crashsafe.guard import MARK_VARIABLE, start_guard
from tuner_client.crashsafe.hook import activate, deactivate
from tuner_client.crashsafe.journal import (
    Journal,
    ProcessId,
    journal_dir,
    journal_path,
    server_key,
)
from tuner_client.crashsafe.recovery import recover, restore_leftover
from tuner_client.crashsafe.server_state import read_identity, read_original
from tuner_client.servers.target import default_state_dir

if TYPE_CHECKING:
    from tuner_client.config import TunerConfig
    from tuner_client.servers.target import Target

logger = logging.getLogger(__name__)

#: the name the run's own connections show in pg_stat_activity when they set none (libpq's
#: PGAPPNAME, also pgbench's): the guard ends a dead run's leftover connections by it
APPLICATION_NAME = "harmony-tuner"


def config_key(config: TunerConfig, state_dir: Path | None) -> str:
    """The journal key of the server a config names, without connecting to it."""
    if config.database.embedded:
        return server_key("", (state_dir or default_state_dir(config.name)) / "cluster" / "data")
    return server_key(config.database.dsn or "")


def config_keys(config: TunerConfig, state_dir: Path | None) -> list[str]:
    """The journal keys of every server a config names whose configuration a run changes:
    the server's and, when ``database.twin`` names one, the duet's twin's."""
    twin = config.database.twin
    return [config_key(config, state_dir), *([server_key(twin.dsn)] if twin else [])]


def target_key(target: Target) -> str:
    return server_key(target.dsn, target.cluster.data_dir if target.cluster else None)


class RunSafety:
    """The journals and the guard of one run (see the module docstring)."""

    def __init__(self, config: TunerConfig, run_id: str, *,
                 directory: Path | None = None) -> None:
        self.config, self.run_id = config, run_id
        self.directory = directory or journal_dir()
        self.mark = secrets.token_hex(8)
        self.journals: list[Journal] = []
        self.guard: int | None = None  # the guard's pid
        self._saved_env: dict[str, str | None] = {}

    def recover_leftovers(self, key: str) -> None:
        """Restore the server with ``key`` from a journal an earlier run left, before
        anything else touches it; HarmonyError when that is refused or fails. A scratch clone
        a dead run left (its guard died too) is stopped and deleted first."""
        remove_clones(self.directory, dead_only=True)
        restore_leftover(self.directory, key,
                         timeout_s=self.config.database.restart_timeout_s)

    def protect(self, target: Target) -> Journal | None:
        """Recover ``target`` if a dead run left it changed, then write its journal and make
        it record every change; the guard is started with the first journal. A server the
        run may not change (managed mode: per-transaction settings end with their
        transaction) needs no journal: None."""
        key = target_key(target)
        self.recover_leftovers(key)
        if not target.controller.changes_server:
            logger.info("managed mode: no restore journal: the run changes nothing "
                        "server-wide on %s", target.dsn)
            return None
        auto_conf = None
        with contextlib.suppress(HarmonyError, OSError, AttributeError):
            auto_conf = target.controller.read_auto_conf()
        try:
            with psycopg.connect(target.dsn, autocommit=True, connect_timeout=10) as conn:
                identity = read_identity(conn, target.dsn)
                original = read_original(conn, auto_conf)
        except psycopg.Error as exc:
            raise DatabaseError(f"cannot read the configuration to journal from "
                                f"{target.dsn}: {exc}") from exc
        journal = Journal(path=journal_path(self.directory, key), key=key,
                          run_id=self.run_id, config=str(self.config.source),
                          owner=ProcessId.of(os.getpid()), server=identity, original=original,
                          controller=target.controller.recipe(),
                          stop_after=target.cluster is not None, mark=self.mark,
                          cgroups=[str(cg) for cg in target.cluster.cgroup_paths()]
                          if target.cluster is not None else [])
        journal.save()
        activate(journal)
        self.journals.append(journal)
        if self.guard is None:
            self._mark_processes()
            self.guard = start_guard(self.directory, self.mark)
        logger.info("restore journal %s written before any change (guard pid %s)",
                    journal.path, self.guard)
        return journal

    def _mark_processes(self) -> None:
        """Mark the processes the run starts from now on, and name its connections."""
        for name, value in ((MARK_VARIABLE, self.mark), ("PGAPPNAME", APPLICATION_NAME)):
            self._saved_env[name] = os.environ.get(name)
            if name == MARK_VARIABLE or name not in os.environ:
                os.environ[name] = value

    def finish(self, restored: bool) -> bool:
        """The completion mark: each journal removed once its server is as the run meant to
        leave it (``restored``), or has no change recorded; otherwise restored from the
        journal now. True when no journal is left."""
        left = False
        for journal in self.journals:
            deactivate(journal)
            if restored or not journal.changes:
                journal.complete()
                continue
            logger.error("the run could not put %s back; restoring it from its journal",
                         journal.server.describe())
            left = not recover(journal, timeout_s=self.config.database.restart_timeout_s).ok \
                or left
        self.close()
        return not left

    def close(self) -> None:
        """Stop recording and unmark the process; journals left on disk stay for the guard (which
        exits by itself within half a second once none of the run's is left)."""
        for journal in self.journals:
            deactivate(journal)
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env.clear()

