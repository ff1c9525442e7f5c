"""Switchback runs: configurations alternated on the whole server in short slices with
``ALTER SYSTEM`` + ``pg_reload_conf()``, for knobs the tuner cannot ``SET`` on the sessions
(reload-time knobs, and every knob in live mode, where the sessions are the application's).

:class:`ConfigurationSwitch` puts one configuration in force (the first time with the full
verification of :func:`tuner_client.knobs.apply.apply_online_knobs`, then the fast path: the same
``ALTER SYSTEM`` lines and a reload, ~2 ms) and puts every touched line of
``postgresql.auto.conf`` back as it was on exit, exceptions included. :func:`run_slices`
walks a balanced order of slices (:func:`tuner_client.stats.switchback.balanced_order`),
optionally reading counters at each slice's settled start and at its end (live mode);
:func:`run_driven` runs a per-transaction driver (one configuration: the server's) beside
the switching, so each transaction can be attributed to the slice it started in.
:mod:`tuner_client.stats.switchback` analyses what these return.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from harmony_base.errors import ConfigError, DatabaseError, KnobApplyError, WorkloadError
from tuner_client.config.defaults import DEFAULT_SLICE_S
from tuner_client.engine.designs import RELOAD_CONTEXTS
from tuner_client.knobs.apply import alter_system, apply_online_knobs, reload_and_wait
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.stats.switchback import SliceSpan, balanced_order
from workloads.observe import Counters, ObservedWindow, read_counters, window_between
from workloads.per_transaction.trace import Trace

logger = logging.getLogger(__name__)

#: the part of each slice left out after its switch (s), at most a quarter of the slice
#: (:func:`settle_margin`): backends take a reloaded value at their next command, but the
#: carry-over measured with fsync on/off on pgbench was 0.75 s (the first flushes after
#: off→on pay for the WAL written under off; benchmarks/results/evidence_switchback.md);
#: counters of pg_stat_database lag up to PGSTAT_MIN_INTERVAL (1 s)
DEFAULT_SETTLE_S = 0.75
COUNTER_SETTLE_S = 1.0
#: time a driven workload is given per slice beyond the slice itself, for the switch (s)
SWITCH_ALLOWANCE_S = 0.5
#: pg_stat_statements counts a call when it ends: the margin (the carry-over's) also lets
#: the previous slice's statements finish before the window opens
STATEMENT_SETTLE_S = DEFAULT_SETTLE_S
#: the pseudo-template of committed transactions when pg_stat_statements is absent
COMMITS = "xact_commit"

def settle_margin(slice_s: float, settle_s: float = DEFAULT_SETTLE_S) -> float:
    """The margin left out at each slice's start: ``settle_s``, at most a quarter of the
    slice."""
    return min(settle_s, slice_s / 4)


_AUTO_CONF = ("SELECT lower(name), setting FROM pg_file_settings "
              "WHERE sourcefile LIKE '%%postgresql.auto.conf' AND lower(name) = ANY(%s) "
              "ORDER BY seqno")


def auto_conf_entries(conn: psycopg.Connection[TupleRow], names: Sequence[str]
                      ) -> dict[str, str | None]:
    """Each knob's line in ``postgresql.auto.conf`` (its raw value; None: no line)."""
    rows = conn.execute(_AUTO_CONF, [[n.lower() for n in names]]).fetchall()
    found = {str(n): str(v) for n, v in rows}
    return {n: found.get(n.lower()) for n in names}


class ConfigurationSwitch:
    """Puts one of ``configurations`` in force server-wide on demand; restores on exit.

    Every configuration is completed with the values in force at the start for the knobs it
    does not name, so a switch always writes the same knobs. Only reload-time and session
    knobs (context sighup, superuser, user) are accepted: a restart is not a switch.
    """

    def __init__(self, conn: psycopg.Connection[TupleRow], catalog: KnobCatalog,
                 configurations: Sequence[Mapping[str, str]]) -> None:
        if len(configurations) < 2:
            raise ConfigError(f"a switchback needs at least 2 configurations, but got "
                              f"{len(configurations)}")
        self.conn, self.catalog = conn, catalog
        names = sorted({n for c in configurations for n in c})
        for name in names:
            context = catalog.tunable(name).context
            if context not in RELOAD_CONTEXTS:
                raise ConfigError(f"{name} cannot be switched by a reload: its pg_settings "
                                  f"context is {context!r}; a switchback needs one of "
                                  f"{sorted(RELOAD_CONTEXTS)}")
        rows = conn.execute("SELECT name, current_setting(name) FROM pg_settings "
                            "WHERE name = ANY(%s)", [names]).fetchall()
        now = {str(n): str(v) for n, v in rows}
        self.configurations = [{n: str(c.get(n, now[n])) for n in names} for c in configurations]
        self.saved = auto_conf_entries(conn, names)
        self._written: dict[int, dict[str, str]] = {}
        self.switches = 0
        self.switch_s = 0.0
        self._restored = False

    def apply(self, k: int) -> float:
        """Put configuration ``k`` in force; the wall-clock time (``time.time()``) once this
        session has reloaded it."""
        started = time.monotonic()
        written = self._written.get(k)
        if written is None:  # first time: verified in a fresh session, overrides refused
            self._written[k] = apply_online_knobs(self.conn, self.catalog,
                                                  self.configurations[k]).requested
        else:
            alter_system(self.conn, written)
            if not reload_and_wait(self.conn):
                raise KnobApplyError("the server did not reload its configuration within 5 s "
                                     "of pg_reload_conf() during a switchback")
        self.switches += 1
        self.switch_s += time.monotonic() - started
        return time.time()

    def restore(self) -> None:
        """Every touched line of ``postgresql.auto.conf`` back as it was, and reload (once;
        later calls do nothing)."""
        if self._restored:
            return
        self._restored = True
        old = self.conn.autocommit
        self.conn.autocommit = True
        try:
            for name, raw in self.saved.items():
                stmt = (sql.SQL("ALTER SYSTEM RESET {}").format(sql.Identifier(name))
                        if raw is None else
                        sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name),
                                                                   sql.Literal(raw)))
                self.conn.execute(stmt)
        finally:
            self.conn.autocommit = old
        if not reload_and_wait(self.conn):
            logger.warning("the restored configuration was not reloaded within 5 s")
        logger.info("switchback: %s restored after %d switches (%.1f ms each)",
                    sorted(self.saved), self.switches,
                    1e3 * self.switch_s / max(1, self.switches))

    def __enter__(self) -> ConfigurationSwitch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()


#: a slice's counter delta: template -> (calls, busy seconds)
Delta = dict[str, tuple[int, float]]


_DATABASE = ("SELECT xact_commit, xact_rollback, deadlocks, temp_files, stats_reset "
             "FROM pg_stat_database WHERE datname = current_database()")
_HAS_STATEMENTS = ("SELECT 'pg_stat_statements' = ANY(string_to_array(replace("
                   "current_setting('shared_preload_libraries'), ' ', ''), ',')) AND EXISTS ("
                   "SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements')")


def counters_reader(conn: psycopg.Connection[TupleRow]
                    ) -> tuple[Callable[[], Counters], str, float]:
    """What a live switchback reads at each slice's edges, what that is, and the settle
    margin it needs: ``pg_stat_statements`` and ``pg_stat_database`` when the extension is
    there (this session's own statements untracked), else ``pg_stat_database`` alone (the
    committed transactions; these reach it up to 1 s late, hence :data:`COUNTER_SETTLE_S`)."""
    row = conn.execute(_HAS_STATEMENTS).fetchone()
    if row is not None and row[0]:
        try:
            conn.execute("SET pg_stat_statements.track = 'none'")
        except psycopg.Error as exc:
            logger.warning("cannot untrack the switchback's own statements in "
                           "pg_stat_statements (%s); they are counted as traffic", exc)
        return (lambda: read_counters(conn), "statements (pg_stat_statements deltas)",
                STATEMENT_SETTLE_S)

    def database_only() -> Counters:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        db = conn.execute(_DATABASE).fetchone()
        if db is None:
            raise DatabaseError("pg_stat_database has no row for the current database")
        return Counters({}, int(db[0]), int(db[1]), int(db[2]), int(db[3]), db[4],
                        time.monotonic())

    return database_only, "committed transactions (pg_stat_database deltas)", COUNTER_SETTLE_S


def counter_delta(before: Counters, after: Counters) -> Delta:
    """Per statement ``(calls, busy s)``; without statements, committed transactions over
    the window's seconds (pseudo-template :data:`COMMITS`)."""
    window = window_between(before, after)
    if window.statements:
        return {q: (n, n * mean) for q, (n, mean) in window.statements.items()}
    return {COMMITS: (window.xact_commit, window.seconds)} if window.xact_commit else {}


#: :attr:`SliceRun.stopped` when every planned slice ran
ALL_BLOCKS = "all blocks run"


@dataclass
class SliceRun:
    """What :func:`run_slices` observed: the spans and, with counters, one delta per span."""

    spans: list[SliceSpan] = field(default_factory=list)
    deltas: list[Delta] = field(default_factory=list)
    stopped: str = ALL_BLOCKS


def _sleep_until(deadline: float, stop: threading.Event | None) -> None:
    remaining = deadline - time.time()
    if remaining > 0:
        if stop is not None:
            stop.wait(remaining)
        else:
            time.sleep(remaining)


#: :attr:`SliceRun.stopped` when a slice's ``judge`` stopped the run (live mode's guardrails)
TRIPPED = "a guardrail tripped"


def run_slices(switch: ConfigurationSwitch, order: Sequence[tuple[int, int]], slice_s: float,
               *, settle_s: float | None = None,
               counters: Callable[[], Counters] | None = None,
               after_block: Callable[[SliceRun], bool] | None = None,
               stop: threading.Event | None = None,
               judge: Callable[[SliceSpan, ObservedWindow], bool] | None = None) -> SliceRun:
    """Walk ``order`` (``(block, configuration)`` per slice), ``slice_s`` seconds each; with
    ``counters``, read them ``settle_s`` (default :func:`settle_margin`) after each switch and
    at the slice's end. After every complete block ``after_block`` may end the run early
    (True: stop). With counters, ``judge`` sees each slice with its settled window (what the
    traffic did from ``settle_s`` after its switch to its end) and may end the run at once
    (True: :data:`TRIPPED`; the switch's exit then puts the configuration back)."""
    settle_s = settle_margin(slice_s) if settle_s is None else settle_s
    if not slice_s > settle_s >= 0:
        raise ConfigError(f"a slice must outlast its settle margin, but got slice_s={slice_s} "
                          f"and settle_s={settle_s}")
    run = SliceRun()
    for i, (block, k) in enumerate(order):
        if stop is not None and stop.is_set():
            run.stopped = "stopped"
            break
        begin = switch.apply(k)
        before = None
        if counters is not None:
            _sleep_until(begin + settle_s, stop)
            before = counters()
        _sleep_until(begin + slice_s, stop)
        after = counters() if before is not None and counters is not None else None
        if before is not None and after is not None:
            run.deltas.append(counter_delta(before, after))
        run.spans.append(SliceSpan(block, k, begin, time.time()))
        if judge is not None and before is not None and after is not None \
                and judge(run.spans[-1], window_between(before, after)):
            run.stopped = TRIPPED
            break
        last_of_block = i + 1 == len(order) or order[i + 1][0] != block
        if last_of_block and after_block is not None and after_block(run):
            run.stopped = "the intervals cleared"
            break
    return run


class Driver(Protocol):
    """A per-transaction driver over one configuration (the server's own)."""

    def run(self, seconds: int) -> Trace: ...


@dataclass(frozen=True)
class DrivenRun:
    """A driven switchback: the slices and the workload's trace (``start`` on the spans'
    clock: ``trace.origin + trace.start``)."""

    spans: tuple[SliceSpan, ...]
    trace: Trace
    switch_ms: float


def run_driven(conn: psycopg.Connection[TupleRow], catalog: KnobCatalog,
               configurations: Sequence[Mapping[str, str]], driver: Driver, *,
               blocks: int, slice_s: float = DEFAULT_SLICE_S, warmup_s: float = 2.0,
               seed: int = 0) -> DrivenRun:
    """Run ``driver`` while ``blocks`` balanced blocks of slices switch the server between
    ``configurations``; the server's configuration is restored before this returns or
    raises."""
    order = balanced_order(len(configurations), blocks, seed)
    # a switch takes ~2 ms on a quiet machine and a few hundred under heavy load: the
    # workload outlasts the slices with room for that; a driver with a ``stop_event`` (the
    # Python streams) is stopped as soon as they end
    seconds = int(math.ceil(warmup_s + len(order) * (slice_s + SWITCH_ALLOWANCE_S) + 1.0))
    result: dict[str, Trace] = {}
    failure: list[BaseException] = []

    done = threading.Event()

    def drive() -> None:
        try:
            result["trace"] = driver.run(seconds)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)
        finally:
            done.set()

    with ConfigurationSwitch(conn, catalog, configurations) as switch:
        switch.apply(order[0][1])  # verified before the workload starts
        worker = threading.Thread(target=drive, name="harmony-switchback-load", daemon=True)
        worker.start()
        try:
            _sleep_until(time.time() + warmup_s, None)
            run = run_slices(switch, order, slice_s, stop=done)
        finally:
            switch.restore()
            if isinstance(stop := getattr(driver, "stop_event", None), threading.Event):
                stop.set()
            worker.join()
        switch_ms = 1e3 * switch.switch_s / max(1, switch.switches)
    if failure:
        raise failure[0]
    if run.stopped == "stopped":
        raise WorkloadError(f"the workload ended before the switchback's last slice "
                            f"({len(run.spans)} of {len(order)} slices run)")
    return DrivenRun(tuple(run.spans), result["trace"], switch_ms)
