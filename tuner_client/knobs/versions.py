"""Which PostgreSQL versions (15–18) have which of the knobs the tuner names, and how they
differ: the facts a live ``pg_settings`` cannot give about a server of another version.

The catalog of a run is always the target server's own ``pg_settings``
(:class:`tuner_client.knobs.catalog.KnobCatalog`); this table serves the messages around it (a
knob the server lacks is named with the versions that have it) and the knob lists' ranges
(:data:`tuner_client.config.defaults.KNOWN_RANGES`). Each entry is checked against the
``pg_settings`` of a live PostgreSQL 15 and 18 by tests/test_versions.py (context, type,
unit, range and default of every version the test machine has); the 16 and 17 facts are from
the release notes.

A value that changed is a tuple of ``(first major, value)`` pairs, oldest first: on
PostgreSQL 18 ``effective_io_concurrency`` defaults to 16, before that to 1.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the oldest and newest majors the tuner is checked on
OLDEST, NEWEST = 15, 18

Changing = tuple[tuple[int, str | None], ...]


@dataclass(frozen=True)
class KnobFacts:
    """One knob across versions: in which majors it exists, its pg_settings context, type,
    unit, range and default (in native units, as pg_settings prints them)."""

    name: str
    vartype: str
    context: Changing
    default: Changing
    unit: str | None = None
    min_val: Changing = ((OLDEST, None),)
    max_val: Changing = ((OLDEST, None),)
    since: int = OLDEST
    #: the first major that no longer has it (None: every version since ``since``)
    removed: int | None = None
    note: str = ""

    def exists_in(self, major: int) -> bool:
        return self.since <= major and (self.removed is None or major < self.removed)

    def at(self, major: int) -> dict[str, str | None]:
        """context, vartype, unit, min_val, max_val and boot_val on ``major``."""
        def pick(values: Changing) -> str | None:
            return [v for first, v in values if first <= major][-1]
        return {"context": pick(self.context), "vartype": self.vartype, "unit": self.unit,
                "min_val": pick(self.min_val), "max_val": pick(self.max_val),
                "boot_val": pick(self.default)}

    def versions_text(self) -> str:
        """``PostgreSQL 17 and later`` / ``PostgreSQL 15 only`` / ``… up to 15``."""
        if self.removed is None:
            return f"PostgreSQL {self.since} and later"
        last = self.removed - 1
        if last == self.since:
            return f"PostgreSQL {last} only"
        return f"PostgreSQL {self.since} to {last}" if self.since > OLDEST else \
            f"PostgreSQL up to {last}"


def _one(value: str | None) -> Changing:
    return ((OLDEST, value),)


def _facts(name: str, vartype: str, context: str | Changing, default: str | Changing,
           unit: str | None = None, lo: str | Changing | None = None,
           hi: str | Changing | None = None, since: int = OLDEST, removed: int | None = None,
           note: str = "") -> KnobFacts:
    def changing(v: str | Changing | None, first: int) -> Changing:
        return ((first, v),) if v is None or isinstance(v, str) else v
    return KnobFacts(name=name, vartype=vartype, context=changing(context, since),
                     default=changing(default, since), unit=unit, min_val=changing(lo, since),
                     max_val=changing(hi, since), since=since, removed=removed, note=note)


_MAXINT = "2147483647"
_MAXREAL = "1.79769e+308"

KNOB_FACTS: dict[str, KnobFacts] = {f.name: f for f in (
    # the memory budget's knobs and the default tuned ones
    _facts("shared_buffers", "integer", "postmaster", "16384", "8kB", "16", "1073741823"),
    _facts("work_mem", "integer", "user", "4096", "kB", "64", _MAXINT),
    _facts("maintenance_work_mem", "integer", "user", "65536", "kB",
           ((15, "1024"), (17, "64")), _MAXINT, note="its minimum fell from 1MB to 64kB in 17"),
    _facts("temp_buffers", "integer", "user", "1024", "8kB", "100", "1073741823"),
    _facts("effective_cache_size", "integer", "user", "524288", "8kB", "1", _MAXINT),
    _facts("random_page_cost", "real", "user", "4", None, "0", _MAXREAL),
    _facts("seq_page_cost", "real", "user", "1", None, "0", _MAXREAL),
    _facts("hash_mem_multiplier", "real", "user", "2", None, "1", "1000"),
    _facts("jit", "bool", "user", "on"),
    _facts("jit_above_cost", "real", "user", "100000", None, "-1", _MAXREAL),
    _facts("max_parallel_workers_per_gather", "integer", "user", "2", None, "0", "1024"),
    _facts("max_parallel_workers", "integer", "user", "8", None, "0", "1024"),
    _facts("max_parallel_maintenance_workers", "integer", "user", "2", None, "0", "1024"),
    _facts("max_worker_processes", "integer", "postmaster", "8", None, "0", "262143"),
    _facts("max_connections", "integer", "postmaster", "100", None, "1", "262143"),
    # PGTune's and the proposals' knobs
    _facts("max_wal_size", "integer", "sighup", "1024", "MB", "2", _MAXINT),
    _facts("min_wal_size", "integer", "sighup", "80", "MB", "2", _MAXINT),
    _facts("checkpoint_timeout", "integer", "sighup", "300", "s", "30", "86400"),
    _facts("checkpoint_completion_target", "real", "sighup", "0.9", None, "0", "1"),
    _facts("wal_buffers", "integer", "postmaster", "-1", "8kB", "-1", "262143"),
    _facts("default_statistics_target", "integer", "user", "100", None, "1", "10000"),
    _facts("huge_pages", "enum", "postmaster", "try"),
    _facts("autovacuum_vacuum_scale_factor", "real", "sighup", "0.2", None, "0", "100"),
    _facts("autovacuum_vacuum_cost_limit", "integer", "sighup", "-1", None, "-1", "10000"),
    _facts("autovacuum_naptime", "integer", "sighup", "60", "s", "1", "2147483"),
    _facts("autovacuum_max_workers", "integer", ((15, "postmaster"), (18, "sighup")), "3",
           None, "1", "262143", note="a reload is enough from 18 on (up to "
           "autovacuum_worker_slots); a restart before"),
    # asynchronous and combined I/O
    _facts("effective_io_concurrency", "integer", "user", ((15, "1"), (18, "16")), None, "0",
           "1000", note="its default rose from 1 to 16 in 18"),
    _facts("maintenance_io_concurrency", "integer", "user", ((15, "10"), (18, "16")), None,
           "0", "1000", note="its default rose from 10 to 16 in 18"),
    _facts("io_combine_limit", "integer", "user", "16", "8kB", "1", ((17, "32"), (18, "128")),
           since=17, note="at most 256kB in 17, 1MB in 18 (and at most io_max_combine_limit)"),
    _facts("io_max_combine_limit", "integer", "postmaster", "16", "8kB", "1", "128", since=18),
    _facts("io_method", "enum", "postmaster", "worker", since=18,
           note="sync, worker, or io_uring where the server was built with liburing"),
    _facts("io_workers", "integer", "sighup", "3", None, "1", "32", since=18),
    _facts("io_max_concurrency", "integer", "postmaster", "-1", None, "-1", "1024", since=18),
    # vacuum and the planner, new in 16-18
    _facts("vacuum_buffer_usage_limit", "integer", "user", ((16, "256"), (17, "2048")), "kB",
           "0", "16777216", since=16, note="its default rose from 256kB to 2MB in 17"),
    _facts("autovacuum_worker_slots", "integer", "postmaster", "16", None, "1", "262143",
           since=18),
    _facts("autovacuum_vacuum_max_threshold", "integer", "sighup", "100000000", None, "-1",
           _MAXINT, since=18),
    _facts("enable_presorted_aggregate", "bool", "user", "on", since=16),
    _facts("enable_group_by_reordering", "bool", "user", "on", since=17),
    _facts("enable_distinct_reordering", "bool", "user", "on", since=18),
    _facts("enable_self_join_elimination", "bool", "user", "on", since=18),
    _facts("transaction_buffers", "integer", "postmaster", "0", "8kB", "0", "131072", since=17),
    _facts("transaction_timeout", "integer", "user", "0", "ms", "0", _MAXINT, since=17),
    _facts("summarize_wal", "bool", "sighup", "off", since=17),
    # gone since 15
    _facts("old_snapshot_threshold", "integer", "postmaster", "-1", "min", "-1", "86400",
           removed=17),
    _facts("vacuum_defer_cleanup_age", "integer", "sighup", "0", None, "0", "1000000",
           removed=16),
    _facts("force_parallel_mode", "enum", "user", "off", removed=16,
           note="renamed debug_parallel_query in 16"),
)}


def version_text(server_version_num: int) -> str:
    """``180006`` → ``18.6``; ``150018`` → ``15.18``."""
    return f"{server_version_num // 10000}.{server_version_num % 10000}"


def missing_knob_hint(name: str, server_version_num: int | None) -> str:
    """Why a server lacks ``name`` when the table knows (``; io_combine_limit is a setting of
    PostgreSQL 17 and later``), else ``""``."""
    facts = KNOB_FACTS.get(name.lower())
    if facts is None or server_version_num is None:
        return ""
    if facts.exists_in(server_version_num // 10000):
        return ""
    note = f" ({facts.note})" if facts.note else ""
    return f"; {facts.name} is a setting of {facts.versions_text()}{note}"
