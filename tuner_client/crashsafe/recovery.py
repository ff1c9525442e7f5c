"""Putting a server back from its restore journal (:mod:`.journal`).

:func:`recover` brings the server up if it is down (waiting first for a start or a crash
recovery already under way), checks that it is the journal's server and that its
``postgresql.auto.conf`` holds nothing the run did not write (a setting someone changed by
hand since is reported and nothing is applied, unless forced), writes the original file back
(or, without a controller that can write it, ``ALTER SYSTEM`` each entry back), reloads,
restarts when a restart-time setting differs from the original, ends the run's leftover
connections, verifies, and only then removes the journal. :func:`inspect` does the checks and
changes nothing (``harmony tune --plan``, ``harmony validate``, ``harmony restore --check``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from harmony_base.errors import ConfigError, DatabaseError, HarmonyError
from tuner_client.crashsafe.journal import Journal, journal_path, load_journal
from tuner_client.crashsafe.server_state import (
    auto_conf_entries,
    parse_auto_conf,
    read_identity,
    settings_in_force,
)
from tuner_client.knobs.apply import reload_and_wait
from tuner_client.servers.cgroups import remove_cgroups
from tuner_client.servers.controllers import Controller, make_controller

logger = logging.getLogger(__name__)

#: how long a server that is starting or in crash recovery is waited for before it is started
START_WAIT_S = 30.0
#: the recovery's own connections, spared when the run's leftover ones are ended
GUARD_APPLICATION = "harmony-guard"


@dataclass
class RecoveryReport:
    """What :func:`recover` (or :func:`inspect`) found and did for one journal."""

    journal: Path
    server: str
    ok: bool = False
    #: "restored", "original" (nothing to undo), "changed by hand", "other server", "down",
    #: "failed", or with inspect "would restore"
    outcome: str = "failed"
    actions: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def text(self) -> str:
        lines = [f"{self.server}: {self.outcome} ({self.seconds:.1f} s; journal {self.journal}"
                 f"{' removed' if self.ok and self.outcome != 'would restore' else ' kept'})"]
        lines += [f"  done: {a}" for a in self.actions]
        lines += [f"  problem: {p}" for p in self.problems]
        return "\n".join(lines)


def hand_edits(journal: Journal, entries: Mapping[str, str]) -> list[str]:
    """The entries of ``postgresql.auto.conf`` that neither the original file held nor the
    run wrote: someone changed them since the run started."""
    written = journal.written()
    edits = []
    for name in sorted(set(entries) | set(journal.original.entries)):
        now, was = entries.get(name), journal.original.entries.get(name)
        if now == was or now in written.get(name, set()):
            continue
        wrote = sorted(v if v is not None else "(reset)" for v in written.get(name, set()))
        edits.append(f"{name} is {now!r} in postgresql.auto.conf, {was!r} before the run"
                     + (f", and the run wrote only {wrote}" if wrote else
                        ", and the run never wrote it"))
    return edits


def _controller(journal: Journal, dsn: str) -> Controller | None:
    if journal.controller is None:
        return None
    options = {k: v for k, v in journal.controller["options"].items() if v is not None}
    try:
        return make_controller(journal.controller["kind"], dsn=dsn, **options)
    except HarmonyError as exc:
        logger.warning("%s: cannot rebuild its %s controller (%s): reload only", journal.path,
                       journal.controller["kind"], exc)
        return None


def _dsn_now(journal: Journal) -> str:
    """The journal's DSN, on the port the server listens on now: the embedded cluster may
    have moved to another free port (``postmaster.pid``'s fourth line)."""
    dsn, data_dir = journal.server.dsn, journal.server.data_directory
    if not journal.stop_after or data_dir is None:
        return dsn
    with contextlib.suppress(OSError, IndexError, ValueError):
        port = int((Path(data_dir) / "postmaster.pid").read_text().splitlines()[3])
        params = psycopg.conninfo.conninfo_to_dict(dsn)
        params["port"] = str(port)
        return psycopg.conninfo.make_conninfo(**{k: str(v) for k, v in params.items()})
    return dsn


def _connect(dsn: str) -> psycopg.Connection[TupleRow]:
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=5,
                               application_name=GUARD_APPLICATION)
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot connect ({exc})") from exc


def _is_up(dsn: str) -> bool:
    try:
        with _connect(dsn) as conn:
            conn.execute("SELECT 1")
        return True
    except DatabaseError:
        return False


class _Recovery:
    """One journal's recovery (see :func:`recover`)."""

    def __init__(self, journal: Journal, *, force: bool, timeout_s: float,
                 dry_run: bool) -> None:
        self.journal, self.force, self.timeout_s, self.dry_run = journal, force, timeout_s, dry_run
        self.dsn = _dsn_now(journal)
        self.ctl = _controller(journal, self.dsn)
        self.report = RecoveryReport(journal.path, journal.server.describe())

    def run(self) -> RecoveryReport:
        started = time.monotonic()
        try:
            self._run()
        except (HarmonyError, psycopg.Error, OSError) as exc:
            self.report.outcome = "failed"
            self.report.problems.append(str(exc))
        self.report.seconds = time.monotonic() - started
        return self.report

    def _do(self, action: str) -> bool:
        """Record ``action``; False in a dry run (the caller then does not act)."""
        self.report.actions.append(action if not self.dry_run else f"would {action}")
        return not self.dry_run

    def _run(self) -> None:
        report, original = self.report, self.journal.original
        if not self._bring_up():
            return
        with _connect(self.dsn) as conn:
            identity = read_identity(conn, self.dsn)
            mine = self.journal.server
            if "unknown" not in (identity.system_identifier, mine.system_identifier) and \
                    identity.system_identifier != mine.system_identifier or (
                    mine.data_directory and identity.data_directory
                    and identity.data_directory != mine.data_directory):
                report.outcome = "other server"
                report.problems.append(f"the server there now is {identity.describe()}, not "
                                       "the journal's: nothing was applied")
                return
            entries = self._entries(conn)
            edits = hand_edits(self.journal, entries)
            if edits and not self.force:
                report.outcome = "changed by hand"
                report.problems += edits
                report.problems.append("nothing was applied: check the server, then "
                                       "`harmony restore --force` puts the original back anyway")
                return
            undo = entries != original.entries
            if undo and self._do("write the original postgresql.auto.conf back and reload"):
                self._write_back(conn, entries)
            restart = self._restart_needed(conn)
        if restart:
            self._restart(restart)
        self._end_leftover_connections()
        if self.dry_run:
            report.outcome = "would restore" if undo or restart else "original"
            report.ok = True
            return
        self._verify()
        report.outcome = "restored" if undo or restart else "original"
        if self.journal.stop_after and self.ctl is not None:
            self._do("stop the embedded cluster (the run's own, stopped as a finished run "
                     "does)")
            self.ctl.stop_server(self.timeout_s)
            self._remove_cgroups()
        report.ok = True
        self.journal.complete()

    def _bring_up(self) -> bool:
        """The server up (True), or reported down (False): a start or a crash recovery under
        way is waited for; a stopped server gets the original file, then is started (the
        embedded cluster is only given its file: a finished run leaves it stopped)."""
        if _is_up(self.dsn):
            return True
        report, ctl = self.report, self.ctl
        if ctl is None:
            report.outcome = "down"
            report.problems.append("the server does not answer and the journal names no "
                                   "controller that could start it")
            return False
        deadline = time.monotonic() + START_WAIT_S
        running = getattr(ctl, "server_running", None)
        while time.monotonic() < deadline and (running is None or running()):
            if _is_up(self.dsn):
                return True
            time.sleep(0.3)
        text = ctl.read_auto_conf()
        edits = hand_edits(self.journal, parse_auto_conf(text)) if text is not None else []
        if edits and not self.force:
            report.outcome = "changed by hand"
            report.problems += [*edits, "the server is down and its postgresql.auto.conf "
                                "was changed since the run: left as it is"]
            return False
        if self.journal.original.auto_conf is not None and \
                text != self.journal.original.auto_conf and \
                self._do("write the original postgresql.auto.conf back (server down)"):
            ctl.write_auto_conf(self.journal.original.auto_conf)
        if self.journal.stop_after:
            if not self.dry_run:
                self._remove_cgroups()
                report.outcome, report.ok = "restored", True
                self.journal.complete()
            return False
        if self._do("start the server"):
            ctl.start_server(self.timeout_s)
        return not self.dry_run

    def _remove_cgroups(self) -> None:
        """The stopped embedded cluster's cgroups (empty directories otherwise left behind:
        the next run makes its own); one still busy is reported, the restore stands."""
        if self.journal.cgroups and self._do(f"remove the cgroups {self.journal.cgroups}"):
            left = remove_cgroups(self.journal.cgroups)
            if left:
                self.report.problems.append(f"the cgroups {left} could not be removed")

    def _entries(self, conn: psycopg.Connection[TupleRow]) -> dict[str, str]:
        try:
            return auto_conf_entries(conn)
        except psycopg.Error:
            text = self.ctl.read_auto_conf() if self.ctl is not None else None
            if text is None:
                raise
            return parse_auto_conf(text)

    def _write_back(self, conn: psycopg.Connection[TupleRow], entries: Mapping[str, str]) -> None:
        original = self.journal.original
        if original.auto_conf is not None and self.ctl is not None:
            with contextlib.suppress(HarmonyError, OSError):
                self.ctl.write_auto_conf(original.auto_conf)
                self._reload(conn)
                return
        # no controller can write the file: each entry back with ALTER SYSTEM
        for name in sorted(set(entries) | set(original.entries)):
            if entries.get(name) == original.entries.get(name):
                continue
            if name in original.entries:
                conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(
                    sql.Identifier(name), sql.Literal(original.entries[name])))
            else:
                conn.execute(sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(name)))
        self._reload(conn)

    @staticmethod
    def _reload(conn: psycopg.Connection[TupleRow]) -> None:
        if not reload_and_wait(conn, 10.0):
            raise DatabaseError("the reload after restoring did not finish within 10 s")

    def _restart_needed(self, conn: psycopg.Connection[TupleRow]) -> list[str]:
        """Restart-time settings in force that differ from the original ones."""
        settings, _, _ = settings_in_force(conn)
        original = self.journal.original
        return [n for n in original.restart_time
                if settings.get(n) != original.settings.get(n)
                and n not in original.pending_restart]

    def _restart(self, names: list[str]) -> None:
        if self.journal.stop_after:
            return  # the embedded cluster is stopped below and starts from its file next time
        if self.ctl is None:
            raise DatabaseError(f"{', '.join(names)} differ from the original and need a "
                                "restart, but the journal names no controller: restart the "
                                "server by hand")
        if self._do(f"restart the server ({', '.join(names)} back to the original)"):
            self.ctl.stop_server(self.timeout_s)
            self.ctl.start_server(self.timeout_s)

    def _end_leftover_connections(self) -> None:
        """End the dead run's connections (a long query outlives its client otherwise): the
        run's names, in the run's database only (another run may tune another database of
        the same server)."""
        query = ("SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'harmony-%%' "
                 "AND application_name NOT IN (%s, 'harmony-capture') "
                 "AND datname = current_database() AND pid <> pg_backend_pid()")
        with _connect(self.dsn) as conn:
            pids = [r[0] for r in conn.execute(query, [GUARD_APPLICATION]).fetchall()]
            if pids and self._do(f"end {len(pids)} connection(s) the run left"):
                for pid in pids:
                    conn.execute("SELECT pg_terminate_backend(%s)", [pid])

    def _verify(self) -> None:
        original = self.journal.original
        with _connect(self.dsn) as conn:
            settings, _, _ = settings_in_force(conn)
            entries = self._entries(conn)
        knobs = set(self.journal.written()) | set(original.restart_time)
        wrong = {n: (settings.get(n), original.settings.get(n)) for n in sorted(knobs)
                 if settings.get(n) != original.settings.get(n)
                 and n not in original.pending_restart}
        if entries != original.entries or wrong:
            raise DatabaseError(f"after the restore the server still differs from the "
                                f"original: settings (now, original) {wrong}, "
                                f"postgresql.auto.conf {entries} vs {original.entries}")


def recover(journal: Journal, *, force: bool = False, timeout_s: float = 60.0
            ) -> RecoveryReport:
    """Put ``journal``'s server back to its original configuration; the journal is removed
    only when that is verified. Refuses (``ok`` False, journal kept) when the server there is
    another one or its file was changed by hand since (unless ``force``)."""
    report = _Recovery(journal, force=force, timeout_s=timeout_s, dry_run=False).run()
    log = logger.info if report.ok else logger.error
    log("restore from %s: %s", journal.path, report.text())
    return report


def inspect(journal: Journal) -> RecoveryReport:
    """What :func:`recover` would do; changes nothing (a down server is only reported)."""
    recovery = _Recovery(journal, force=False, timeout_s=0.0, dry_run=True)
    if not _is_up(recovery.dsn):
        recovery.report.outcome = "down"
        recovery.report.problems.append("the server does not answer: `harmony restore` "
                                        "starts it with the original configuration")
        return recovery.report
    return recovery.run()


def owner_alive_error(journal: Journal) -> ConfigError:
    """The error for a server whose journal's run is still alive."""
    return ConfigError(f"another harmony run is tuning this server: {journal.describe()}; "
                       "wait for it to end, or end it (its guard then restores the server)")


def restore_leftover(directory: Path, key: str, *, timeout_s: float = 60.0) -> None:
    """Put the server with ``key`` back from the journal a dead run left in ``directory``
    (nothing when there is none), before anything else touches it or writes its journal
    anew (a new journal would take the dead run's candidate for the original); ConfigError
    while that run still lives, HarmonyError when the restore fails."""
    path = journal_path(directory, key)
    if not path.exists():
        return
    journal = load_journal(path)
    if journal.owner.alive():
        raise owner_alive_error(journal)
    logger.warning("found %s: the run died before putting the server back; restoring its "
                   "original configuration first", journal.describe())
    report = recover(journal, timeout_s=timeout_s)
    if not report.ok:
        raise HarmonyError(f"a leftover restore journal was not applied, so this run does "
                           f"not start:\n{report.text()}")
