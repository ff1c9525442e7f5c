"""Replaying a captured workload (``harmony capture``) with the tuner's sample interface.

A replay file holds the captured statements (their text as the server logged it, with
``$n`` parameters when the application bound them), the units of work in the order they
began (one statement in autocommit, or a whole transaction of one session), each
execution with its real parameter values, and the capture's concurrency. ``clients``
connections pull the units in captured order from one shared cursor, cycling, and run them
with the captured parameters (bound the same way, so each statement keeps its
``pg_stat_statements`` queryid); the mix of the capture is the mix of any long enough
window of the replay.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from harmony_base.errors import ConfigError, DatabaseError, WorkloadError
from harmony_base.jsontypes import JSONObject
from workloads.base import Workload, cancel_and_join
from workloads.connect import connect, describe_dsn
from workloads.recorder import Recorder
from workloads.sample import Sample

logger = logging.getLogger(__name__)

FORMAT = "harmony-replay"
VERSION = 1
STOP_TIMEOUT_S = 10.0

#: one execution: (statement index, parameter values as text or None)
Execution = tuple[int, list[str | None] | None]
#: a captured transaction's first statement (group 1: its transaction modes) and last one
_BEGIN = re.compile(r"^\s*(?:begin|start\s+transaction)\b(?:\s+(?:work|transaction)\b)?"
                    r"([^;]*?);?\s*$", re.I | re.S)
_END = re.compile(r"^\s*(commit|end|rollback|abort)(?:\s+(?:work|transaction))?\s*;?\s*$",
                  re.I)


@dataclass(frozen=True)
class CapturedStatement:
    """A distinct statement text of the capture, with its calls and logged time."""

    id: str
    sql: str
    calls: int
    total_ms: float
    writes: bool
    queryid: int | None = None  # from the log line (%Q), when the server computes one


@dataclass(frozen=True)
class ReplayFile:
    """A captured workload (see the module docstring)."""

    statements: tuple[CapturedStatement, ...]
    units: tuple[tuple[Execution, ...], ...]
    clients: int
    seconds: float
    captured: JSONObject
    pg_stat_statements: list[JSONObject] | None = None

    @property
    def writes(self) -> bool:
        return any(s.writes for s in self.statements)

    def check_writes(self, writes: bool) -> None:
        """Raise :class:`ConfigError` when the capture writes and ``writes`` does not allow it."""
        if self.writes and not writes:
            first = next(s for s in self.statements if s.writes)
            raise ConfigError(f"the captured workload writes (statement {first.id}: "
                              f"`{first.sql[:80]}`), but the replay does not allow writes; "
                              f"set writes: true in the workload to replay it")

    def transaction_body(self, unit: Sequence[Execution]) -> tuple[list[Execution], str, bool]:
        """A unit as the body of a transaction someone else opens and closes: its captured
        ``BEGIN`` and ``COMMIT``/``ROLLBACK`` taken off. Returns the executions between them,
        the ``BEGIN``'s transaction modes (``ISOLATION LEVEL ...``; empty for none) and whether
        the unit ended in ``ROLLBACK``/``ABORT``."""
        body = list(unit)
        modes, rolls_back = "", False
        if body and (m := _BEGIN.match(self.statements[body[0][0]].sql)):
            modes = m.group(1).strip()
            body = body[1:]
        if body and (m := _END.match(self.statements[body[-1][0]].sql)):
            rolls_back = m.group(1).lower() in ("rollback", "abort")
            body = body[:-1]
        return body, modes, rolls_back

    def execute(self, conn: psycopg.Connection[TupleRow], cursor: psycopg.RawCursor[TupleRow],
                execution: Execution) -> None:
        """Run one captured execution on ``conn``: its captured text, or its statement with
        its captured parameters through ``cursor`` (a :class:`psycopg.RawCursor` of ``conn``:
        the statements keep their ``$n`` placeholders)."""
        index, params = execution
        text = self.statements[index].sql
        if params is None:
            conn.execute(text)  # captured text
        else:
            cursor.execute(text, params)

    def unit_label(self, unit: Sequence[Execution]) -> str:
        """A unit's kind, by its statements (``s3``, or ``s1+s4+s2`` for a transaction)."""
        return "+".join(self.statements[i].id for i, _ in unit)

    def to_json(self) -> JSONObject:
        return {
            "format": FORMAT, "version": VERSION, "captured": self.captured,
            "seconds": self.seconds, "clients": self.clients,
            "statements": [{"id": s.id, "sql": s.sql, "calls": s.calls,
                            "total_ms": round(s.total_ms, 3), "writes": s.writes,
                            "queryid": s.queryid}
                           for s in self.statements],
            "units": [[[i, p] for i, p in unit] for unit in self.units],
            "pg_stat_statements": self.pg_stat_statements,
        }

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=None, separators=(",", ":")) + "\n")


def read_replay_file(path: Path | str) -> ReplayFile:
    """Read and check a replay file; errors name the file and what is wrong."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"replay file {path} does not exist; record one with harmony "
                          f"capture --dsn ... --seconds N --out {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"replay file {path} is not readable JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"replay file {path} is not a harmony capture (format must be "
                          f"{FORMAT!r})")
    if data.get("version") != VERSION:
        raise ConfigError(f"replay file {path} has version {data.get('version')!r}; this "
                          f"harmony reads version {VERSION}")
    try:
        statements = tuple(CapturedStatement(str(s["id"]), str(s["sql"]), int(s["calls"]),
                                             float(s["total_ms"]), bool(s["writes"]),
                                             s.get("queryid"))
                           for s in data["statements"])
        units = tuple(tuple((int(i), list(p) if p is not None else None) for i, p in unit)
                      for unit in data["units"])
        replay = ReplayFile(statements=statements, units=units, clients=int(data["clients"]),
                            seconds=float(data["seconds"]), captured=dict(data["captured"]),
                            pg_stat_statements=data.get("pg_stat_statements"))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"replay file {path} is malformed: {exc!r}") from None
    if not units:
        raise ConfigError(f"replay file {path} holds no captured statement; capture longer or "
                          f"while the application runs")
    for unit in units:
        for i, _ in unit:
            if not 0 <= i < len(statements):
                raise ConfigError(f"replay file {path} is malformed: a unit names statement "
                                  f"{i} of {len(statements)}")
    return replay


class Units:
    """The captured units in order, cycling; shared by the clients."""

    def __init__(self, units: Sequence[tuple[Execution, ...]]) -> None:
        self._cycle: Iterator[tuple[Execution, ...]] = itertools.cycle(units)
        self._lock = threading.Lock()

    def next(self) -> tuple[Execution, ...]:
        with self._lock:
            return next(self._cycle)


class _StatementTimes:
    """Cumulative (count, seconds) per statement id; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.totals: dict[str, tuple[int, float]] = {}

    def add(self, statement: str, seconds: float) -> None:
        with self._lock:
            n, total = self.totals.get(statement, (0, 0.0))
            self.totals[statement] = (n + 1, total + seconds)

    def snapshot(self) -> dict[str, tuple[int, float]]:
        with self._lock:
            return dict(self.totals)


class _ReplayClient(threading.Thread):
    def __init__(self, index: int, workload: ReplayWorkload) -> None:
        super().__init__(name=f"harmony-replay-{index}", daemon=True)
        self.workload = workload
        self._conn: psycopg.Connection[TupleRow] | None = None
        self._lock = threading.Lock()

    def cancel(self) -> None:
        with self._lock:
            conn = self._conn
        if conn is not None and not conn.closed:
            try:
                conn.cancel_safe(timeout=2.0)
            except (psycopg.Error, OSError):
                pass

    def run(self) -> None:
        w = self.workload
        stop = w._stop_event
        while not stop.is_set():
            try:
                conn = w.open_connection(self.name)
            except DatabaseError as exc:
                logger.warning("replay client %s cannot connect: %s", self.name, exc)
                stop.wait(1.0)
                continue
            with self._lock:
                self._conn = conn
            try:
                self._loop(conn)
            finally:
                with self._lock:
                    self._conn = None
                conn.close()

    def _loop(self, conn: psycopg.Connection[TupleRow]) -> None:
        w = self.workload
        replay = w.replay
        cursor = psycopg.RawCursor(conn)
        while not w._stop_event.is_set():
            unit = w._units.next()
            label = replay.unit_label(unit)
            token, started = w.recorder.begin(label)
            try:
                for execution in unit:
                    t0 = time.monotonic()
                    replay.execute(conn, cursor, execution)
                    w._times.add(replay.statements[execution[0]].id, time.monotonic() - t0)
            except psycopg.Error as exc:
                if w._stop_event.is_set():
                    w.recorder.forget(token)
                    return
                w.recorder.record(label, started, ok=False, token=token)
                w.errors_seen += 1
                if w.errors_seen <= 5:
                    logger.warning("replay: unit %s failed: %s", label, str(exc).strip())
                if conn.broken or conn.closed:
                    return
                if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    try:
                        conn.execute("ROLLBACK")
                    except psycopg.Error:
                        return
                continue
            w.recorder.record(label, started, ok=True, token=token)


class ReplayWorkload(Workload):
    """Replays a captured workload against ``dsn`` with ``clients`` connections (default:
    the captured concurrency)."""

    def __init__(self, dsn: str, replay: ReplayFile | Path | str, *, clients: int | None = None,
                 writes: bool = False, statement_timeout_s: float | None = None) -> None:
        self.dsn = dsn
        self.replay = replay if isinstance(replay, ReplayFile) else read_replay_file(replay)
        self.clients = clients or self.replay.clients
        if self.clients < 1:
            raise ConfigError(f"replay clients must be >= 1, but got {self.clients}")
        self.replay.check_writes(writes)
        self.writes = writes
        self.statement_timeout_s = statement_timeout_s
        self.recorder = Recorder()
        self._stop_event = threading.Event()
        self._units = Units(self.replay.units)
        self._times = _StatementTimes()
        self._threads: list[_ReplayClient] = []
        self.errors_seen = 0

    def open_connection(self, name: str) -> psycopg.Connection[TupleRow]:
        conn = connect(self.dsn, application_name=name)
        if not self.writes:
            conn.execute("SET default_transaction_read_only = on")
        if self.statement_timeout_s is not None:
            conn.execute(sql.SQL("SET statement_timeout = {}").format(
                sql.Literal(f"{round(self.statement_timeout_s * 1000)}ms")))
        return conn

    def start(self) -> None:
        """Check the statements on the database (each prepared, nothing run), then start."""
        if self._threads:
            raise WorkloadError("the replay is already running; stop() it first")
        self._check()
        self._stop_event.clear()
        self.recorder.reset()
        self._units = Units(self.replay.units)
        self._threads = [_ReplayClient(i, self) for i in range(self.clients)]
        for thread in self._threads:
            thread.start()
        logger.info("replaying %d captured units (%d statements) with %d clients on %s",
                    len(self.replay.units), len(self.replay.statements), self.clients,
                    describe_dsn(self.dsn))

    def _check(self) -> None:
        """Every captured statement with parameters must prepare on this database."""
        with connect(self.dsn) as conn:
            pgconn = conn.pgconn
            for statement in self.replay.statements:
                if "$1" not in statement.sql:
                    continue  # literal SQL (maybe several statements): checked when it runs
                res = pgconn.prepare(b"", statement.sql.encode(), None)
                if res.status != psycopg.pq.ExecStatus.COMMAND_OK:
                    message = (res.error_message or b"").decode().strip()
                    raise ConfigError(f"captured statement {statement.id} (`"
                                      f"{statement.sql[:80]}`) is not valid on "
                                      f"{describe_dsn(self.dsn)}: {message}")

    def sample(self, seconds: float | None = None, *, queries: int | None = None,
               timeout_s: float | None = None, since: float | None = None,
               every_query: bool = False) -> Sample:
        """Throughput in units of work (statements or transactions) over a window or a
        fixed number of units; ``per_statement`` holds each statement's mean latency."""
        if not self._threads:
            raise WorkloadError("the replay is not running; call start() first")
        before = self._times.snapshot()
        labels = tuple(dict.fromkeys(self.replay.unit_label(u) for u in self.replay.units))
        got = self.recorder.sample(seconds, queries=queries, timeout_s=timeout_s,
                                   labels=lambda: (labels, "replay"), since=since)
        after = self._times.snapshot()
        per_statement = {}
        for sid, (n, total) in after.items():
            n0, total0 = before.get(sid, (0, 0.0))
            if n > n0:
                per_statement[sid] = (total - total0) / (n - n0)
        return Sample(seconds=got.seconds, completed=got.completed, errors=got.errors,
                      qpm=got.qpm, per_query=got.per_query, mix=got.mix,
                      per_statement=per_statement)

    def statement_counts(self) -> dict[str, tuple[int, float]]:
        """Executions and seconds per statement id since start."""
        return self._times.snapshot()

    def stop(self) -> None:
        threads, self._threads = self._threads, []
        if not threads:
            return
        self._stop_event.set()
        self.recorder.stop()
        pending = cancel_and_join(threads, STOP_TIMEOUT_S)
        if pending:
            logger.warning("replay clients %s did not stop", pending)
