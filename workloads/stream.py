"""One query stream: a thread with its own connection that loops one TPC-H query.

Each iteration draws fresh substitution parameters. A failed query counts as an error; if
the connection broke, the stream reconnects with exponential backoff and carries on.
"""

from __future__ import annotations

import logging
import random
import threading

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from harmony_base.errors import DatabaseError
from workloads.connect import connect
from workloads.recorder import Recorder
from workloads.tpch.queries import make_query

logger = logging.getLogger(__name__)

BACKOFF_START_S = 0.05
BACKOFF_MAX_S = 2.0


class QueryStream(threading.Thread):
    """Loops ``query`` on its own connection until ``stop_event`` is set."""

    def __init__(
        self,
        dsn: str,
        query: str,
        index: int,
        *,
        seed: int,
        scale: float,
        recorder: Recorder,
        stop_event: threading.Event,
        statement_timeout_s: float | None = None,
    ) -> None:
        super().__init__(name=f"harmony-tpch-{query}-{index}", daemon=True)
        self.dsn = dsn
        self.query = query
        self.index = index
        self.scale = scale
        self.recorder = recorder
        self.stop_event = stop_event
        self.statement_timeout_s = statement_timeout_s
        self.rng = random.Random(f"{seed}/{query}/{index}")
        self.reconnects = 0
        self.connect_failures = 0
        self._conn: psycopg.Connection[TupleRow] | None = None
        self._conn_lock = threading.Lock()

    def _open(self) -> psycopg.Connection[TupleRow] | None:
        """Connect, retrying with backoff until connected or stopped."""
        delay = BACKOFF_START_S
        while not self.stop_event.is_set():
            try:
                conn = connect(self.dsn, application_name=self.name)
                if self.statement_timeout_s is not None:
                    conn.execute(
                        sql.SQL("set statement_timeout = {}").format(
                            sql.Literal(f"{round(self.statement_timeout_s * 1000)}ms")
                        )
                    )
            except (DatabaseError, psycopg.Error) as exc:
                self.connect_failures += 1
                logger.debug(
                    "stream %s cannot connect (retry in %.2f s): %s", self.name, delay, exc
                )
                self.stop_event.wait(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
                continue
            with self._conn_lock:
                self._conn = conn
            if self.stop_event.is_set():  # stop() may have missed this connection
                self._close()
                return None
            return conn
        return None

    def _close(self) -> None:
        with self._conn_lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except psycopg.Error:
                pass

    def cancel(self) -> None:
        """Ask the server to cancel the running query (if any); safe from another thread."""
        with self._conn_lock:
            conn = self._conn
        if conn is None or conn.closed:
            return
        try:
            conn.cancel_safe(timeout=2.0)
        except (psycopg.Error, OSError) as exc:
            logger.debug("cancelling %s failed: %s", self.name, exc)

    def run(self) -> None:
        conn: psycopg.Connection[TupleRow] | None = None
        try:
            while not self.stop_event.is_set():
                if conn is None:
                    conn = self._open()
                    if conn is None:
                        break
                instance = make_query(self.query, self.rng, self.scale)
                token, started = self.recorder.begin(self.query)
                try:
                    with conn.cursor() as cur:
                        # The rows stay in libpq's result; not converting them to Python
                        # objects keeps the driver's own CPU use small.
                        cur.execute(instance.statement)
                except psycopg.Error as exc:
                    if self.stop_event.is_set():
                        self.recorder.forget(token)
                        break
                    self.recorder.record(self.query, started, ok=False, token=token)
                    logger.warning("stream %s: %s failed: %s", self.name, self.query, exc)
                    if conn.closed or conn.broken:
                        self._close()
                        conn = None
                        self.reconnects += 1
                    continue
                self.recorder.record(self.query, started, ok=True, token=token)
        finally:
            self._close()
