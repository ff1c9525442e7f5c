"""The duet's clone restarts warm, as the server does (``measure.prewarm``): a real clone of a
pgbench database, its table read into the buffer, then restarted with a new shared_buffers
through :class:`~tuner_client.duet.warm.WarmRestarts` (the table resident again) and without it
(cold); a reload-time change records nothing."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from duet_fixtures import clone_parent  # noqa: F401  (fixture)
from test_duet import _pgbench_db

from tuner_client.duet.clone import make_clone
from tuner_client.duet.warm import WarmRestarts
from tuner_client.servers.local_cluster import LocalCluster

pytestmark = pytest.mark.postgres

_RESIDENT = """
SELECT count(*) FROM pg_buffercache
 WHERE relfilenode = pg_relation_filenode('pgbench_accounts')
   AND reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


def _resident_share(dsn: str) -> float:
    """The share of pgbench_accounts' pages in the buffer."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_buffercache")
        resident = conn.execute(_RESIDENT).fetchone()
        pages = conn.execute("SELECT pg_relation_size('pgbench_accounts') / "
                             "current_setting('block_size')::int").fetchone()
    assert resident is not None and pages is not None and pages[0] > 0
    return int(resident[0]) / int(pages[0])


def _read_table(dsn: str) -> None:
    """pgbench_accounts into the buffer (a sequential scan of a table above a quarter of
    shared_buffers would go through a ring of a few buffers)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        conn.execute("SELECT pg_prewarm('pgbench_accounts')")


def test_the_clone_restarts_warm_with_its_buffer_loaded_back(
        own_cluster: LocalCluster, tmp_path: Path, clone_parent: Path) -> None:  # noqa: F811
    dsn = _pgbench_db(own_cluster)
    clone = make_clone(dsn, journals=tmp_path / "journals", mark="warm-test",
                       parent=clone_parent)
    try:
        on_clone = clone.dsn_like(dsn)
        warm = WarmRestarts(on_clone)
        put = warm.wrap(lambda s: clone.apply(dict(s)))
        assert clone.apply({"shared_buffers": "64MB"}) is True  # room for its ~13 MB
        _read_table(on_clone)
        before = _resident_share(on_clone)
        assert before > 0.95, before
        # a reload-time change: nothing recorded, nothing loaded
        assert put({"work_mem": "8MB"}) is False and warm.results == []
        # a restart through the wrapper: the table is back in the buffer
        assert put({"shared_buffers": "96MB"}) is True
        assert len(warm.results) == 1 and warm.results[0].method == "pg_buffercache"
        assert warm.results[0].blocks > 0, warm.results[0]
        assert _resident_share(on_clone) > 0.95 * before
        # the same restart without it: cold (only what the check's own reads touch)
        assert clone.apply({"shared_buffers": "80MB"}) is True
        assert _resident_share(on_clone) < 0.1
    finally:
        clone.remove()
