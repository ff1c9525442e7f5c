"""Shared fixtures: real PostgreSQL clusters started by the tests themselves (no mocks).

* ``pg_cluster`` (session): one started :class:`LocalCluster` shared by all tests; do not
  restart it or change its ``ALTER SYSTEM`` settings (use ``own_cluster`` for that).
* ``fresh_dsn`` (function): a new database on ``pg_cluster``, dropped afterwards; its DSN.
* ``own_cluster`` (function): a private started cluster for tests that restart the server
  or change server-wide settings; destroyed afterwards.
* ``cluster_factory`` (session): ``cluster_factory(tag, **LocalCluster kwargs)`` starts another
  private cluster (e.g. module-scoped ones); all are destroyed at the end of the session.

Every test that uses one of these fixtures (directly or through another fixture, e.g.
``tune_fixtures.tpch_cluster``) is marked ``postgres`` at collection, so ``-m "not postgres"``
is a run without any cluster; files listed in :data:`SLOW_FILES` are marked ``slow``.

A test's ``shape_report`` property (``record_property``, a list of lines) is printed in the
run's summary, passed or not: tests/test_code_shape.py reports the modules near the line limit
so: a report that must not fail the run (warnings are errors here).

initdb runs once per session into a stopped template; every cluster is a copy of it (a copy
takes well under a second, initdb several on a loaded machine). State directories live under
/tmp (not pytest's 0700 tmp dirs) so that the unprivileged user PostgreSQL runs as when the
tests run as root can reach them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tuner_client.servers.local_cluster import LocalCluster

ClusterFactory = Callable[..., LocalCluster]

# every tuning run writes a restore journal (tuner_client.crashsafe) before its first change:
# the tests' journals go to a directory of this test process, not the machine's default
if "HARMONY_JOURNAL_DIR" not in os.environ:
    os.environ["HARMONY_JOURNAL_DIR"] = tempfile.mkdtemp(prefix="harmony-journals-")
    atexit.register(shutil.rmtree, os.environ["HARMONY_JOURNAL_DIR"], True)

#: fixtures that start a real PostgreSQL cluster (every cluster fixture depends on one of them)
CLUSTER_FIXTURES = frozenset({"_pg_template", "tpch_cluster"})
#: test files that take more than ~30 s on the 2-core CI machine (measured with --durations:
#: test_flows_wiring 110 s, test_workloads_tpch 66 s, test_api_fuzz 47 s by its time budget,
#: test_controllers 38 s; test_flows runs whole tuning runs too; test_replicas runs three on
#: two or three clusters, 45-90 s)
SLOW_FILES = frozenset({
    "test_workloads_tpch.py", "test_controllers.py", "test_api_fuzz.py", "test_flows.py",
    "test_flows_wiring.py", "test_replicas.py", "test_report_browser.py", "test_crashsafe.py",
    "test_managed.py",  # a managed-mode run: its per-transaction final race is 30 s at least
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark cluster tests ``postgres`` from their fixtures and the slow files ``slow``."""
    for item in items:
        if CLUSTER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.postgres)
        if item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print every ``shape_report`` property the tests recorded, under its own heading."""
    for report in [r for outcome in ("passed", "failed")
                   for r in terminalreporter.stats.get(outcome, ())]:
        for name, value in getattr(report, "user_properties", ()):
            if name == "shape_report" and report.when == "call":
                terminalreporter.section("code shape")
                for line in value:
                    terminalreporter.write_line(line)


def _new_state_dir(tag: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=f"harmony-test-{tag}-", dir="/tmp"))


@pytest.fixture(scope="session")
def _pg_template() -> Iterator[Path]:
    """The data directory of a stopped, freshly initdb'ed cluster to copy from."""
    template = LocalCluster(_new_state_dir("template"), sync_initdb=False)
    try:
        template.init()
        yield template.data_dir
    finally:
        shutil.rmtree(template.state_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster_factory(_pg_template: Path) -> Iterator[ClusterFactory]:
    """Start private clusters on demand; every one is destroyed at the end of the session."""
    made: list[LocalCluster] = []

    def make(tag: str = "own", **kwargs: Any) -> LocalCluster:
        kwargs.setdefault("template_data_dir", _pg_template)
        kwargs.setdefault("sync_initdb", False)
        cluster = LocalCluster(_new_state_dir(tag), **kwargs)
        made.append(cluster)
        cluster.start()
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            cluster.destroy()


@pytest.fixture(scope="session")
def pg_cluster(cluster_factory: ClusterFactory) -> LocalCluster:
    """A started PostgreSQL shared by the whole test session; stopped and removed at the end."""
    return cluster_factory("session")


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
def own_cluster(cluster_factory: ClusterFactory) -> Iterator[LocalCluster]:
    """A private started cluster for one test (restarts, ALTER SYSTEM); destroyed afterwards."""
    cluster = cluster_factory("own")
    try:
        yield cluster
    finally:
        cluster.destroy()
