"""Per-transaction assignment in the project's own Python driver: TPC-H streams and lists of
plain SQL statements, each query in its own transaction under a configuration drawn at random.

Every stream is a thread with its own connection. Per query it draws the statement (its
parameter generator) and, from a separate seeded generator, the configuration, then runs
``BEGIN; SET LOCAL ...; <statement>; COMMIT`` and records the configuration, the template,
the start and the latency (statement and commit, not the ``SET LOCAL`` lines, which cost the
same under every configuration).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from harmony_base.errors import DatabaseError, WorkloadError
from workloads.base import cancel_and_join, cancel_running
from workloads.connect import connect
from workloads.driver import check_tpch_database
from workloads.mix import Mix, parse_mix
from workloads.per_transaction.settings import (
    Configuration,
    check_session_settable,
    padded_set_local,
)
from workloads.per_transaction.trace import CHECK_S, Settled, Trace
from workloads.replay import Execution, ReplayFile, Units
from workloads.script_file import Script
from workloads.tpch.queries import make_query

logger = logging.getLogger(__name__)

#: a unit of work a stream runs itself inside its transaction, after the SET LOCAL lines
Unit = Callable[[psycopg.Connection[TupleRow]], None]
#: a stream's next query, drawn with its parameter generator: (template, statement or unit)
Draw = Callable[[random.Random], tuple[str, sql.Composed | sql.SQL | Unit]]
#: one finished query: (config, template name, start monotonic s, latency s, ok)
_Row = tuple[int, str, float, float, bool]

STOP_TIMEOUT_S = 10.0
#: how long the queries still running at a run's end may take to finish before they are
#: cancelled. Every query that started within the run counts: dropping the ones in flight
#: would drop the slower configuration's long queries more often and bias the ratio towards it
DRAIN_TIMEOUT_S = 60.0


def tpch_draws(dsn: str, mix: Mix | str) -> list[Draw]:
    """One draw per stream of the TPC-H ``mix`` (each stream loops its query with fresh
    parameters, as :class:`workloads.driver.WorkloadDriver` runs it)."""
    scale = check_tpch_database(dsn)

    def loop(query: str) -> Draw:
        return lambda rng: (query, make_query(query, rng, scale).statement)

    return [loop(query) for query, count in parse_mix(mix) for _ in range(count)]


def tpch_loops(mix: Mix | str) -> dict[str, int]:
    """The streams looping each query of the TPC-H ``mix`` (:func:`tpch_draws` runs them)."""
    return {query: count for query, count in parse_mix(mix)}


def statement_draws(scripts: Sequence[Script], streams: int) -> list[Draw]:
    """``streams`` draws, each picking one of the plain statements of ``scripts`` (e.g. a
    ``.sql`` file's) by weight; statements with pgbench parameters are refused."""
    for script in scripts:
        if any(c.meta is not None for c in script.commands) or len(script.sql) != 1:
            raise WorkloadError(f"{script.source}: the Python driver runs plain statements "
                                f"only (no @param, one statement); run it with pgbench instead")
    if streams < 1:
        raise WorkloadError(f"a statement list needs streams >= 1, but got {streams}")
    names = [s.source for s in scripts]
    texts = [sql.SQL(s.sql[0].text.rstrip().rstrip(";")) for s in scripts]
    weights = [s.weight for s in scripts]

    def draw(rng: random.Random) -> tuple[str, sql.Composed | sql.SQL]:
        i = rng.choices(range(len(texts)), weights)[0]
        return names[i], texts[i]

    return [draw] * streams


def replay_draws(replay: ReplayFile, clients: int) -> list[Draw]:
    """``clients`` draws over a captured workload: each takes the next captured unit (one
    cursor shared by all, in captured order, cycling, as :class:`workloads.replay.ReplayWorkload`
    runs them) and runs it with its captured parameters as the body of the stream's
    transaction: a captured ``BEGIN``'s modes become ``SET TRANSACTION``, a captured
    ``ROLLBACK`` rolls the transaction back. The template is the unit's kind (its statements)."""
    if clients < 1:
        raise WorkloadError(f"a replay needs clients >= 1, but got {clients}")
    units = Units(replay.units)

    def run_unit(unit: tuple[Execution, ...]) -> Unit:
        body, modes, rolls_back = replay.transaction_body(unit)

        def run(conn: psycopg.Connection[TupleRow]) -> None:
            if modes:
                conn.execute(sql.SQL("SET TRANSACTION " + modes))
            with psycopg.RawCursor(conn) as cursor:
                for execution in body:
                    replay.execute(conn, cursor, execution)
            if rolls_back:
                raise psycopg.Rollback()

        return run

    def draw(rng: random.Random) -> tuple[str, Unit]:
        unit = units.next()
        return replay.unit_label(unit), run_unit(unit)

    return [draw] * clients


class _Stream(threading.Thread):
    """One connection running its draws until stopped, each under a random configuration."""

    def __init__(self, run: StreamAssignment, index: int, draw: Draw) -> None:
        super().__init__(name=f"harmony-pertx-{index}", daemon=True)
        self.owner, self.draw = run, draw
        self.params = random.Random(f"{run.seed}/params/{index}")
        self.assign = random.Random(f"{run.seed}/assign/{index}")
        self.rows: list[_Row] = []
        #: when the query in flight started (None between queries): every earlier query of
        #: this stream has finished
        self.in_flight: float | None = None
        self._conn: psycopg.Connection[TupleRow] | None = None
        self._lock = threading.Lock()

    def cancel(self) -> None:
        with self._lock:
            conn = self._conn
        cancel_running(conn, self.name)

    def run(self) -> None:
        owner = self.owner
        try:
            conn = connect(owner.dsn, application_name=self.name)
        except DatabaseError as exc:
            logger.warning("stream %s cannot connect: %s", self.name, exc)
            return
        with self._lock:
            self._conn = conn
        try:
            while not owner.stop_event.is_set():
                template, statement = self.draw(self.params)
                k = self.assign.randrange(len(owner.settings))
                started = self.in_flight = time.monotonic()
                try:
                    with conn.transaction():
                        for setting in owner.settings[k]:
                            conn.execute(setting)
                        started = time.monotonic()
                        if callable(statement):
                            statement(conn)
                        else:
                            conn.execute(statement)
                    self.rows.append((k, template, started, time.monotonic() - started, True))
                    self.in_flight = None
                except psycopg.Error as exc:
                    if owner.stop_event.is_set():
                        break
                    self.rows.append((k, template, started, time.monotonic() - started, False))
                    self.in_flight = None
                    logger.warning("stream %s: %s failed: %s", self.name, template, exc)
                    if conn.broken:
                        break
        finally:
            with self._lock:
                self._conn = None
            conn.close()


class StreamAssignment:
    """Runs ``draws`` (one stream each) against ``dsn``, every query under one of
    ``configurations`` drawn at random with equal probability (seeded by ``seed``);
    ``loops``: the streams looping each template, when each stream loops one (TPC-H,
    :func:`tpch_loops`), recorded in the trace (:attr:`Trace.loops`)."""

    def __init__(self, dsn: str, configurations: Sequence[Configuration],
                 draws: Sequence[Draw], *, seed: int = 0,
                 loops: Mapping[str, int] | None = None) -> None:
        if not draws:
            raise WorkloadError("a per-transaction run needs at least one stream")
        self.dsn, self.draws, self.seed, self.loops = dsn, list(draws), seed, loops
        self.configurations = tuple(dict(c) for c in configurations)
        with connect(dsn) as conn:
            check_session_settable(conn, self.configurations)
        self.settings = padded_set_local(self.configurations)
        self.stop_event = threading.Event()

    def run(self, seconds: float, *, settled: Settled | None = None,
            min_s: float = 0.0, check_s: float = CHECK_S) -> Trace:
        """Run every stream for ``seconds``; every query that started within them (the ones
        still running at the end are waited for, up to :data:`DRAIN_TIMEOUT_S`).

        With ``settled``, the run ends sooner once it returns True: from ``min_s`` on, every
        ``check_s`` it is shown the trace so far, cut where no query is unfinished (every
        query that started before the cut has finished, so the slow ones are not left out)."""
        if not seconds > 0:
            raise WorkloadError(f"a per-transaction run lasts > 0 s, but got {seconds}")
        self.stop_event.clear()
        streams = [_Stream(self, i, draw) for i, draw in enumerate(self.draws)]
        t0, wall0 = time.monotonic(), time.time()
        for stream in streams:
            stream.start()
        while not self.stop_event.wait(_next_wait(t0, seconds, settled, min_s, check_s)):
            now = time.monotonic()
            if now - t0 >= seconds:
                break
            if settled is not None and now - t0 >= min_s:
                # the starts in flight first, the rows after: a query that ends in between
                # started at or after the cut, so it is left out either way
                starts = [s.in_flight for s in streams]
                cut = min([now, *(x for x in starts if x is not None)])
                rows = [r for s in streams for r in list(s.rows) if r[2] < cut]
                if settled(self._trace(rows, t0, cut, wall0)):
                    logger.info("per-transaction run settled after %.1f s of %.0f s",
                                now - t0, seconds)
                    break
        t_end = time.monotonic()
        self.stop_event.set()
        drain_until = t_end + DRAIN_TIMEOUT_S
        for stream in streams:
            stream.join(timeout=max(0.0, drain_until - time.monotonic()))
        running = [s for s in streams if s.is_alive()]
        if running:
            logger.warning("%d queries still ran %.0f s after the per-transaction run ended; "
                           "cancelled and left out", len(running), DRAIN_TIMEOUT_S)
        pending = cancel_and_join(running, STOP_TIMEOUT_S)
        if pending:
            logger.warning("streams %s did not stop within %.1f s", pending, STOP_TIMEOUT_S)
        rows = [r for s in streams for r in s.rows if r[2] <= t_end]
        return self._trace(rows, t0, t_end, wall0)

    def _trace(self, rows: Sequence[_Row], t0: float, t_end: float, wall0: float) -> Trace:
        """The trace of ``rows`` (monotonic starts) of a run that began at ``t0``."""
        templates = sorted({r[1] for r in rows})
        index = {name: i for i, name in enumerate(templates)}
        return Trace.from_rows(self.configurations, templates,
                               [(k, index[t], s - t0, lat, ok) for k, t, s, lat, ok in rows],
                               t_end - t0, origin=wall0, loops=self.loops)


def _next_wait(t0: float, seconds: float, settled: Settled | None, min_s: float,
               check_s: float) -> float:
    """How long a run that began at ``t0`` waits before it next looks: until its end, or
    until its next check (``min_s``, then every ``check_s``) when it has a ``settled`` rule."""
    elapsed = time.monotonic() - t0
    left = max(0.0, seconds - elapsed)
    if settled is None:
        return left
    if elapsed < min_s:
        return min(left, min_s - elapsed)
    return min(left, check_s)
