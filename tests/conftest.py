"""Shared fixtures: a real PostgreSQL cluster started by the tests themselves (no mocks).

* ``pg_cluster`` (session): one started :class:`LocalCluster` shared by all tests; do not
  restart it or change its ``ALTER SYSTEM`` settings (use ``own_cluster`` for that).
* ``fresh_dsn`` (function): a new database on ``pg_cluster``, dropped afterwards; its DSN.
* ``own_cluster`` (function): a private started cluster for tests that restart the server
  or change server-wide settings; destroyed afterwards.

State directories live under /tmp (not pytest's 0700 tmp dirs) so that the unprivileged
user PostgreSQL runs as when the tests run as root can reach them.
"""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tuner_client.local_cluster import LocalCluster


def _new_state_dir(tag: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"harmony-test-{tag}-", dir="/tmp"))


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[LocalCluster]:
    """A started PostgreSQL shared by the whole test session; stopped and removed at the end."""
    cluster = LocalCluster(_new_state_dir("session"), sync_initdb=False)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def fresh_dsn(pg_cluster: LocalCluster) -> Iterator[str]:
    """DSN of a newly created database on ``pg_cluster``, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_cluster.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield pg_cluster.dsn_for(name)
    finally:
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(pg_cluster.dsn, autocommit=True) as conn,
        ):
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def own_cluster() -> Iterator[LocalCluster]:
    """A private started cluster for one test (restarts, ALTER SYSTEM); destroyed afterwards."""
    cluster = LocalCluster(_new_state_dir("own"), sync_initdb=False)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
