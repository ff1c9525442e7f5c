"""Which knobs have a side no single session sees: a knob fact the measurement designs' validity
(:mod:`tuner_client.engine.designs`) and the per-transaction race's warnings
(:mod:`tuner_client.stats.per_transaction_race`) both read."""

from __future__ import annotations

#: session knobs with a system-wide side: the workers a gather starts compete for the cores
#: with every other backend, which the per-transaction latency of one arm does not see
#: (measured: parallel workers 2→0 read 0.70× per transaction and 1.34× in whole-server
#: windows, docs/background.md §6; on the demo 0.77× against 1.22×)
SYSTEM_WIDE_KNOBS = frozenset({
    "max_parallel_workers_per_gather", "parallel_setup_cost", "parallel_tuple_cost",
    "min_parallel_table_scan_size", "min_parallel_index_scan_size",
    "parallel_leader_participation", "max_parallel_maintenance_workers"})
