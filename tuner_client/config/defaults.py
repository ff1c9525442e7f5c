"""The built-in knob ranges and memory constants a tuner config falls back on."""

from __future__ import annotations

from typing import Any

from harmony_base.jsontypes import JSONObject

#: Private memory of one PostgreSQL process besides work_mem (``budget.process_memory``):
#: catalog and plan caches, executor state, libraries. Measured on PostgreSQL 15 with TPC-H SF
#: 0.4: the peak sum of RssAnon over 15-19 backends and parallel workers running the TPC-H
#: mixes with work_mem 64kB is 3.7-4.0MB per process (``python -m benchmarks.evidence
#: procmem``). The original budget formula (docs/background.md §2) leaves it out (give 0).
DEFAULT_PROCESS_MEMORY = 4 * 1024**2

#: Switchback slice length (``measure.slice_s``, s): 4 × the carry-over measured after
#: ALTER SYSTEM + reload with a known-effect knob (fsync on/off on pgbench: 0.75 s;
#: ``python -m benchmarks.evidence switchback``, benchmarks/results/evidence_switchback.md),
#: so the settle margin left out is a quarter of each slice.
DEFAULT_SLICE_S = 3.0

#: The online knobs and ranges of docs/background.md §2, used when ``online.knobs`` is omitted.
DEFAULT_ONLINE_KNOBS: dict[str, JSONObject] = {
    "work_mem": {"min": "1MB", "max": "200MB", "step": "1MB"},
    "maintenance_work_mem": {"min": "1MB", "max": "1GB", "step": "1MB"},
    "effective_cache_size": {"min": "128MB", "max": "2GB", "step": "8MB"},
    "random_page_cost": {"min": 0.1, "max": 30, "step": 0.1},
    "temp_buffers": {"min": "1MB", "max": "1GB", "step": "1MB"},
}
#: The offline knob and range of docs/background.md §2, used when ``offline.knobs`` is omitted.
DEFAULT_OFFLINE_KNOBS: dict[str, JSONObject] = {
    "shared_buffers": {"min": "32MB", "max": "2GB", "step": "8MB"},
}
#: Ranges used when a knob is listed by name only (``knobs: [jit, work_mem]``).
KNOWN_RANGES: dict[str, dict[str, Any]] = {
    **DEFAULT_ONLINE_KNOBS, **DEFAULT_OFFLINE_KNOBS,
    "jit": {"values": ["off", "on"]},
    "max_parallel_workers_per_gather": {"min": 0, "max": 8, "step": 1},
    "seq_page_cost": {"min": 0.1, "max": 10, "step": 0.1},
    "effective_io_concurrency": {"min": 0, "max": 256, "step": 1},
    "hash_mem_multiplier": {"min": 1, "max": 8, "step": 0.5},
    # the knobs the workload's statistics may propose (tuner_client.plan.proposals)
    "max_wal_size": {"min": "256MB", "max": "8GB", "step": "256MB"},
    "checkpoint_timeout": {"min": "1min", "max": "30min", "step": "1min"},
    "autovacuum_vacuum_scale_factor": {"min": 0.01, "max": 0.4, "step": 0.01},
    "autovacuum_vacuum_cost_limit": {"min": 100, "max": 4000, "step": 100},
    "autovacuum_naptime": {"min": "5s", "max": "5min", "step": "5s"},
    "jit_above_cost": {"min": 10000, "max": 5000000, "step": 10000},
    # new in 16-18 (tuner_client.knobs.versions; a server without one says which versions
    # have it): asynchronous and combined reads, vacuum's ring buffer
    "maintenance_io_concurrency": {"min": 0, "max": 256, "step": 1},
    "io_combine_limit": {"min": "8kB", "max": "256kB", "step": "8kB"},
    "io_method": {"values": ["sync", "worker"]},
    "io_workers": {"min": 1, "max": 16, "step": 1},
    "vacuum_buffer_usage_limit": {"min": "256kB", "max": "16MB", "step": "256kB"},
}
