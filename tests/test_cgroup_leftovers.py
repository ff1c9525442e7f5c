"""No empty cgroup directory is left behind by a run that died: a duet clone made under a
memory limit names its cgroups in its record, which the guard, a later run and ``harmony
restore`` remove with the clone; the embedded cluster's restore journal names its own, which
the recovery removes once it has stopped the cluster. Both with a real owner killed by
SIGKILL, on a real memory cgroup (root and a writable v1 or v2 memory controller)."""

from __future__ import annotations

import json
import os
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from duet_fixtures import clone_parent, gone, kill_owner, start_owner  # noqa: F401  (fixture)

from tuner_client.crashsafe.clones import (
    clone_paths,
    load_clone_record,
    postmaster_pid,
    remove_clones,
)
from tuner_client.crashsafe.journal import load_journal
from tuner_client.servers.cgroups import memory_cgroup, remove_cgroup
from tuner_client.servers.local_cluster import LocalCluster

LIMIT = 512 * 2 ** 20


@pytest.fixture
def writable_memory_cgroup() -> None:
    """Skip, saying why, where no memory cgroup can be made here (not root, or neither a v1
    nor a v2 memory controller writable)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: only root makes memory cgroups here")
    probe = memory_cgroup(f"harmony-pg-probe-{os.getpid()}", LIMIT)
    if probe is None:
        pytest.skip("no writable memory cgroup (v2 memory.max or v1 memory.limit_in_bytes)")
    remove_cgroup(probe)


#: the owner of a clone made under a memory limit; killed once the clone runs
CLONE_OWNER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tuner_client.duet.clone import make_clone
    dsn, journals, parent, limit = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]
    clone = make_clone(dsn, journals=journals, mark="cg-kill", parent=parent,
                       memory_limit_bytes=int(limit))
    print(clone.cluster.data_dir, *clone.record.cgroups, flush=True)
    time.sleep(120)
""")


def test_a_dead_runs_clone_is_removed_with_its_memory_cgroup(
        writable_memory_cgroup: None, own_cluster: LocalCluster, tmp_path: Path,
        clone_parent: Path) -> None:  # noqa: F811
    journals = tmp_path / "journals"
    proc, printed = start_owner(tmp_path / "owner.py", CLONE_OWNER,
                           [own_cluster.dsn, str(journals), str(clone_parent), str(LIMIT)],
                           journals)
    try:
        data_dir, cgroups = printed[0], [Path(p) for p in printed[1:]]
        assert len(cgroups) == 1 and cgroups[0].name.startswith("harmony-pg-")
        pid = postmaster_pid(data_dir)
        assert pid is not None
        procs = {int(p) for p in (cgroups[0] / "cgroup.procs").read_text().split()}
        assert pid in procs  # the clone runs inside it
        limit = cgroups[0] / ("memory.max" if (cgroups[0] / "memory.max").exists()
                              else "memory.limit_in_bytes")
        assert int(limit.read_text()) == LIMIT
        [path] = clone_paths(journals)
        assert load_clone_record(path).cgroups == [str(cgroups[0])]
    finally:
        kill_owner(proc)
    # what the next run and `harmony restore` do once the owner is dead (its guard too)
    assert remove_clones(journals, dead_only=True)
    assert gone(pid)
    assert not cgroups[0].exists()
    assert not Path(data_dir).exists() and not clone_paths(journals)


def test_a_clones_cgroups_are_named_before_they_are_made(
        writable_memory_cgroup: None, tmp_path: Path) -> None:
    """The clone's record names every directory its cluster's cgroups may take before any
    is made (a kill between the mkdir and the save leaves none unnamed); the one made is
    among them, and nothing is planned without a limit."""
    cluster = LocalCluster(tmp_path / "c", memory_limit_bytes=LIMIT)
    planned = cluster.planned_cgroups()
    assert len(planned) == 3 and all(cg.name.startswith("harmony-pg-") for cg in planned)
    assert not any(cg.exists() for cg in planned)
    try:
        cluster.enter_cgroups()
        made = cluster.cgroup_paths()
        assert len(made) == 1 and made[0] in planned and made[0].is_dir()
        assert cluster.planned_cgroups() == []  # made: nothing left to plan
    finally:
        for cg in cluster.cgroup_paths():
            remove_cgroup(cg)
    assert LocalCluster(tmp_path / "d").planned_cgroups() == []


def test_a_clone_record_and_a_journal_of_an_older_version_load_without_cgroups(
        tmp_path: Path) -> None:
    record = {"path": "x", "scratch": "/nonexistent/s", "data_dir": "/nonexistent/s/data",
              "source": "127.0.0.1:5432", "mark": "m", "owner_pid": 1, "host": "h",
              "started": 0.0, "owner_ticks": None, "boot_id": None}
    path = tmp_path / "old.clone.json"
    path.write_text(json.dumps(record))
    assert load_clone_record(path).cgroups == []
    journal = {"format": 1, "key": "k", "run_id": "r", "config": "c",
               "owner": {"pid": 1, "start_ticks": None, "boot_id": None, "host": "h"},
               "server": {"system_identifier": "1", "data_directory": None, "host": "h",
                          "port": 5432, "dsn": "host=h", "version": 180000},
               "original": {"auto_conf": None, "entries": {}, "settings": {},
                            "restart_time": [], "pending_restart": []},
               "controller": None, "stop_after": False, "changes": [], "started": 0.0}
    path = tmp_path / "old.journal.json"
    path.write_text(json.dumps(journal))
    assert load_journal(path).cgroups == []


#: a run on an embedded cluster under a memory limit: journaled (the guard started), a knob
#: changed; killed with SIGKILL
EMBEDDED_OWNER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import psycopg
    from tuner_client.crashsafe.run import RunSafety
    from tuner_client.knobs.apply import apply_online_knobs
    from tuner_client.knobs.catalog import KnobCatalog
    from tuner_client.servers.controllers import LocalController
    from tuner_client.servers.local_cluster import LocalCluster
    from tuner_client.servers.target import Target

    class Config:
        source = "cg-kill.yaml"
        class database:
            restart_timeout_s = 60.0

    state, template, limit = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    cluster = LocalCluster(state, memory_limit_bytes=limit, template_data_dir=template,
                           sync_initdb=False)
    cluster.start()
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        catalog = KnobCatalog.from_connection(conn)
    target = Target(dsn=cluster.dsn, catalog=catalog, cluster=cluster, ram_bytes=limit,
                    controller=LocalController(cluster))
    safety = RunSafety(Config, "cg-kill")
    safety.protect(target)
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        apply_online_knobs(conn, catalog, {"work_mem": "8MB"})
    print(safety.guard, *[str(cg) for cg in cluster.cgroup_paths()], flush=True)
    time.sleep(120)
""")


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """The embedded cluster's state directory, under /tmp (see ``clone_parent``)."""
    import tempfile
    path = Path(tempfile.mkdtemp(prefix="harmony-test-cg-kill-", dir="/tmp"))
    yield path
    LocalCluster(path).destroy()


def test_the_guard_of_a_killed_run_removes_the_embedded_clusters_cgroup(
        writable_memory_cgroup: None, _pg_template: Path, state_dir: Path,
        tmp_path: Path) -> None:
    journals = tmp_path / "journals"
    proc, printed = start_owner(tmp_path / "run.py", EMBEDDED_OWNER,
                           [str(state_dir), str(_pg_template), str(LIMIT)], journals)
    try:
        guard, cgroups = int(printed[0]), [Path(p) for p in printed[1:]]
        assert len(cgroups) == 1 and cgroups[0].is_dir()
        [journal] = journals.glob("*.journal.json")
        assert load_journal(journal).cgroups == [str(cgroups[0])]
        pid = postmaster_pid(state_dir / "data")
        assert pid is not None
        assert pid in {int(p) for p in (cgroups[0] / "cgroup.procs").read_text().split()}
    finally:
        kill_owner(proc)
    deadline = time.monotonic() + 60  # the guard restores, stops the cluster, removes it
    while time.monotonic() < deadline and (not gone(guard) or cgroups[0].exists()
                                           or list(journals.glob("*.json"))):
        time.sleep(0.2)
    log = "".join(p.read_text() for p in journals.glob("guard-*.log"))
    assert not list(journals.glob("*.json")), log
    assert gone(pid) and gone(guard)
    assert not cgroups[0].exists(), log
    assert "remove the cgroups" in log
    # the file as before the run: the next start has the original work_mem
    with LocalCluster(state_dir) as cluster, psycopg.connect(cluster.dsn) as conn:
        row = conn.execute("SHOW work_mem").fetchone()
    assert row == ("4MB",)


#: a run killed while it loads the embedded cluster: started under a memory limit, nothing
#: journaled yet (no guard)
STARTED_ONLY = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tuner_client.servers.local_cluster import LocalCluster
    cluster = LocalCluster(Path(sys.argv[1]), memory_limit_bytes=int(sys.argv[3]),
                           template_data_dir=Path(sys.argv[2]), sync_initdb=False)
    cluster.start()
    print(*[str(cg) for cg in cluster.cgroup_paths()], flush=True)
    time.sleep(120)
""")


def test_the_next_run_that_stops_a_dead_runs_cluster_removes_its_cgroup(
        writable_memory_cgroup: None, _pg_template: Path, state_dir: Path,
        tmp_path: Path) -> None:
    """Killed before its journal: the next run stops the leftover server (as
    ``open_target`` does) and removes the cgroup its postmaster ran in, found from
    ``/proc/PID/cgroup``; its own cgroups (none here: no limit) are not involved."""
    proc, printed = start_owner(tmp_path / "load.py", STARTED_ONLY,
                                [str(state_dir), str(_pg_template), str(LIMIT)],
                                tmp_path / "journals")
    try:
        [cgroup] = [Path(p) for p in printed]
        pid = postmaster_pid(state_dir / "data")
        assert pid is not None
        assert pid in {int(p) for p in (cgroup / "cgroup.procs").read_text().split()}
    finally:
        kill_owner(proc)
    assert cgroup.is_dir()  # the server outlives its run, in the dead run's cgroup
    LocalCluster(state_dir).stop()
    assert gone(pid)
    assert not cgroup.exists()
