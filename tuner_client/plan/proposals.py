"""Knobs proposed from what the workload shows.

PostgreSQL's statistics views are read once, read-only (:mod:`tuner_client.plan.workload_stats`),
and a rule per symptom (:func:`propose`) names the knobs that address it with the numbers behind
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
from dataclasses import dataclass

import psycopg

from harmony_base.jsontypes import JSONObject
from tuner_client.config import (
    DEFAULT_ONLINE_KNOBS,
    KNOWN_RANGES,
    KnobSpec,
    TunerConfig,
)
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.plan.workload_stats import WorkloadStats, observe_workload
from tuner_client.servers.host_memory import detect_ram_bytes
from tuner_client.servers.target import Target
from workloads.factory import make_workload

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


@dataclass(frozen=True)
class Proposal:
    """Knobs worth tuning for one symptom, with the numbers that show it."""

    symptom: str
    knobs: tuple[str, ...]
    evidence: str
    #: knobs that need a restart (proposed only when restarts are allowed)
    restart: bool = False

    def to_dict(self) -> JSONObject:
        return {"symptom": self.symptom, "knobs": list(self.knobs), "evidence": self.evidence,
                "restart": self.restart}


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


def _spills(stats: WorkloadStats, **_: object) -> Proposal | None:
    written = stats.statements.temp_blks_written if stats.statements else 0
    if stats.temp_bytes < MIN_TEMP_BYTES and written == 0:
        return None
    evidence = (f"{stats.temp_files} temporary files, {_size(stats.temp_bytes)} written "
                f"{_since(stats)}" if stats.temp_bytes >= MIN_TEMP_BYTES else f"{written:,} "
                f"temporary blocks written by the statements pg_stat_statements tracks")
    return Proposal("sorts and hashes spill to disk", ("work_mem", "hash_mem_multiplier"),
                    f"{evidence} (work_mem {stats.settings.get('work_mem', '?')})")


def _checkpoints(stats: WorkloadStats, **_: object) -> Proposal | None:
    total = stats.checkpoints_timed + stats.checkpoints_req
    if stats.checkpoints_req == 0 or stats.checkpoints_req < FORCED_CHECKPOINT_SHARE * total:
        return None
    return Proposal("checkpoints forced by WAL volume", ("max_wal_size", "checkpoint_timeout"),
                    f"{stats.checkpoints_req} of {total} checkpoints requested (WAL filled "
                    f"max_wal_size {stats.settings.get('max_wal_size', '?')} before "
                    f"checkpoint_timeout) {_since(stats)}")


def _dead_tuples(stats: WorkloadStats, **_: object) -> Proposal | None:
    worst = stats.worst_table
    if worst is None or worst[1] < DEAD_SHARE or worst[2] < MIN_DEAD_ROWS:
        return None
    return Proposal("dead tuples pile up faster than autovacuum removes them",
                    ("autovacuum_vacuum_scale_factor", "autovacuum_vacuum_cost_limit",
                     "autovacuum_naptime"),
                    f"{worst[0]} holds {worst[2]:,} dead rows ({worst[1]:.0%} of its rows); "
                    f"{stats.dead_tuples:,} dead rows in all user tables")


def _jit(stats: WorkloadStats, **_: object) -> Proposal | None:
    st = stats.statements
    if st is None or st.exec_ms <= 0 or st.jit_ms < JIT_SHARE * st.exec_ms:
        return None
    return Proposal("JIT compilation takes a share of the statements' time",
                    ("jit", "jit_above_cost"),
                    f"JIT {st.jit_ms / 1000:.1f} s of {st.exec_ms / 1000:.1f} s execution "
                    f"({st.jit_ms / st.exec_ms:.1%}) over {st.calls:,} calls")


def _parallel(stats: WorkloadStats, *, cpus: int | None, **_: object) -> Proposal | None:
    st = stats.statements
    workers = int(stats.settings.get("max_parallel_workers_per_gather", "0") or 0)
    if st is None or cpus is None or cpus > FEW_CPUS or workers == 0 \
            or st.top_mean_ms < PARALLEL_STATEMENT_MS:
        return None
    return Proposal("parallel plans compete for few cores", ("max_parallel_workers_per_gather",),
                    f"{cpus} CPUs, max_parallel_workers_per_gather {workers}; the statement "
                    f"with the most time takes {st.top_mean_ms:.0f} ms a call "
                    f"({st.top_query[:60]!r}), long enough for a parallel plan")


def _misses(stats: WorkloadStats, *, restarts: bool, **_: object) -> Proposal | None:
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
                    **_: object) -> Proposal | None:
    if ram_bytes is None or stats.database_bytes == 0 or stats.database_bytes * 2 > ram_bytes:
        return None
    return Proposal("the data fits in memory: random reads are cheap",
                    ("random_page_cost", "effective_cache_size"),
                    f"database {_size(stats.database_bytes)}, memory "
                    f"{_size(ram_bytes)}: the OS page cache can hold it")


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
    driver = None if config.workload.observe is not None \
        else make_workload(config.workload, target.dsn, seed=config.seed)
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
