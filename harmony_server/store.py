"""The durable store: session definitions, the per-session command log, trials and clients.

One set of SQLAlchemy Core tables serves SQLite (the default: a file under the state
directory, WAL mode) and PostgreSQL (``postgresql+psycopg://...``). The command log is the
source of truth — a session is rebuilt by replaying it — while the trials and clients tables
are materialised views kept for queries and exports. Every write is one transaction.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql as pg_dialect
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.engine import Connection, Engine

from harmony_base.errors import ConfigError, StoreError
from harmony_base.hostinfo import HostInfo
from harmony_base.jsontypes import JSONObject
from harmony_base.trial import SessionStatus, TrialRecord, TrialStatus
from harmony_server.stats import StoreStats

logger = logging.getLogger(__name__)

#: bump when the tables change, and add a step to ``_MIGRATIONS``
SCHEMA_VERSION = 1

metadata = sa.MetaData()

schema_version = sa.Table(
    "harmony_schema_version", metadata,
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("applied", sa.Float, nullable=False),
)

sessions = sa.Table(
    "harmony_sessions", metadata,
    sa.Column("name", sa.String(200), primary_key=True),
    sa.Column("definition", sa.JSON, nullable=False),
    sa.Column("created", sa.Float, nullable=False),
    sa.Column("status", sa.String(20), nullable=False),  # a SessionStatus: live | imported
)

commands = sa.Table(
    "harmony_commands", metadata,
    sa.Column("session", sa.String(200), primary_key=True),
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("kind", sa.String(20), nullable=False),
    sa.Column("payload", sa.JSON, nullable=False),
    sa.Column("time", sa.Float, nullable=False),
    sa.Column("client", sa.String(200), nullable=True),
)

trials = sa.Table(
    "harmony_trials", metadata,
    sa.Column("session", sa.String(200), primary_key=True),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("candidate", sa.Integer, nullable=False),
    sa.Column("point", sa.JSON, nullable=False),
    sa.Column("client", sa.String(200), nullable=True),
    sa.Column("status", sa.String(20), nullable=False),
    sa.Column("value", sa.Float, nullable=True),
    sa.Column("failure", sa.Text, nullable=True),
    sa.Column("leased_at", sa.Float, nullable=True),
    sa.Column("reported_at", sa.Float, nullable=True),
)

clients = sa.Table(
    "harmony_clients", metadata,
    sa.Column("session", sa.String(200), primary_key=True),
    sa.Column("client_id", sa.String(200), primary_key=True),
    sa.Column("hostname", sa.String(255), nullable=True),
    sa.Column("cpu_count", sa.Integer, nullable=True),
    sa.Column("ram_bytes", sa.BigInteger, nullable=True),
    sa.Column("os", sa.String(255), nullable=True),
    sa.Column("python", sa.String(64), nullable=True),
    sa.Column("joined", sa.Float, nullable=False),
    sa.Column("left", sa.Float, nullable=True),
)

# version reached -> DDL/DML steps that bring a store from version-1 to it
_MIGRATIONS: dict[int, list[str]] = {}



@dataclass(frozen=True)
class _Prepared:
    """A Core statement compiled once for a dialect, executed straight on a DBAPI cursor.

    This skips SQLAlchemy's per-execution work (cache keys, bind processing, result set-up)
    on the write path, which otherwise costs as much as the SQLite commit itself; JSON
    columns are serialised here because the type's bind processor no longer runs.
    """

    sql: str
    positional: tuple[str, ...] | None  # parameter order for qmark/format styles
    json_columns: frozenset[str]

    @classmethod
    def compile(cls, stmt: sa.Insert, table: sa.Table, dialect: sa.Dialect) -> _Prepared:
        compiled = stmt.compile(dialect=dialect, column_keys=[c.name for c in table.columns])
        positional = tuple(compiled.positiontup or ()) if compiled.positional else None
        json_columns = frozenset(c.name for c in table.columns if isinstance(c.type, sa.JSON))
        return cls(str(compiled), positional, json_columns)

    def run(self, cursor: Any, rows: list[JSONObject]) -> None:
        """Execute for each row on ``cursor`` (a DBAPI cursor inside the caller's transaction)."""
        if not rows:
            return
        params: list[object] = []
        for row in rows:
            for name in self.json_columns:
                row[name] = json.dumps(row[name])
            params.append(tuple(row[n] for n in self.positional) if self.positional else row)
        if len(params) > 1:
            cursor.executemany(self.sql, params)
        else:
            cursor.execute(self.sql, params[0])


@dataclass(frozen=True)
class StoredSession:
    """A session row: its definition (``SessionDefinition.to_dict()``) and lifecycle."""

    name: str
    definition: JSONObject
    created: float
    status: SessionStatus


@dataclass(frozen=True)
class CommandRecord:
    """One entry of a session's append-only command log."""

    seq: int
    kind: str
    payload: dict[str, Any]
    time: float
    client: str | None = None


def default_store_url(state_dir: str | Path) -> str:
    """The SQLite file URL used when no ``--store`` is given."""
    return f"sqlite:///{Path(state_dir).resolve() / 'harmony.sqlite3'}"


def normalise_store_url(url: str) -> str:
    """Map ``postgresql://`` to the psycopg 3 driver; reject schemes we do not support."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith(("sqlite:", "postgresql+psycopg:")):
        return url
    scheme = url.split(":", 1)[0]
    raise ConfigError(f"--store must be a sqlite:/// or postgresql:// URL, but got scheme "
                      f"{scheme!r}")


class Store:
    """SQLAlchemy Core access to the server's tables; one transaction per write.

    ``synchronous`` sets SQLite's durability: ``NORMAL`` (with WAL) survives a killed
    process, ``FULL`` also survives a power loss at the price of an fsync per commit.
    """

    def __init__(self, url: str, *, synchronous: str = "NORMAL") -> None:
        if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ConfigError(f"store synchronous must be NORMAL or FULL, got {synchronous!r}")
        self.url = normalise_store_url(url)
        self.stats = StoreStats()
        self.engine: Engine = self._make_engine(self.url, synchronous.upper())
        #: what the driver raises for a database error (the hot write runs on its cursor)
        self._driver_error: type[Exception] = self.engine.dialect.loaded_dbapi.Error
        self._statements: dict[tuple[str, bool], _Prepared] = {}
        self._conn: Connection | None = None
        try:
            self._migrate()
        except sa.exc.SQLAlchemyError as exc:
            self.engine.dispose()
            raise StoreError(f"cannot open the store {self._safe_url()}: {exc}") from exc

    # -- setup ------------------------------------------------------------------
    @staticmethod
    def _make_engine(url: str, synchronous: str) -> Engine:
        if url.startswith("sqlite"):
            path = sa.engine.make_url(url).database
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            # one writer thread at a time (the server's loop); the pool may hand a connection
            # to another thread later, which pysqlite refuses unless told it is fine
            engine = sa.create_engine(url, connect_args={"timeout": 30,
                                                         "check_same_thread": False})

            @sa.event.listens_for(engine, "connect")
            def _pragmas(dbapi_conn: sqlite3.Connection, _record: object) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA synchronous={synchronous}")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.close()

            return engine
        return sa.create_engine(url, pool_pre_ping=True)

    def _safe_url(self) -> str:
        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    def _migrate(self) -> None:
        with self.engine.begin() as conn:
            metadata.create_all(conn, checkfirst=True)
            found = conn.execute(sa.select(sa.func.max(schema_version.c.version))).scalar()
            if found is None:
                conn.execute(schema_version.insert().values(version=SCHEMA_VERSION,
                                                            applied=time.time()))
                logger.info("initialised store %s at schema version %s", self._safe_url(),
                            SCHEMA_VERSION)
                return
            if found > SCHEMA_VERSION:
                raise ConfigError(f"store {self._safe_url()} has schema version {found}, newer "
                                  f"than this server's {SCHEMA_VERSION}; upgrade harmony")
            for version in range(found + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS.get(version, []):
                    conn.execute(sa.text(statement))
                conn.execute(schema_version.insert().values(version=version, applied=time.time()))
                logger.info("migrated store %s to schema version %s", self._safe_url(), version)

    def close(self) -> None:
        """Close the connection and release every pooled one."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.engine.dispose()

    def _connection(self) -> Connection:
        """The store's one long-lived connection (reopened after a failure).

        Writes come from a single thread (the server's event loop), so one connection
        avoids a pool checkout — and, on PostgreSQL, a pre-ping round trip — per write.
        """
        if self._conn is None or self._conn.closed or self._conn.invalidated:
            self._conn = self.engine.connect()
        return self._conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.invalidate()
                self._conn.close()
            except sa.exc.SQLAlchemyError:
                pass
            self._conn = None

    @contextmanager
    def _transaction(self, what: str) -> Iterator[Connection]:
        started = time.perf_counter()
        try:
            conn = self._connection()
            with conn.begin():
                yield conn
        except (sa.exc.SQLAlchemyError, self._driver_error) as exc:
            self.stats.failures += 1
            self._drop_connection()
            raise StoreError(f"store write failed ({what}): {exc}") from exc
        except Exception:  # a value the driver cannot bind; the transaction was rolled back
            self.stats.failures += 1
            raise
        self.stats.writes += 1
        self.stats.write_latency.observe(time.perf_counter() - started)

    def _prepared(self, table: sa.Table, *, upsert: bool) -> _Prepared:
        """The table's INSERT (or insert-or-update) compiled once for this store's dialect."""
        key = (table.name, upsert)
        prepared = self._statements.get(key)
        if prepared is None:
            stmt: sa.Insert = table.insert()
            if upsert:
                insert = (sqlite_dialect.insert(table) if self.engine.dialect.name == "sqlite"
                          else pg_dialect.insert(table))
                keys = [c.name for c in table.primary_key.columns]
                stmt = insert.on_conflict_do_update(
                    index_elements=keys, set_={c.name: insert.excluded[c.name]
                                               for c in table.columns if c.name not in keys})
            prepared = _Prepared.compile(stmt, table, self.engine.dialect)
            self._statements[key] = prepared
        return prepared

    # -- writes -----------------------------------------------------------------
    def create_session(self, name: str, definition: JSONObject, created: float) -> None:
        """Store a new live session; raises :class:`StoreError` if the name is taken."""
        with self._transaction(f"create session {name!r}") as conn:
            conn.execute(sessions.insert().values(name=name, definition=definition,
                                                  created=created,
                                                  status=SessionStatus.LIVE.value))

    def write(self, session: str, log: Sequence[CommandRecord],
              trial_rows: Sequence[TrialRecord] = (),
              client_rows: Sequence[HostInfo] = ()) -> None:
        """Append commands and upsert the trials/clients they changed, in one transaction."""
        with self._transaction(f"session {session!r}") as conn:
            # the hot path: statements compiled once from the Core tables, run on the driver's
            # cursor inside the SQLAlchemy transaction (which commits or rolls back)
            cursor = conn.connection.cursor()
            try:
                self._prepared(commands, upsert=False).run(cursor, [
                    {"session": session, "seq": c.seq, "kind": c.kind, "payload": c.payload,
                     "time": c.time, "client": c.client} for c in log])
                self._prepared(trials, upsert=True).run(cursor, [
                    {"session": session, "id": t.id, "candidate": t.candidate,
                     "point": t.point, "client": t.client, "status": t.status.value,
                     "value": t.value, "failure": t.failure, "leased_at": t.leased_at,
                     "reported_at": t.reported_at} for t in trial_rows])
                self._prepared(clients, upsert=True).run(
                    cursor, [{"session": session, **asdict(c)} for c in client_rows])
            finally:
                cursor.close()
        self.stats.commands += len(log)
        self.stats.trial_rows += len(trial_rows)

    def delete_session(self, name: str) -> bool:
        """Remove a session and everything recorded for it; False if it did not exist."""
        with self._transaction(f"delete session {name!r}") as conn:
            for table in (commands, trials, clients):
                conn.execute(table.delete().where(table.c.session == name))
            return conn.execute(sessions.delete().where(sessions.c.name == name)).rowcount > 0

    # -- reads ------------------------------------------------------------------
    def _read(self, stmt: sa.Executable) -> list[sa.Row[object]]:
        try:
            conn = self._connection()
            with conn.begin():
                return list(conn.execute(stmt))
        except sa.exc.SQLAlchemyError as exc:
            self._drop_connection()
            raise StoreError(f"store read failed: {exc}") from exc

    def live_sessions(self) -> list[StoredSession]:
        """Every session that should be running, oldest first."""
        rows = self._read(sa.select(sessions).where(sessions.c.status == SessionStatus.LIVE.value)
                          .order_by(sessions.c.created, sessions.c.name))
        return [StoredSession(r.name, r.definition, r.created, SessionStatus.parse(r.status))
                for r in rows]

    def get_session(self, name: str) -> StoredSession | None:
        rows = self._read(sa.select(sessions).where(sessions.c.name == name))
        return StoredSession(rows[0].name, rows[0].definition, rows[0].created,
                             SessionStatus.parse(rows[0].status)) if rows else None

    def commands(self, session: str) -> list[CommandRecord]:
        """The session's command log in ``seq`` order."""
        rows = self._read(sa.select(commands).where(commands.c.session == session)
                          .order_by(commands.c.seq))
        return [CommandRecord(r.seq, r.kind, r.payload, r.time, r.client) for r in rows]

    def trials(self, session: str) -> list[TrialRecord]:
        """The session's trial rows in id order."""
        rows = self._read(sa.select(trials).where(trials.c.session == session)
                          .order_by(trials.c.id))
        return [TrialRecord(r.id, r.candidate, r.point, r.client, TrialStatus.parse(r.status),
                            r.value, r.failure, r.leased_at, r.reported_at) for r in rows]

    def clients(self, session: str) -> list[HostInfo]:
        """The session's clients and their hosts, in the order they joined."""
        rows = self._read(sa.select(clients).where(clients.c.session == session)
                          .order_by(clients.c.joined, clients.c.client_id))
        return [HostInfo(r.client_id, r.joined, r.hostname, r.cpu_count, r.ram_bytes, r.os,
                          r.python, r.left) for r in rows]

    def check_integrity(self) -> list[str]:
        """Problems found in the store (empty when healthy): SQLite's own check plus log gaps."""
        problems: list[str] = []
        if self.engine.dialect.name == "sqlite":
            result = [r[0] for r in self._read(sa.text("PRAGMA integrity_check"))]
            if result != ["ok"]:
                problems.extend(str(r) for r in result)
        for s in self.live_sessions():
            seqs = [c.seq for c in self.commands(s.name)]
            if seqs != list(range(1, len(seqs) + 1)):
                problems.append(f"session {s.name!r}: command log seq is not 1..{len(seqs)}")
        return problems
