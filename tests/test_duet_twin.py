"""The duet on a twin the user names (``database.twin``, :mod:`tuner_client.duet.twin`): a
second real cluster, initdb'd on its own and loaded with the same data, races beside the
server with no copy made; afterwards the twin's postgresql.auto.conf is byte for byte what
it was and its restart-time setting in force again its own; a twin holding other data is
refused with what differs; the config is checked; the engine and the plan use the twin; a
tuner killed with SIGKILL mid-segment leaves both servers with their own configuration (the
guard restores the twin from its journal, restart-time setting included) and no process of
it."""

from __future__ import annotations

import json
import subprocess
import textwrap
import time
from pathlib import Path

import psycopg
import pytest
from conftest import ClusterFactory
from duet_fixtures import gone, kill_owner, pgbench_pids, start_owner, wait_for_segment

from harmony_base.errors import ConfigError, DatabaseError
from harmony_report.inputs import RunSummary
from harmony_report.verdict import measured_by
from tuner_client.api.client import connect
from tuner_client.config import parse_tuner_config, tuner_config_from_dict
from tuner_client.config.knobspace import resolve_knob_space
from tuner_client.config.model import ControllerConfig, TwinConfig
from tuner_client.crashsafe.guard import MARK_VARIABLE
from tuner_client.crashsafe.journal import find_journals, journal_dir, server_key
from tuner_client.crashsafe.run import config_keys
from tuner_client.duet.driver import client_runner
from tuner_client.duet.race import Arm, run_duet
from tuner_client.duet.twin import Relations, check_twin, data_differences, open_twin
from tuner_client.engine.comparison import clone_reason
from tuner_client.flows import Tuner
from tuner_client.plan.designs import final_design
from tuner_client.servers.controllers import LocalController
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.target import Target, read_catalog
from workloads.pgbench import PgbenchWorkload


def _load(cluster: LocalCluster, scale: int) -> str:
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench")
    dsn = cluster.dsn_for("bench")
    subprocess.run([str(cluster.bin_dir / "pgbench"), "-i", "-q", "-s", str(scale), dsn],
                   check=True, capture_output=True)
    return dsn


def _twin_config(cluster: LocalCluster, dsn: str) -> TwinConfig:
    return TwinConfig(dsn, ControllerConfig("pg_ctl", {"data_dir": str(cluster.data_dir),
                                                       "log_path": str(cluster.log_path)}))


def _shown(dsn: str, name: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SHOW {name}").fetchone()
    assert row is not None
    return str(row[0])


def test_a_duet_on_the_users_twin_leaves_it_as_it_was(
        own_cluster: LocalCluster, cluster_factory: ClusterFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    server_dsn = _load(own_cluster, 1)
    monkeypatch.setenv(MARK_VARIABLE, "twin-test")  # as inside a run: the twin is journaled
    other = cluster_factory("twin")
    try:
        twin_dsn = _load(other, 1)
        # the twin's own configuration: a line of its auto.conf the race also sets
        with psycopg.connect(other.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET work_mem = '3MB'")
            conn.execute("SELECT pg_reload_conf()")
        auto_conf = (other.data_dir / "postgresql.auto.conf").read_text()
        buffers = _shown(twin_dsn, "shared_buffers")
        twin = open_twin(server_dsn, _twin_config(other, twin_dsn), restart_timeout_s=60)
        assert twin.auto_conf == auto_conf and twin.auto_lines["work_mem"] == "3MB"
        assert twin.journal is not None and twin.journal.mark == "twin-test"
        assert twin.journal.path.exists() and not twin.journal.changes
        workload = PgbenchWorkload(server_dsn, clients=1, scale=1, builtin="select-only")
        try:
            with psycopg.connect(own_cluster.dsn, autocommit=True) as conn:
                def alter(settings: object) -> None:
                    assert isinstance(settings, dict)
                    for name, value in settings.items():
                        conn.execute(psycopg.sql.SQL("ALTER SYSTEM SET {} = {}").format(
                            psycopg.sql.Identifier(name), psycopg.sql.Literal(value)))
                    conn.execute("SELECT pg_reload_conf()")
                # the candidate differs in shared_buffers: the twin restarts for it
                outcome = run_duet(
                    Arm("server", server_dsn, alter),
                    Arm("twin", twin.dsn_like(server_dsn), lambda s: twin.apply(dict(s))),
                    [{"work_mem": "4MB"}, {"work_mem": "4MB", "shared_buffers": "24MB"}],
                    ["default", "small"], client_runner(workload.progress_command),
                    max_seconds=10, segment_s=5, warmup_s=1, min_blocks=2)
            assert twin.restarted  # shared_buffers 24MB was put in force on the twin
            # every change recorded in the journal (the guard's) before it was made
            assert {"work_mem": "4MB", "shared_buffers": "24MB"} in [
                c["values"] for c in twin.journal.changes]
        finally:
            twin.remove()
        assert outcome is not None and outcome.plain["small"].batches >= 2
        # the second cluster named as what it is: the twin, never "the clone"
        lines = "\n".join(outcome.decisions())
        assert "twin/server asymmetry" in lines and "clone" not in lines, lines
        assert "the server and the twin running" in lines
        # the twin as it was: the file byte for byte, the restart undone
        assert (other.data_dir / "postgresql.auto.conf").read_text() == auto_conf
        assert _shown(twin_dsn, "shared_buffers") == buffers
        assert _shown(twin_dsn, "work_mem") == "3MB"
        assert not twin.restarted
        assert not twin.journal.path.exists()  # completed once the twin was put back
    finally:
        other.destroy()


#: a tuner stand-in: journals the server (which starts the guard), changes a knob on it, opens
#: the twin (journaled with the run's mark), puts a candidate with a restart-time knob in force
#: on it (a restart) and runs a duet segment on both; killed with SIGKILL once the segment runs
KILLED = textwrap.dedent("""
    import sys
    from pathlib import Path
    import psycopg
    from tuner_client.config.model import ControllerConfig, TwinConfig
    from tuner_client.crashsafe.run import RunSafety
    from tuner_client.duet.driver import run_together
    from tuner_client.duet.twin import open_twin
    from tuner_client.knobs.apply import apply_online_knobs
    from tuner_client.knobs.catalog import KnobCatalog
    from tuner_client.servers.controllers import PgCtlController
    from tuner_client.servers.target import Target
    from workloads.pgbench import PgbenchWorkload

    class Config:
        source = "twin-kill.yaml"
        class database:
            restart_timeout_s = 60.0

    dsn, data_dir, twin_dsn, twin_dir, twin_log = sys.argv[1:6]
    with psycopg.connect(dsn, autocommit=True) as conn:
        catalog = KnobCatalog.from_connection(conn)
    target = Target(dsn=dsn, catalog=catalog, cluster=None, ram_bytes=None,
                    controller=PgCtlController(Path(data_dir), dsn))
    safety = RunSafety(Config, "twin-kill")
    safety.protect(target)
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_online_knobs(conn, catalog, {"work_mem": "8MB"})
    twin = open_twin(dsn, TwinConfig(twin_dsn, ControllerConfig(
        "pg_ctl", {"data_dir": twin_dir, "log_path": twin_log})))
    assert twin.apply({"work_mem": "8MB", "shared_buffers": "24MB"})  # a restart
    print(safety.guard, twin.journal.path, flush=True)
    workload = PgbenchWorkload(dsn, clients=1, scale=1, builtin="select-only")
    run_together(workload.progress_command, (dsn, twin.dsn), 60)
""")


def test_a_tuner_killed_during_a_duet_on_the_twin_leaves_both_servers_restored(
        own_cluster: LocalCluster, cluster_factory: ClusterFactory, tmp_path: Path) -> None:
    server_dsn = _load(own_cluster, 1)
    other = cluster_factory("twin-kill")
    try:
        twin_dsn = _load(other, 1)
        with psycopg.connect(other.dsn, autocommit=True) as conn:  # the twin's own setting
            conn.execute("ALTER SYSTEM SET work_mem = '3MB'")
            conn.execute("SELECT pg_reload_conf()")
        autos = {c: (c.data_dir / "postgresql.auto.conf").read_text()
                 for c in (own_cluster, other)}
        buffers = _shown(twin_dsn, "shared_buffers")
        assert buffers != "24MB" and _shown(twin_dsn, "work_mem") == "3MB"
        journals = tmp_path / "journals"
        proc, (guard, twin_journal) = start_owner(
            tmp_path / "killed.py", KILLED, [server_dsn, str(own_cluster.data_dir), twin_dsn,
                                             str(other.data_dir), str(other.log_path)],
            journals)
        wait_for_segment()
        # mid-race: the twin runs the candidate, its journal holds the change
        assert _shown(twin_dsn, "shared_buffers") == "24MB"
        assert _shown(twin_dsn, "work_mem") == "8MB"
        assert '"shared_buffers": "24MB"' in Path(twin_journal).read_text()
        kill_owner(proc)
        deadline = time.monotonic() + 60  # the guard restarts the twin: its own buffers
        while time.monotonic() < deadline and (pgbench_pids() or not gone(int(guard))
                                               or list(journals.glob("*.json"))):
            time.sleep(0.2)
        assert not pgbench_pids()
        assert gone(int(guard))  # no process of the tuner's left, its guard done too
        assert not list(journals.glob("*.json")), (journals / "guard.log")
        log = "".join(p.read_text() for p in journals.glob("guard-*.log"))
        assert "restoring 2 server(s)" in log, log
        for cluster in (own_cluster, other):
            assert (cluster.data_dir / "postgresql.auto.conf").read_text() == autos[cluster]
        assert _shown(server_dsn, "work_mem") == "4MB"
        assert _shown(twin_dsn, "work_mem") == "3MB"
        assert _shown(twin_dsn, "shared_buffers") == buffers  # the guard restarted it
        with psycopg.connect(twin_dsn) as conn:
            row = conn.execute("SELECT count(*) FROM pg_settings WHERE pending_restart"
                               ).fetchone()
        assert row == (0,)
    finally:
        other.destroy()


def test_a_twin_left_changed_is_put_back_before_it_is_journaled_again(
        own_cluster: LocalCluster, cluster_factory: ClusterFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A twin journal already there is never written over (the twin's configuration then is
    a race's candidate, which would pass for the original): this run's own refuses the twin,
    a dead run's is restored first, and the twin opened afterwards keeps the true original."""
    server_dsn = _load(own_cluster, 1)
    monkeypatch.setenv(MARK_VARIABLE, "twin-leftover")
    other = cluster_factory("twin-leftover")
    try:
        twin_dsn = _load(other, 1)
        auto_conf = (other.data_dir / "postgresql.auto.conf").read_text()
        wal = _shown(twin_dsn, "max_wal_size")
        twin = open_twin(server_dsn, _twin_config(other, twin_dsn))
        assert twin.journal is not None
        twin.apply({"max_wal_size": "777MB"})  # and the race's restore never runs
        assert _shown(twin_dsn, "max_wal_size") == "777MB"
        with pytest.raises(DatabaseError, match=r"the duet's twin 127.0.0.1:\d+/bench was not "
                                                r"put back after an earlier race of this run"):
            open_twin(server_dsn, _twin_config(other, twin_dsn))
        assert twin.journal.path.exists()
        # the same journal as a run that died left it (its owner a process that has ended)
        data = json.loads(twin.journal.path.read_text())
        data["owner"]["pid"], data["owner"]["start_ticks"] = 2 ** 22 + 1, None  # > pid_max
        twin.journal.path.write_text(json.dumps(data))
        again = open_twin(server_dsn, _twin_config(other, twin_dsn))
        assert again.auto_conf == auto_conf  # the original, not the dead race's candidate
        assert "max_wal_size" not in again.auto_lines
        assert _shown(twin_dsn, "max_wal_size") == wal
        assert again.journal is not None and not again.journal.changes
        again.remove()
        assert not again.journal.path.exists()
    finally:
        other.destroy()


def test_a_twin_with_other_data_is_refused_saying_what_differs(
        own_cluster: LocalCluster, cluster_factory: ClusterFactory) -> None:
    server_dsn = _load(own_cluster, 1)
    other = cluster_factory("twin-other")
    try:
        twin_dsn = _load(other, 3)  # three times the accounts
        with pytest.raises(ConfigError, match=r"database.twin \(127.0.0.1:\d+/bench\) must "
                                              r"hold the same data as the server .* but "
                                              r"public.pgbench_accounts takes .* MiB on the "
                                              r"server and .* MiB on the twin"):
            check_twin(server_dsn, _twin_config(other, twin_dsn))
        with psycopg.connect(twin_dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE extra (x int)")
        with pytest.raises(ConfigError, match=r"the twin has public.extra, which the server "
                                              r"has not"):
            open_twin(server_dsn, _twin_config(other, twin_dsn))
    finally:
        other.destroy()


def _config(dsn: str, twin: object = None, **db: object) -> dict[str, object]:
    database: dict[str, object] = {
        "dsn": dsn, "allow_restarts": True,
        "controller": {"kind": "pg_ctl", "options": {"data_dir": "/nonexistent"}}, **db}
    if twin is not None:
        database["twin"] = twin
    return {"name": "twin", "database": database, "workload": {"pgbench": {"clients": 2}},
            "online": {"knobs": {"max_wal_size": {"min": "32MB", "max": "1GB"}}}}


def test_the_twin_in_the_config_checked_and_used_by_the_engine_and_the_plan(
        pg_cluster: LocalCluster) -> None:
    remote = "host=10.1.2.3 port=5432 dbname=bench"
    twin = {"dsn": "host=10.1.2.4 port=5433 dbname=bench",
            "controller": {"kind": "docker", "options": {"container": "pg-twin"}}}
    config = tuner_config_from_dict(_config(remote, twin), source="twin.yaml")
    assert config.database.twin == TwinConfig(twin["dsn"], ControllerConfig(  # type: ignore[index]
        "docker", {"container": "pg-twin"}))
    # the next run and `harmony restore CONFIG` look for the twin's journal too
    assert config_keys(config, None) == ["server:10.1.2.3:5432", "server:10.1.2.4:5433"]
    # a server on another host cannot be cloned here, but its twin runs where it is
    assert clone_reason(tuner_config_from_dict(_config(remote), source="t.yaml"), False) \
        .startswith("the server is on 10.1.2.3")  # type: ignore[union-attr]
    assert clone_reason(config, False) is None
    assert clone_reason(config, True) == "the race runs over several replicas"
    catalog = read_catalog(pg_cluster.dsn)
    online = resolve_knob_space(config.online.knobs, catalog, kind="online")
    offline = resolve_knob_space(config.offline.knobs, catalog, kind="offline")
    text = final_design(config, catalog, offline, online)
    assert "duet, the most precise design valid here" in text, text
    assert ("the twin 10.1.2.4:5433/bench named in database.twin beside it (no copy made; "
            "checked to hold the same data first; restarted by its docker controller") in text
    assert "pg_basebackup" not in text
    # what must hold, named with the file and the key
    with pytest.raises(ConfigError, match=r"twin.yaml.*database.twin.dsn must name another "
                                          r"server than database.dsn"):
        tuner_config_from_dict(_config(remote, {"dsn": remote}), source="twin.yaml")
    with pytest.raises(ConfigError, match=r"twin.yaml.*database.twin names a server beside one "
                                          r"given by database.dsn"):
        tuner_config_from_dict({"name": "t", "database": {"twin": twin}}, source="twin.yaml")
    with pytest.raises(ConfigError, match=r"twin.yaml.*a DSN without database.controller is "
                                          r"managed mode"):
        tuner_config_from_dict({"name": "t", "database": {"dsn": remote, "twin": twin}},
                               source="twin.yaml")
    with pytest.raises(ConfigError, match=r"controller kind 'local' is the embedded cluster; "
                                          r"the twin's is pg_ctl, docker or command"):
        tuner_config_from_dict(_config(remote, {"dsn": twin["dsn"], "controller": {
            "kind": "local"}}), source="twin.yaml")
    with pytest.raises(ConfigError, match=r"twin"):
        tuner_config_from_dict(_config(remote, {"controller": {"kind": "docker"}}),
                               source="twin.yaml")



TUNE = """name: duet-twin
seed: 3
database:
  dsn: "{dsn}"
  controller: {{kind: pg_ctl, options: {{data_dir: "{data_dir}"}}}}
  twin:
    dsn: "{twin_dsn}"
    controller: {{kind: pg_ctl, options: {{data_dir: "{twin_dir}", log_path: "{twin_log}"}}}}
workload: {{pgbench: {{scale: 1, clients: 2}}}}
measure: {{warmup_s: 0.3, samples: 1, seconds: 1}}
offline: {{knobs: {{shared_buffers: {{min: 128MB, max: 128MB}}}}, evaluations: 1}}
online: {{knobs: {{max_wal_size: {{values: [32MB, 1GB]}}}}, strategy: {{name: exhaustive}},
         evaluations: 1}}
flow: {{kind: one-pass}}
final: {{rounds: 1, candidates: 1, max_seconds: 20, baselines: []}}
"""


def test_a_tuning_run_races_by_duet_on_the_twin(
        own_cluster: LocalCluster, cluster_factory: ClusterFactory) -> None:
    """A whole run whose config names a twin: the final race (max_wal_size, a knob with
    memory) runs by duet on it with no clone made; both servers' settings are as before."""
    dsn = _load(own_cluster, 1)
    other = cluster_factory("twin-run")
    try:
        twin_dsn = _load(other, 1)
        before = {c: (c.data_dir / "postgresql.auto.conf").read_text()
                  for c in (own_cluster, other)}
        wal = _shown(twin_dsn, "max_wal_size")
        config = parse_tuner_config(TUNE.format(
            dsn=dsn, data_dir=own_cluster.data_dir, twin_dsn=twin_dsn, twin_dir=other.data_dir,
            twin_log=other.log_path), source="twin.yaml")
        target = Target(dsn=dsn, catalog=read_catalog(dsn),
                        controller=LocalController(own_cluster), cluster=None, ram_bytes=None)
        result = Tuner(config, client=connect(None), target=target, run_id="duet-twin").run()
        decisions = "\n".join(result.work.decisions)
        decision = result.intervals.decision
        assert decision is not None and decision.design == "duet", decisions
        # the search ran on the twin too (issue 51, item 1), the final race after it
        assert "p1-online: duet on the twin 127.0.0.1:" in decisions
        assert "p1-online: evaluations measured by duet: 1 run(s)" in decisions, decisions
        assert "final: duet on the twin 127.0.0.1:" in decisions
        assert "no copy made" in decisions and "duet clone of" not in decisions
        assert "named in database.twin" in decisions
        # the race's words name the twin (issue 51 leftovers): no "clone/server asymmetry"
        assert "twin/server asymmetry" in decisions and "clone" not in decisions, decisions
        summary = decision.to_dict()
        assert summary["second"] == "twin" and "the twin's asymmetry" in summary["method"]
        assert "(the server and the twin named in database.twin running" in measured_by(
            RunSummary(decision=summary))
        for cluster in (own_cluster, other):
            assert (cluster.data_dir / "postgresql.auto.conf").read_text() == before[cluster]
        assert _shown(twin_dsn, "max_wal_size") == wal
        # the twin's restore journal (the guard's, had the run died) completed and removed;
        # only this twin's (the journal directory is shared with tests running beside it)
        assert not find_journals(journal_dir(), key=server_key(twin_dsn))
    finally:
        other.destroy()


def test_before_the_race_the_servers_own_writes_are_not_a_difference() -> None:
    """The run's start compares server and twin strictly; before the race the run's own
    workload has written to the server (pgbench_history grew 1.7 MiB in a tuning run), which
    is not a difference, while a twin that grew (something else wrote to it) still is."""
    start = Relations(18, {"public.history": (0, 0.0), "public.accounts": (20 << 20, 2e5)})
    grown = Relations(18, {"public.history": (int(1.7 * 2 ** 20), 3e4),
                           "public.accounts": (20 << 20, 2e5)})
    assert data_differences(grown, start) != []  # strictly: 1.7 MiB apart
    assert data_differences(grown, start, server_may_grow=True) == []
    assert data_differences(start, grown, server_may_grow=True) == [
        "public.history takes 0.0 MiB on the server and 1.7 MiB on the twin (more than 10 % "
        "apart)"]
    # after a duet search of the run wrote to both (seen: pgbench_history analysed at 38,991
    # rows on the twin, never on the server), only the relations and the version count
    assert data_differences(start, grown, server_may_grow=True, both_grew=True) == []
    fewer = Relations(18, {"public.history": (0, 0.0)})
    assert data_differences(start, fewer, both_grew=True) == ["the twin lacks public.accounts"]
