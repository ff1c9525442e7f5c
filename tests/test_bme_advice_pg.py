"""The shared_buffers prior on a real PostgreSQL: measured miss probabilities fall with the
buffer size and SharedBuffersAdvisor fits them (docs/background.md §3)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from bme import SharedBuffersAdvisor, touched_pages_p_star
from tuner_client.measurer import StatsDelta, read_database_stats, stats_delta
from tuner_client.servers.local_cluster import LocalCluster

pytestmark = pytest.mark.postgres

KB = 1024
ROWS = 40_000
LOOKUPS = 10_000
#: 16, 256 and 768 buffers against a ~1,300-page table + index
SIZES_KB = (128, 2048, 6144)

LOOKUP_SQL = (
    "SELECT sum((SELECT v FROM t WHERE id = k)) "
    "FROM (SELECT 1 + floor(random() * %s)::int AS k FROM generate_series(1, %s)) keys")


def _flush_own_stats(conn: psycopg.Connection[Any]) -> None:
    """Make this backend's pending counters visible (it otherwise flushes about once a second)."""
    conn.execute("SELECT pg_stat_force_next_flush()")


def _lookup_window(conn: psycopg.Connection[Any], seed: float) -> StatsDelta:
    """A warm-up pass, then a measured pass of uniform random key lookups; its stat deltas."""
    conn.execute("SELECT setseed(%s)", [seed])
    conn.execute(LOOKUP_SQL, [ROWS, LOOKUPS // 2])  # warm-up: fill the buffer
    _flush_own_stats(conn)
    before = read_database_stats(conn)
    conn.execute(LOOKUP_SQL, [ROWS, LOOKUPS])
    _flush_own_stats(conn)
    delta = stats_delta(before, read_database_stats(conn))
    assert delta is not None
    return delta


def test_miss_probability_falls_with_shared_buffers_and_feeds_the_prior(
    own_cluster: LocalCluster,
) -> None:
    with psycopg.connect(own_cluster.dsn, autocommit=True) as conn:
        if int(conn.execute("SHOW server_version_num").fetchone()[0]) < 150000:  # type: ignore[index]
            pytest.skip("pg_stat_force_next_flush() needs PostgreSQL 15")
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, pad text NOT NULL)")
        conn.execute("INSERT INTO t SELECT g, g %% 97, repeat('x', 200) "
                     "FROM generate_series(1, %s) g", [ROWS])
        conn.execute("VACUUM ANALYZE t")
        row = conn.execute("SELECT (pg_relation_size('t') + pg_relation_size('t_pkey')) / 8192"
                           ).fetchone()
    assert row is not None
    relpages = int(row[0])
    assert 1000 < relpages < 2000  # well above every size measured (768 buffers at most)

    deltas: list[StatsDelta] = []
    for i, size_kb in enumerate(SIZES_KB):
        with psycopg.connect(own_cluster.dsn, autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM SET shared_buffers = '{size_kb}kB'")
        own_cluster.restart()
        with psycopg.connect(own_cluster.dsn, autocommit=True) as conn:
            shown = conn.execute("SELECT setting::int * 8 FROM pg_settings "
                                 "WHERE name = 'shared_buffers'").fetchone()
            assert shown == (size_kb,)
            deltas.append(_lookup_window(conn, 0.1 * (i + 1)))

    misses = [d.miss_ratio for d in deltas]
    accesses = [d.blks_hit + d.blks_read for d in deltas]
    # an index lookup touches the root, a leaf and a heap page: about 3 accesses each
    assert all(2.5 * LOOKUPS < a < 4 * LOOKUPS for a in accesses), accesses
    assert all(m is not None for m in misses)
    p = [float(m) for m in misses]  # type: ignore[arg-type]
    # 16 buffers miss most heap and leaf pages; 768 buffers hold over half the heap
    assert p[0] > 0.5
    assert p[0] > p[1] + 0.1 > p[2] + 0.15
    assert p[2] > 0.02

    p_star = touched_pages_p_star(relpages, min(accesses))
    assert p_star < p[2]
    prior = SharedBuffersAdvisor(p_star=p_star)
    for size_kb, d, expected in zip(SIZES_KB, deltas, p, strict=True):
        assert prior.add_point(size_kb * KB, d.blks_hit, d.blks_read) == pytest.approx(expected)
    assert prior.ready
    fit = prior.fit()
    assert fit is not None
    assert fit.r2 > 0.95
    assert fit.params.p_star == pytest.approx(p_star)
    # no plateau in the data: the knee is at or beyond the largest size measured
    assert fit.params.m_star >= 0.99 * SIZES_KB[-1] * KB
    for size_kb, expected in zip(SIZES_KB, p, strict=True):
        assert float(fit.predict(size_kb * KB)) == pytest.approx(expected, abs=0.05)
    advice = prior.recommend(max_bytes=64 * 1024 * KB, min_bytes=128 * KB)
    assert advice.usable, advice.reason
    assert advice.m_star_bytes is not None and advice.simplex is not None
    assert SIZES_KB[-1] * KB * 0.99 <= advice.m_star_bytes <= 64 * 1024 * KB
    assert advice.simplex[0] == advice.m_star_bytes
    summary = prior.to_dict()
    assert summary["n_points"] == 3 and summary["r2"] == pytest.approx(fit.r2)
