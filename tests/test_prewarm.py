"""Warm restarts on a real PostgreSQL: the buffer's blocks recorded before a restart are
resident again after it (``measure.prewarm``), and not without it."""

from __future__ import annotations

import psycopg
import pytest
from tune_fixtures import TpchCluster, tpch_cluster  # noqa: F401  (fixture)

from tuner_client.config import MeasureConfig, parse_tuner_config
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.measurer import Measurer, ServerAccess
from tuner_client.measurer.prewarm import BufferRecord, Prewarmer, drop_leftover_extensions
from tuner_client.servers.controllers import LocalController
from workloads.driver import WorkloadDriver

_RESIDENT = """
SELECT count(*) FROM pg_buffercache b
 WHERE b.relfilenode = pg_relation_filenode('lineitem')
   AND b.reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


def _lineitem_resident(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(_RESIDENT).fetchone()
        assert row is not None
        return int(row[0])


def _lineitem_pages(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT pg_relation_size('lineitem') / "
                           "current_setting('block_size')::int").fetchone()
        assert row is not None
        return int(row[0])


def _extensions(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {r[0] for r in conn.execute("SELECT extname FROM pg_extension").fetchall()}


def test_hottest_blocks_first_in_contiguous_ranges() -> None:
    """A smaller buffer gets the hottest blocks (the record's order), loaded as ranges."""
    record = BufferRecord(((7, 4), (7, 5), (9, 0), (7, 6), (7, 1), (9, 1)))
    assert record.hottest_ranges(4) == [(7, 4, 6), (9, 0, 0)]
    assert record.hottest_ranges(6) == [(7, 1, 1), (7, 4, 6), (9, 0, 1)]
    assert record.hottest_ranges(0) == []


def test_a_larger_buffer_gets_what_the_largest_one_held_after_the_hottest_now() -> None:
    """A restart from 80 MB back to 128 MB loaded only the 80 MB buffer's blocks (10,148 of
    16,384): the record is completed by the richest earlier one, hottest-now first."""
    prewarmer = Prewarmer()
    large = BufferRecord(((1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (2, 2)))
    assert prewarmer.remember(large) is large and prewarmer.richest is large
    small = BufferRecord(((2, 2), (1, 0)))
    done = prewarmer.remember(small)
    assert done.blocks == ((2, 2), (1, 0), (1, 1), (1, 2), (2, 0), (2, 1))
    assert done.hottest_ranges(2) == [(1, 0, 0), (2, 2, 2)]  # a small buffer: hottest now
    assert prewarmer.richest is large  # the smaller record never replaces the richer
    larger = BufferRecord(tuple((3, n) for n in range(7)))
    assert prewarmer.remember(larger) is larger and prewarmer.richest is larger


@pytest.mark.postgres
def test_a_restart_with_prewarm_finds_the_table_resident(
        tpch_cluster: TpchCluster) -> None:  # noqa: F811
    """After the workload read lineitem, a restart with ``measure.prewarm`` leaves lineitem's
    blocks resident (before any query), a restart without it leaves none; the warm-up after
    a prewarmed restart is ``warmup_s``; the extensions the tuner created are dropped when
    it restores the original configuration."""
    dsn = tpch_cluster.dsn
    assert not {"pg_buffercache", "pg_prewarm"} & _extensions(dsn)
    with psycopg.connect(dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    config = MeasureConfig(warmup_s=0.2, restart_warmup_s=1.5, samples=1, queries=4)
    m = Measurer(ServerAccess(dsn, catalog,
                              LocalController(tpch_cluster.cluster, precheck_memory=False)),
                 WorkloadDriver(dsn, "2Q6"), config)
    m.in_force = m.current_settings(["shared_buffers"])
    original = dict(m.in_force)
    pages = _lineitem_pages(dsn)
    assert pages > 100
    try:
        m.start()
        m.sample()  # Q6 scans lineitem: its blocks are in the buffer
        m.stop()
        outcome = m.apply({"shared_buffers": "64MB"}, warm_up=False)
        assert outcome.failure is None and outcome.prewarm is not None
        assert outcome.prewarm.method == "pg_buffercache"
        assert outcome.prewarm.blocks >= pages and outcome.prewarm.capacity == 64 * 128
        assert _lineitem_resident(dsn) >= 0.95 * pages  # loaded back, no query ran since
        # with the workload running: the warm-up after a prewarmed restart is warmup_s
        m.start()
        outcome = m.apply({"shared_buffers": "48MB"})
        assert outcome.prewarm is not None and outcome.prewarm.blocks >= pages
        assert m.windows.last_warmup_s == 0.2
        m.stop()

        m.config = MeasureConfig(warmup_s=0.2, restart_warmup_s=1.5, samples=1, queries=4,
                                 prewarm=False)
        outcome = m.apply({"shared_buffers": "96MB"}, warm_up=False)
        assert outcome.failure is None and outcome.prewarm is None
        assert _lineitem_resident(dsn) == 0
    finally:
        m.restore(original)
        m.close()
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT current_setting('shared_buffers')").fetchone()
        assert row is not None and row[0] == original["shared_buffers"]
    assert not {"pg_buffercache", "pg_prewarm"} & _extensions(dsn)


def test_prewarm_is_a_measure_option() -> None:
    assert parse_tuner_config("name: x\n").measure.prewarm is True
    assert parse_tuner_config("name: x\nmeasure: {prewarm: false}\n").measure.prewarm is False


def test_the_pass_says_what_its_restarts_restored() -> None:
    from tuner_client.measurer.prewarm import PrewarmResult, prewarm_summary

    assert prewarm_summary([]) is None
    warm = PrewarmResult("pg_buffercache", blocks=12_800, seconds=0.5, recorded=16_384,
                         capacity=12_800)
    cold = PrewarmResult("none", reason="CREATE EXTENSION pg_buffercache failed: denied")
    assert prewarm_summary([warm, warm]) == ("2 of 2 restart(s) prewarmed (pg_buffercache): "
                                             "25600 blocks (200 MB of 8 kB) restored in "
                                             "1.0 s in all")
    assert prewarm_summary([warm, cold]).endswith(  # type: ignore[union-attr]
        "; 1 cold: CREATE EXTENSION pg_buffercache failed: denied")
    assert prewarm_summary([cold]) == ("1 restart(s) not prewarmed: CREATE EXTENSION "
                                       "pg_buffercache failed: denied")


@pytest.mark.postgres
def test_extensions_a_crashed_run_left_are_dropped_by_the_next_start(fresh_dsn: str) -> None:
    """A run that dies between creating pg_buffercache/pg_prewarm and its cleanup leaves
    them; the next run's start drops those (they carry the tuner's mark), never an extension
    the user created."""
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pgstattuple")  # the user's own
        crashed = Prewarmer()
        assert crashed.ensure(conn, "pg_buffercache") == ""
        assert crashed.ensure(conn, "pg_prewarm") == ""
        assert crashed.created == ["pg_buffercache", "pg_prewarm"]
    # ... the run dies here: no cleanup
    assert {"pg_buffercache", "pg_prewarm", "pgstattuple"} <= _extensions(fresh_dsn)
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        assert sorted(drop_leftover_extensions(conn)) == ["pg_buffercache", "pg_prewarm"]
        assert drop_leftover_extensions(conn) == []
    left = _extensions(fresh_dsn)
    assert "pgstattuple" in left and not {"pg_buffercache", "pg_prewarm"} & left
