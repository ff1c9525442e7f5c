"""Work memory raised past 40 % of the online budget races on the whole server, not per
transaction (:func:`tuner_client.engine.pressure.memory_pressure_reason`)."""

from __future__ import annotations

import psycopg

from tuner_client.budget import BudgetView, MemoryBudget
from tuner_client.config import parse_tuner_config, resolve_knob_space
from tuner_client.engine.pressure import memory_pressure_reason
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.servers.local_cluster import LocalCluster

MB = 1024**2
#: the memory knobs the candidates leave alone, as a power run had them in force
IN_FORCE = {"maintenance_work_mem": "64MB", "temp_buffers": "8MB", "shared_buffers": "128MB"}


def _view(catalog: KnobCatalog, ram_mb: int) -> BudgetView:
    """The power runs' budget: 8 TPC-H streams and 8 parallel workers (16 connections), 32MB
    OS reserve, 4MB a process, hash_mem_multiplier 2: work_mem counted 32 times."""
    cfg = parse_tuner_config("name: x\nonline: {knobs: {work_mem: {min: 64kB, max: 64MB}}}\n")
    online = resolve_knob_space(cfg.online.knobs, catalog, kind="online")
    offline = resolve_knob_space(cfg.offline.knobs, catalog, kind="offline")
    budget = MemoryBudget(ram_bytes=ram_mb * MB, os_reserved_bytes=32 * MB, connections=16,
                          process_memory_bytes=4 * MB)
    return BudgetView(budget, catalog, offline, online)


def test_work_memory_near_the_budget_is_raced_on_the_whole_server(
        pg_cluster: LocalCluster) -> None:
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        catalog = KnobCatalog.from_connection(conn)
    tight, roomy = _view(catalog, 320), _view(catalog, 1024)
    low, high = {"work_mem": "64kB"}, {"work_mem": "4MB"}
    # 320MB: 320 - 128 - 32 - 16 x 4 = 96MB for W; 4MB x 32 + 64 + 8 = 200MB is 208 %
    assert tight.online_share({**IN_FORCE, **high}) == 200 / 96
    why = memory_pressure_reason(tight, IN_FORCE, [low, high]) or ""
    assert "work_mem differs" in why and "208 %" in why
    # 1GB: 800MB for W, the same candidate takes 25 %: per transaction stays
    assert roomy.online_share({**IN_FORCE, **high}) == 200 / 800
    assert memory_pressure_reason(roomy, IN_FORCE, [low, high]) is None
    # lowering work memory, or changing no memory knob, never sends the race away
    assert memory_pressure_reason(tight, IN_FORCE, [high, low]) is None
    assert memory_pressure_reason(tight, IN_FORCE,
                                  [{"random_page_cost": "4"}, {"random_page_cost": "2"}]) is None
    # the candidates' values count, not the ones in force: 1MB x 32 + 72 = 104MB, 108 %
    why = memory_pressure_reason(tight, {**IN_FORCE, "work_mem": "64MB"},
                                 [low, {"work_mem": "1MB"}]) or ""
    assert "108 %" in why
    # a budget knob neither in force nor in the candidates decides nothing
    assert memory_pressure_reason(tight, {"work_mem": "64kB"}, [low, high]) is None
