"""The duet's second cluster named by the user (``database.twin``): a server that already holds
the same data (a second container on a snapshot of the volume, a restored backup), used in
place of a clone, so no ``pg_basebackup`` runs and nothing is copied.

At the start :func:`open_twin` checks that the twin holds the same data as the server (the
same major version, the same user relations, each of a size within :data:`SIZE_TOLERANCE`,
and the same row estimates where both have them) and refuses it with what differs
otherwise; it then keeps the twin's ``postgresql.auto.conf`` (by its controller, else the
lines ``pg_file_settings`` reads from it) and the values in force of what the race will set;
inside a run it writes the twin a restore journal with the run's mark, each change recorded
before it is made, so the run's guard puts the twin back if the tuner dies mid-race.
:meth:`Twin.restore` puts the file back exactly and undoes any restart (a restart again, so
that the restart-time values in force are the twin's own), then checks every value.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from harmony_base.errors import ConfigError, DatabaseError
from tuner_client.config.model import TwinConfig
from tuner_client.crashsafe.guard import MARK_VARIABLE
from tuner_client.crashsafe.journal import (
    Journal,
    ProcessId,
    journal_dir,
    journal_path,
    load_journal,
    server_key,
)
from tuner_client.crashsafe.recovery import restore_leftover
from tuner_client.crashsafe.server_state import read_identity, read_original
from tuner_client.duet.clone import RELOAD_WAIT_S
from tuner_client.servers.controllers import Controller, make_controller

logger = logging.getLogger(__name__)

#: how far a relation's size on the twin may differ from the server's (a fraction), and at
#: least this many bytes (a table loaded the same way twice takes the same pages, give or
#: take its free space map and a few pages of index splits)
SIZE_TOLERANCE = 0.10
SIZE_SLACK_BYTES = 1 << 20

#: the user relations of a database with their sizes and row estimates
RELATIONS = """SELECT n.nspname || '.' || c.relname, c.relkind::text,
       pg_total_relation_size(c.oid), c.reltuples::float8
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'm', 'p')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
  AND n.nspname NOT LIKE 'pg_temp%' AND n.nspname NOT LIKE 'pg_toast_temp%'"""


@dataclass(frozen=True)
class Relations:
    """A server's major version and its database's user relations (name → (bytes, rows;
    rows below 0 where never analysed))."""

    major: int
    sizes: Mapping[str, tuple[int, float]]


def read_relations(dsn: str, what: str) -> Relations:
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            version = conn.execute("SHOW server_version_num").fetchone()
            rows = conn.execute(RELATIONS).fetchall()
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot read the relations of {what} ({_describe(dsn)}) to compare "
                            f"the duet's twin with the server: {exc}") from exc
    major = int(version[0]) // 10000 if version else 0
    return Relations(major, {str(r[0]): (int(r[2] or 0), float(r[3] if r[3] is not None
                                                                  else -1)) for r in rows})


def data_differences(server: Relations, twin: Relations, *,
                     server_may_grow: bool = False, both_grew: bool = False) -> list[str]:
    """What differs between the server's data and the twin's (empty: the same data).
    ``server_may_grow``: a relation larger on the server is not a difference (before the
    race: the run's own workload wrote to the server since the run's start, which compared
    them strictly; the twin, which nothing of the run writes to, must not have grown).
    ``both_grew``: a duet of this run (a search's) wrote the workload to both since the
    checks before it, so only the version and the relations are compared (their sizes and
    row estimates move with writes and with when autovacuum last analysed each)."""
    out = []
    if server.major != twin.major:
        out.append(f"the server runs PostgreSQL {server.major}, the twin {twin.major}")
    missing = sorted(set(server.sizes) - set(twin.sizes))
    extra = sorted(set(twin.sizes) - set(server.sizes))
    if missing:
        out.append(f"the twin lacks {_few(missing)}")
    if extra:
        out.append(f"the twin has {_few(extra)}, which the server has not")
    for name in sorted(set(server.sizes) & set(twin.sizes)) if not both_grew else ():
        (a, ra), (b, rb) = server.sizes[name], twin.sizes[name]
        if server_may_grow:
            a, ra = min(a, b), min(ra, rb) if ra >= 0 else ra
        if abs(a - b) > max(SIZE_TOLERANCE * max(a, b), SIZE_SLACK_BYTES):
            out.append(f"{name} takes {_mib(a)} on the server and {_mib(b)} on the twin "
                       f"(more than {100 * SIZE_TOLERANCE:.0f} % apart)")
        elif ra >= 0 and rb >= 0 and abs(ra - rb) > SIZE_TOLERANCE * max(ra, rb, 1.0):
            out.append(f"{name} holds about {ra:,.0f} rows on the server and {rb:,.0f} on "
                       f"the twin")
    return out


def restore_leftover_twin(dsn: str, *, timeout_s: float = 60.0) -> None:
    """Before the twin's configuration is read: a restore journal of it already there is a
    race that did not put it back, and what the twin holds now would be that race's candidate
    taken for the original. A dead run's is restored first (ConfigError while its run still
    lives: two tuners on one twin); this run's own (an earlier race's restore failed) refuses
    the twin, the journal left for the run's end and its guard."""
    path = journal_path(journal_dir(), server_key(dsn))
    if path.exists() and load_journal(path).owner.pid == os.getpid():
        raise DatabaseError(f"the duet's twin {_describe(dsn)} was not put back after an "
                            f"earlier race of this run; its restore journal {path} stays for "
                            f"the run's end and its guard, and no race runs on it again")
    restore_leftover(journal_dir(), server_key(dsn), timeout_s=timeout_s)


def journal_twin(dsn: str, controller: Controller | None, auto_conf: str | None
                 ) -> Journal | None:
    """A restore journal of the twin, with the run's mark, so that the run's guard (or the
    next run, or ``harmony restore``) puts it back if the tuner dies mid-race, as it does the
    server (None outside a run: no mark, no guard to read it); :func:`restore_leftover_twin`
    has run first, so no journal of the twin is there to be written over."""
    mark = os.environ.get(MARK_VARIABLE)
    if not mark:
        return None
    key = server_key(dsn)
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            identity = read_identity(conn, dsn)
            original = read_original(conn, auto_conf)
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot read the configuration of the duet's twin "
                            f"({_describe(dsn)}) to journal it: {exc}") from exc
    journal = Journal(path=journal_path(journal_dir(), key), key=key,
                      run_id=f"duet-twin-{mark}", config="database.twin",
                      owner=ProcessId.of(os.getpid()), server=identity, original=original,
                      controller=controller.recipe() if controller is not None else None,
                      mark=mark)
    journal.save()
    return journal


@dataclass
class Twin:
    """The user's twin server in a duet (see the module): the interface of a
    :class:`~tuner_client.duet.clone.Clone` (``dsn_like``, ``apply``, ``remove``)."""

    dsn: str
    controller: Controller | None
    source: str
    #: its postgresql.auto.conf as found (None: no controller could read it)
    auto_conf: str | None
    #: the lines pg_file_settings read from postgresql.auto.conf (name → value)
    auto_lines: dict[str, str]
    restart_timeout_s: float = 60.0
    restarted: bool = False
    touched: set[str] = field(default_factory=set)
    #: the values in force of every knob the race set, read before its first change
    in_force: dict[str, str] = field(default_factory=dict)
    size_bytes: int = 0
    setup_s: float = 0.0
    #: its restore journal while the race may change it (None outside a run)
    journal: Journal | None = None

    def dsn_like(self, dsn: str) -> str:
        """The twin's own DSN (the user named it whole)."""
        return self.dsn

    def apply(self, settings: Mapping[str, str]) -> bool:
        """Put ``settings`` in force on the twin by ``ALTER SYSTEM`` and a reload, or a
        restart by its controller when one of them waits for it; whether it restarted."""
        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                for name in settings:
                    if name not in self.in_force:
                        row = conn.execute("SELECT current_setting(%s)", [name]).fetchone()
                        self.in_force[name] = str(row[0]) if row else ""
                if self.journal is not None:  # durable before the change is made
                    self.journal.record_change(dict(settings))
                for name, value in settings.items():
                    conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        sql.Identifier(name), sql.Literal(value)))
                    self.touched.add(name)
                pending = _reload(conn, list(settings))
        except psycopg.Error as exc:
            raise DatabaseError(f"could not configure the duet's twin {self.source} with "
                                f"{dict(settings)}: {exc}") from exc
        if pending:
            self._restart(f"to put {dict(settings)} in force")
        return pending

    def _restart(self, why: str) -> None:
        if self.controller is None:
            raise ConfigError(f"the duet's twin {self.source} must restart {why}, but "
                              f"database.twin names no controller; give database.twin."
                              f"controller (kind: pg_ctl, docker or command) as for database")
        self.controller.stop_server(self.restart_timeout_s)
        self.controller.start_server(self.restart_timeout_s)
        self.restarted = True

    def remove(self) -> None:
        """Put the twin's configuration back exactly as it was: its postgresql.auto.conf
        (the file itself where the controller reaches it, else each line the race touched)
        and, after a restart, a restart again; then check every value in force."""
        try:
            if self.auto_conf is not None and self.controller is not None:
                self.controller.write_auto_conf(self.auto_conf)
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                if self.auto_conf is None or self.controller is None:
                    for name in sorted(self.touched):
                        statement = (sql.SQL("ALTER SYSTEM SET {} = {}").format(
                            sql.Identifier(name), sql.Literal(self.auto_lines[name]))
                            if name in self.auto_lines
                            else sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(name)))
                        conn.execute(statement)
                pending = _reload(conn, sorted(self.touched))
            if self.restarted or pending:
                self._restart("to undo the race's restart")
                self.restarted = False
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                now = {name: _setting(conn, name) for name in self.in_force}
        except psycopg.Error as exc:
            raise DatabaseError(f"could not restore the duet's twin {self.source}: {exc}; "
                                f"its postgresql.auto.conf was:\n{self.auto_conf}") from exc
        moved = {n: (v, now[n]) for n, v in self.in_force.items() if now[n] != v}
        if moved:
            raise DatabaseError(f"the duet's twin {self.source} did not come back to its "
                                f"settings: {moved} (before, now)")
        if self.journal is not None:
            self.journal.complete()
        logger.info("duet: the twin %s restored (%d settings)", self.source, len(self.touched))


def check_twin(server_dsn: str, twin: TwinConfig, *, server_may_grow: bool = False,
               both_grew: bool = False) -> None:
    """ConfigError naming ``database.twin`` and what differs when the twin does not hold the
    same data as the server at ``server_dsn`` (:func:`data_differences`); the run checks it
    before it starts, and the duet again before it races (``server_may_grow``: by then the
    run's workload may have written to the server; ``both_grew``: an earlier duet of the run
    wrote to both)."""
    differences = data_differences(read_relations(server_dsn, "the server"),
                                   read_relations(twin.dsn, "the twin"),
                                   server_may_grow=server_may_grow, both_grew=both_grew)
    if differences:
        raise ConfigError(f"database.twin ({_describe(twin.dsn)}) must hold the same data as "
                          f"the server ({_describe(server_dsn)}) for a duet, but "
                          + "; ".join(differences[:6])
                          + (f"; and {len(differences) - 6} more" if len(differences) > 6
                             else ""))


def open_twin(server_dsn: str, twin: TwinConfig, *, restart_timeout_s: float = 60.0,
              written: bool = False) -> Twin:
    """The user's twin of the server at ``server_dsn``, put back first where a dead run left
    it changed (:func:`restore_leftover_twin`), checked to hold the same data (ConfigError
    naming ``database.twin`` and what differs otherwise; ``written``: an earlier duet of this
    run wrote to it, so only the relations are compared), its configuration kept for
    :meth:`Twin.remove`."""
    started = time.monotonic()
    source = _describe(twin.dsn)
    restore_leftover_twin(twin.dsn, timeout_s=restart_timeout_s)
    check_twin(server_dsn, twin, server_may_grow=True, both_grew=written)
    controller = (make_controller(twin.controller.kind, dsn=twin.dsn,
                                  **dict(twin.controller.options))
                  if twin.controller is not None else None)
    try:
        with psycopg.connect(twin.dsn, autocommit=True, connect_timeout=10) as conn:
            lines = conn.execute(
                "SELECT name, setting FROM pg_file_settings WHERE sourcefile LIKE "
                "'%postgresql.auto.conf' AND error IS NULL ORDER BY seqno").fetchall()
            size = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot read the configuration of the duet's twin {source}: "
                            f"{exc}") from exc
    auto_conf = controller.read_auto_conf() if controller is not None else None
    return Twin(twin.dsn, controller, source, auto_conf, {str(n): str(v) for n, v in lines},
                restart_timeout_s, size_bytes=int(size[0]) if size else 0,
                setup_s=time.monotonic() - started,
                journal=journal_twin(twin.dsn, controller, auto_conf))


def _reload(conn: psycopg.Connection[tuple[object, ...]], names: Iterable[str]) -> bool:
    """Reload; whether a postmaster knob among ``names`` now waits for a restart (the
    postmaster reads the file asynchronously: waited for up to :data:`RELOAD_WAIT_S`)."""
    conn.execute("SELECT pg_reload_conf()")
    row = conn.execute("SELECT count(*) FROM pg_settings WHERE context = 'postmaster' "
                       "AND name = ANY(%s)", [list(names)]).fetchone()
    deadline = time.monotonic() + (RELOAD_WAIT_S if row and row[0] else 0.0)
    pending = False
    while not pending and time.monotonic() < deadline:
        got = conn.execute("SELECT count(*) FROM pg_settings WHERE pending_restart").fetchone()
        pending = bool(got and got[0])
        time.sleep(0.05)
    return pending


def _setting(conn: psycopg.Connection[tuple[object, ...]], name: str) -> str:
    row = conn.execute("SELECT current_setting(%s)", [name]).fetchone()
    return str(row[0]) if row else ""


def _few(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _mib(n: int) -> str:
    return f"{n / 2 ** 20:,.1f} MiB"


def _describe(dsn: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    return (f"{params.get('host') or 'localhost'}:{params.get('port') or 5432}/"
            f"{params.get('dbname') or ''}")
