"""Knobs proposed from what the workload shows.

PostgreSQL's statistics views are read once, read-only (:func:`read_workload_stats`), and a
rule per symptom (:func:`propose`) names the knobs that address it with the numbers behind
it: temporary files → ``work_mem``/``hash_mem_multiplier``; checkpoints forced by WAL volume →
``max_wal_size``/``checkpoint_timeout``; dead tuples piling up → the autovacuum knobs; JIT
compilation time → the JIT knobs; long parallel-capable statements on few cores →
``max_parallel_workers_per_gather``; buffer misses → ``shared_buffers`` (a restart) and
``effective_cache_size``; data that fits in memory → ``random_page_cost``. The thresholds are
deliberately low: a proposal puts a knob in front of the screening, which decides whether its
effect clears the noise; leaving a knob out hides it from the whole run.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import psycopg

from harmony_base.errors import DatabaseError
from tuner_client.config import (
    DEFAULT_ONLINE_KNOBS,
    KNOWN_RANGES,
    KnobSpec,
    TunerConfig,
)
from tuner_client.host_memory import detect_ram_bytes
from tuner_client.knobs import KnobCatalog
from tuner_client.target import Target, make_workload

logger = logging.getLogger(__name__)

#: a spill of this many bytes (or more) since the statistics were reset counts as spilling
MIN_TEMP_BYTES = 1
#: requested checkpoints as a share of all checkpoints that counts as WAL pressure
FORCED_CHECKPOINT_SHARE = 0.1
#: a table this far behind on vacuum (dead / (live + dead)) with at least MIN_DEAD_ROWS dead
DEAD_SHARE = 0.1
MIN_DEAD_ROWS = 1000
#: JIT time as a share of statement execution time worth tuning
JIT_SHARE = 0.01
#: a statement this slow on average (ms) is one a parallel plan would be chosen for
PARALLEL_STATEMENT_MS = 50.0
#: at most this many CPUs counts as "few cores" for parallel workers
FEW_CPUS = 4
#: the buffer hit ratio below which misses are worth a look (with at least MIN_READS reads)
HIT_RATIO = 0.99
MIN_READS = 1000


class Startable(Protocol):
    """A workload driver as :func:`observe_workload` runs it."""

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def sample(self, seconds: float | None = None) -> object: ...


@dataclass(frozen=True)
class WorkloadStats:
    """What the statistics views say about the workload since they were last reset."""

    database: str
    stats_since: str | None
    xact_commit: int
    temp_files: int
    temp_bytes: int
    blks_read: int
    blks_hit: int
    checkpoints_timed: int
    checkpoints_req: int
    dead_tuples: int
    live_tuples: int
    #: the table furthest behind on vacuum: (name, dead share, dead rows)
    worst_table: tuple[str, float, int] | None
    database_bytes: int
    #: pg_stat_statements of this database, when the extension is installed in it
    statements: StatementStats | None
    #: settings the rules compare against (current values as pg_settings shows them)
    settings: Mapping[str, str] = field(default_factory=dict)
    #: seconds the counters cover when they are a window's difference (None: since reset)
    window_s: float | None = None


@dataclass(frozen=True)
class StatementStats:
    """pg_stat_statements summed over this database's statements."""

    count: int
    calls: int
    exec_ms: float
    jit_ms: float
    temp_blks_written: int
    #: the mean execution time (ms) of the statement that took the most time in total
    top_mean_ms: float
    top_query: str


@dataclass(frozen=True)
class Proposal:
    """Knobs worth tuning for one symptom, with the numbers that show it."""

    symptom: str
    knobs: tuple[str, ...]
    evidence: str
    #: knobs that need a restart (proposed only when restarts are allowed)
    restart: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"symptom": self.symptom, "knobs": list(self.knobs), "evidence": self.evidence,
                "restart": self.restart}


_DATABASE = """
SELECT current_database(), stats_reset::text, xact_commit, temp_files, temp_bytes,
       blks_read, blks_hit, pg_database_size(current_database())
FROM pg_stat_database WHERE datname = current_database()"""
_BGWRITER = "SELECT checkpoints_timed, checkpoints_req FROM pg_stat_bgwriter"
_TABLES = """
SELECT schemaname || '.' || relname, n_live_tup, n_dead_tup FROM pg_stat_user_tables"""
_HAS_STATEMENTS = """
SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"""
_STATEMENTS = """
SELECT count(*), coalesce(sum(calls), 0), coalesce(sum(total_exec_time), 0),
       coalesce(sum(jit_generation_time + jit_inlining_time + jit_optimization_time
                    + jit_emission_time), 0),
       coalesce(sum(temp_blks_written), 0)
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database
                                      WHERE datname = current_database())"""
#: the SELECT or WITH (what a parallel plan can serve; not COPY or DDL) with the most time
_TOP_STATEMENT = """
SELECT mean_exec_time, left(query, 80) FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query ~* '^[[:space:](]*(select|with)[[:>:]]'
ORDER BY total_exec_time DESC LIMIT 1"""
_SETTINGS = """
SELECT name, current_setting(name) FROM pg_settings WHERE name IN
  ('max_parallel_workers_per_gather', 'jit', 'max_wal_size', 'checkpoint_timeout',
   'work_mem', 'shared_buffers')"""


def read_workload_stats(conn: psycopg.Connection[Any]) -> WorkloadStats:
    """Read the statistics views once (SELECTs only: nothing is reset or changed)."""
    row = conn.execute(_DATABASE).fetchone()
    assert row is not None  # the current database always has a pg_stat_database row
    bg = conn.execute(_BGWRITER).fetchone() or (0, 0)
    tables = conn.execute(_TABLES).fetchall()
    worst: tuple[str, float, int] | None = None
    for name, live, dead in tables:
        live, dead = int(live or 0), int(dead or 0)
        share = dead / (live + dead) if live + dead else 0.0
        if dead and (worst is None or (share, dead) > (worst[1], worst[2])):
            worst = (str(name), share, dead)
    statements = None
    if conn.execute(_HAS_STATEMENTS).fetchone() is not None:
        try:
            s = conn.execute(_STATEMENTS).fetchone()
            top = conn.execute(_TOP_STATEMENT).fetchone()
        except psycopg.Error as exc:  # installed but not preloaded: the view cannot be read
            logger.info("pg_stat_statements is installed but not readable (%s)", exc)
        else:
            assert s is not None  # an aggregate always returns one row
            statements = StatementStats(
                count=int(s[0]), calls=int(s[1]), exec_ms=float(s[2]), jit_ms=float(s[3]),
                temp_blks_written=int(s[4]), top_mean_ms=float(top[0]) if top else 0.0,
                top_query=" ".join(str(top[1]).split()) if top else "")
    settings = {str(n): str(v) for n, v in conn.execute(_SETTINGS).fetchall()}
    return WorkloadStats(
        database=str(row[0]), stats_since=row[1], xact_commit=int(row[2] or 0),
        temp_files=int(row[3] or 0), temp_bytes=int(row[4] or 0), blks_read=int(row[5] or 0),
        blks_hit=int(row[6] or 0), checkpoints_timed=int(bg[0] or 0),
        checkpoints_req=int(bg[1] or 0),
        dead_tuples=sum(int(t[2] or 0) for t in tables),
        live_tuples=sum(int(t[1] or 0) for t in tables), worst_table=worst,
        database_bytes=int(row[7] or 0), statements=statements, settings=settings)


def propose(stats: WorkloadStats, *, ram_bytes: int | None, cpus: int | None,
            restarts: bool) -> list[Proposal]:
    """The knobs the statistics point at, one :class:`Proposal` per symptom seen.

    ``restarts``: whether restart-time knobs may be tuned on this server (otherwise a symptom
    that only a restart-time knob addresses is proposed with its reload-time knobs alone and
    the evidence says so)."""
    rules = (_spills, _checkpoints, _dead_tuples, _jit, _parallel, _misses, _fits_in_memory)
    out = []
    for rule in rules:
        got = rule(stats, ram_bytes=ram_bytes, cpus=cpus, restarts=restarts)
        if got is not None:
            out.append(got)
    return out


def proposed_knobs(proposals: list[Proposal], *, restarts: bool) -> tuple[list[str], list[str]]:
    """The proposals' knobs split into (reload-time, restart-time), each once, in order."""
    online: list[str] = []
    offline: list[str] = []
    for p in proposals:
        target = offline if p.restart else online
        if p.restart and not restarts:
            continue
        target.extend(k for k in p.knobs if k not in online and k not in offline)
    return online, offline


def _size(n: int) -> str:
    for unit, size in (("GB", 2**30), ("MB", 2**20), ("kB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _since(stats: WorkloadStats) -> str:
    if stats.window_s is not None:
        return f"in {stats.window_s:.0f} s of the workload"
    return f"since {stats.stats_since}" if stats.stats_since else "since the server started"


def _spills(stats: WorkloadStats, **_: Any) -> Proposal | None:
    written = stats.statements.temp_blks_written if stats.statements else 0
    if stats.temp_bytes < MIN_TEMP_BYTES and written == 0:
        return None
    evidence = (f"{stats.temp_files} temporary files, {_size(stats.temp_bytes)} written "
                f"{_since(stats)}" if stats.temp_bytes >= MIN_TEMP_BYTES else f"{written:,} "
                f"temporary blocks written by the statements pg_stat_statements tracks")
    return Proposal("sorts and hashes spill to disk", ("work_mem", "hash_mem_multiplier"),
                    f"{evidence} (work_mem {stats.settings.get('work_mem', '?')})")


def _checkpoints(stats: WorkloadStats, **_: Any) -> Proposal | None:
    total = stats.checkpoints_timed + stats.checkpoints_req
    if stats.checkpoints_req == 0 or stats.checkpoints_req < FORCED_CHECKPOINT_SHARE * total:
        return None
    return Proposal("checkpoints forced by WAL volume", ("max_wal_size", "checkpoint_timeout"),
                    f"{stats.checkpoints_req} of {total} checkpoints requested (WAL filled "
                    f"max_wal_size {stats.settings.get('max_wal_size', '?')} before "
                    f"checkpoint_timeout) {_since(stats)}")


def _dead_tuples(stats: WorkloadStats, **_: Any) -> Proposal | None:
    worst = stats.worst_table
    if worst is None or worst[1] < DEAD_SHARE or worst[2] < MIN_DEAD_ROWS:
        return None
    return Proposal("dead tuples pile up faster than autovacuum removes them",
                    ("autovacuum_vacuum_scale_factor", "autovacuum_vacuum_cost_limit",
                     "autovacuum_naptime"),
                    f"{worst[0]} holds {worst[2]:,} dead rows ({worst[1]:.0%} of its rows); "
                    f"{stats.dead_tuples:,} dead rows in all user tables")


def _jit(stats: WorkloadStats, **_: Any) -> Proposal | None:
    st = stats.statements
    if st is None or st.exec_ms <= 0 or st.jit_ms < JIT_SHARE * st.exec_ms:
        return None
    return Proposal("JIT compilation takes a share of the statements' time",
                    ("jit", "jit_above_cost"),
                    f"JIT {st.jit_ms / 1000:.1f} s of {st.exec_ms / 1000:.1f} s execution "
                    f"({st.jit_ms / st.exec_ms:.1%}) over {st.calls:,} calls")


def _parallel(stats: WorkloadStats, *, cpus: int | None, **_: Any) -> Proposal | None:
    st = stats.statements
    workers = int(stats.settings.get("max_parallel_workers_per_gather", "0") or 0)
    if st is None or cpus is None or cpus > FEW_CPUS or workers == 0 \
            or st.top_mean_ms < PARALLEL_STATEMENT_MS:
        return None
    return Proposal("parallel plans compete for few cores", ("max_parallel_workers_per_gather",),
                    f"{cpus} CPUs, max_parallel_workers_per_gather {workers}; the statement "
                    f"with the most time takes {st.top_mean_ms:.0f} ms a call "
                    f"({st.top_query[:60]!r}), long enough for a parallel plan")


def _misses(stats: WorkloadStats, *, restarts: bool, **_: Any) -> Proposal | None:
    reads = stats.blks_read + stats.blks_hit
    if stats.blks_read < MIN_READS or reads == 0:
        return None
    hit = stats.blks_hit / reads
    if hit >= HIT_RATIO:
        return None
    evidence = (f"buffer hit ratio {hit:.1%} ({stats.blks_read:,} blocks read from the OS "
                f"{_since(stats)}), shared_buffers {stats.settings.get('shared_buffers', '?')}")
    if restarts:
        return Proposal("reads miss shared_buffers", ("shared_buffers",), evidence,
                        restart=True)
    # what reads cost is then the planner's question: how much is cached, what a random read
    # costs (a TPC-H mix in 320 MB missed 5 % and cleared random_page_cost alone in screening)
    return Proposal("reads miss shared_buffers", ("effective_cache_size", "random_page_cost"),
                    evidence + "; shared_buffers needs a restart, which this run does not "
                               "allow")


def _fits_in_memory(stats: WorkloadStats, *, ram_bytes: int | None,
                    **_: Any) -> Proposal | None:
    if ram_bytes is None or stats.database_bytes == 0 or stats.database_bytes * 2 > ram_bytes:
        return None
    return Proposal("the data fits in memory: random reads are cheap",
                    ("random_page_cost", "effective_cache_size"),
                    f"database {_size(stats.database_bytes)}, memory "
                    f"{_size(ram_bytes)}: the OS page cache can hold it")


def stats_delta(before: WorkloadStats, after: WorkloadStats) -> WorkloadStats:
    """What happened between two readings: the counters' differences; the dead tuples, the
    sizes and the settings as ``after`` reads them (they are levels, not counters)."""
    statements = after.statements
    if before.statements is not None and after.statements is not None:
        b, a = before.statements, after.statements
        statements = replace(a, calls=a.calls - b.calls, exec_ms=a.exec_ms - b.exec_ms,
                             jit_ms=a.jit_ms - b.jit_ms,
                             temp_blks_written=a.temp_blks_written - b.temp_blks_written)
    return replace(after, stats_since=None, window_s=None,
                   xact_commit=after.xact_commit - before.xact_commit,
                   temp_files=after.temp_files - before.temp_files,
                   temp_bytes=after.temp_bytes - before.temp_bytes,
                   blks_read=after.blks_read - before.blks_read,
                   blks_hit=after.blks_hit - before.blks_hit,
                   checkpoints_timed=after.checkpoints_timed - before.checkpoints_timed,
                   checkpoints_req=after.checkpoints_req - before.checkpoints_req,
                   statements=statements)


def observe_workload(dsn: str, seconds: float, workload: Startable | None = None,
                     *, sleep: Callable[[float], None] = time.sleep) -> WorkloadStats:
    """The statistics of ``seconds`` of the workload: ``workload`` run for that long (or the
    traffic already on the server when None), read before and after, read-only."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
            conn.read_only = True
            before = read_workload_stats(conn)
            started = time.monotonic()
            if workload is None:
                sleep(seconds)
            else:
                # a driver's load runs inside sample() (pgbench runs only there)
                workload.start()
                try:
                    workload.sample(seconds=seconds)
                finally:
                    workload.stop()
            watched = time.monotonic() - started
            # the backends' pending counts reach the views within a second of their last
            # transaction (PostgreSQL 15 flushes them at most once a second)
            sleep(1.0)
            return replace(stats_delta(before, read_workload_stats(conn)), window_s=watched)
    except psycopg.Error as exc:
        raise DatabaseError(f"cannot read the statistics views of {dsn}: {exc}") from exc


def auto_knob_specs(proposals: list[Proposal], catalog: KnobCatalog
                    ) -> tuple[KnobSpec, ...]:
    """``online.knobs: auto``: the proposals' reload-time knobs this server has, with their
    built-in ranges; the default online knobs when nothing was proposed."""
    online, _ = proposed_knobs(proposals, restarts=False)
    names = [n for n in online if n in catalog and catalog[n].tunable
             and catalog[n].kind == "online" and n in KNOWN_RANGES]
    if not names:
        names = list(DEFAULT_ONLINE_KNOBS)
    specs = []
    for name in names:
        spec = KNOWN_RANGES[name]
        values = spec.get("values")
        specs.append(KnobSpec(name=name, min=spec.get("min"), max=spec.get("max"),
                              step=spec.get("step"),
                              values=tuple(values) if values is not None else None,
                              where="online.knobs: auto"))
    return tuple(specs)


def choose_online_knobs(config: TunerConfig, target: Target
                        ) -> tuple[tuple[KnobSpec, ...], list[Proposal]]:
    """``online.knobs: auto``: run the workload for a warm-up's length (live mode: watch the
    traffic already there), read what it did, and take the reload-time knobs it points at."""
    seconds = max(config.measure.warmup_s, config.measure.seconds or 0.0, 10.0)
    driver = None if config.workload.observe is not None else make_workload(config, target.dsn)
    stats = observe_workload(target.dsn, seconds, driver)
    local = target.embedded or loopback(target.dsn)
    proposals = propose(stats, ram_bytes=target.ram_bytes or detect_ram_bytes(),
                        cpus=os.cpu_count() if local else None,
                        restarts=bool(config.offline.knobs))
    specs = auto_knob_specs(proposals, target.catalog)
    logger.info("online.knobs: auto: %s from %.0f s of the workload (%s)",
                [s.name for s in specs], seconds,
                "; ".join(f"{p.symptom}: {', '.join(p.knobs)}" for p in proposals)
                or "no symptom: the default online knobs")
    return specs, proposals


def loopback(dsn: str) -> bool:
    """Whether ``dsn`` names a server on this host (its CPUs are this host's)."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return False
    host = str(info.get("host") or "")
    return host in ("", "localhost", "127.0.0.1", "::1") or host.startswith("/")
