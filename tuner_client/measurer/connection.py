"""The measurer's admin connection to the tuned database, and reading settings through it."""

from __future__ import annotations

import logging
import time

import psycopg
from psycopg.rows import TupleRow

from harmony_base.errors import DatabaseError

logger = logging.getLogger(__name__)


class AdminConnection:
    """An autocommit admin connection to the workload's database, reopened when broken and
    retried for ``timeout_s`` while the server is down (e.g. restarting)."""

    def __init__(self, dsn: str, timeout_s: float) -> None:
        self.dsn = dsn
        self.timeout_s = timeout_s
        self._conn: psycopg.Connection[TupleRow] | None = None

    def get(self) -> psycopg.Connection[TupleRow]:
        """The open connection (reopened if broken)."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
                return self._conn
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise DatabaseError(f"cannot connect to the database being tuned: "
                                        f"{exc}") from exc
                time.sleep(0.5)

    def live(self) -> psycopg.Connection[TupleRow]:
        """:meth:`get`, checked with a round trip: a connection the server dropped (a crash
        and restart, e.g. a backend OOM-killed while the last point was measured) only shows
        as broken when used, so it is replaced here rather than failing the next apply."""
        conn = self.get()
        try:
            conn.execute("SELECT 1")
            return conn
        except psycopg.OperationalError as exc:
            logger.info("admin connection lost (%s); reconnecting", str(exc).strip())
            conn.close()
            self._conn = None
            return self.get()

    def close(self) -> None:
        """Close the connection if open (the next :meth:`get` opens a new one)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def current_settings(self, names: list[str]) -> dict[str, str]:
        """``current_setting()`` of each knob in a session of this connection's role/db."""
        rows = self.get().execute(
            "SELECT name, current_setting(name) FROM pg_settings WHERE name = ANY(%s)",
            [names]).fetchall()
        return {r[0]: r[1] for r in rows}
