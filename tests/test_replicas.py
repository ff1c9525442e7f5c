"""Tuning on several replicas at once: real PostgreSQL clones of one TPC-H database, one
Harmony server session, a replica slowed through its CPU cgroup, a replica killed mid-run."""

from __future__ import annotations

import math
import shutil
import statistics
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from harmony_base.errors import ConfigError
from harmony_server.server import start_server
from tuner_client.api.client import connect
from tuner_client.config import parse_tuner_config
from tuner_client.flows import Tuner
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.measurer import PointRecord
from tuner_client.phases.blocks import METADATA_KEY
from tuner_client.replicas import Replica, clone_cluster
from tuner_client.servers.controllers import LocalController
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.target import Target
from workloads.tpch.load import load_tpch

CONFIG = """\
name: reptest
seed: 5
workload:
  tpch: {scale: 0.01, mix: "3Q6"}
  statement_timeout_s: 60
database: {restart_timeout_s: 4}  # how long a dead replica is waited for
measure: {warmup_s: 0.3, samples: 1, seconds: 1.0, queries: null}
budget: {os_reserved: 256MB, connections: auto, online: 96MB}
offline:
  knobs: {shared_buffers: {min: 128MB, max: 128MB, step: 8MB}}
  evaluations: 1
online:
  knobs:  # Q6 (a scan and a sum) does not use work_mem: every point has one true value
    work_mem: {min: 1MB, max: 4MB}
  strategy: {name: pro, options: {simplex_size: 3}}
  evaluations: 6
flow: {kind: one-pass}
final: {rounds: 2, max_rounds: 2, close_call_rounds: 2, candidates: 1, baselines: []}
replicas: {lease_s: 20}
"""
#: CPUs the slowed replica may use (the machine has two, shared by both replicas)
SLOW_CPUS = 0.1
#: the kill and remote tests need no precision: shorter samples
QUICK = CONFIG.replace("seconds: 1.0", "seconds: 0.6")


def _target(cluster: LocalCluster) -> Target:
    dsn = cluster.dsn_for("tpch")
    with psycopg.connect(dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    return Target(dsn=dsn, catalog=catalog, controller=LocalController(cluster), cluster=None,
                  ram_bytes=None)


@pytest.fixture(scope="module")
def clusters(cluster_factory: Any) -> Iterator[list[LocalCluster]]:
    """Three started clones of one TPC-H SF 0.01 cluster: the primary, a clone, and a clone
    capped at :data:`SLOW_CPUS` CPUs (cloned with the product's stop-copy-start)."""
    primary = cluster_factory("replicas")
    with psycopg.connect(primary.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE tpch")
    load_tpch(primary.dsn_for("tpch"), 0.01)
    state = Path(tempfile.mkdtemp(prefix="harmony-test-replicas-", dir="/tmp"))
    clones = clone_cluster(primary, state, 2, cpu_limits=[None, None, SLOW_CPUS])
    try:
        yield [primary, *clones]
    finally:
        for clone in clones:
            clone.destroy()
        shutil.rmtree(state, ignore_errors=True)


def test_replicas_config_errors_name_the_key() -> None:
    base = "name: x\n"
    with pytest.raises(ConfigError, match=r"x.yaml.*replicas.count clones the embedded"):
        parse_tuner_config(base + "database: {dsn: 'host=h', controller: {kind: pg_ctl}}\n"
                           "replicas: {count: 2}\n", source="x.yaml")
    with pytest.raises(ConfigError, match="cpu_limits has 3 entries but replicas.count is 2"):
        parse_tuner_config(base + "replicas: {count: 2, cpu_limits: [1, 1, 1]}\n",
                           source="x.yaml")
    twice = "{name: a, dsn: 'host=h', controller: {kind: pg_ctl}}"
    with pytest.raises(ConfigError, match=r"replica names must be unique, got \['a', 'a'\]"):
        parse_tuner_config(base + f"replicas: {{targets: [{twice}, {twice}]}}\n",
                           source="x.yaml")
    with pytest.raises(ConfigError, match="x.yaml.*needs measure.paired: true"):
        parse_tuner_config(base + "measure: {paired: false}\nreplicas: {remote: 1}\n",
                           source="x.yaml")
    cfg = parse_tuner_config(base + "replicas: {count: 3, cpu_limits: [null, 0.5], remote: 2}\n")
    assert (cfg.replicas.count, cfg.replicas.cpu_limits, cfg.replicas.remote) == \
        (3, (None, 0.5), 2) and cfg.replicas.enabled


def _raw(record: PointRecord) -> float:
    return math.exp(statistics.fmean(math.log(s.qpm) for s in record.samples))


def test_two_replicas_one_slowed_tuned_in_one_session(clusters: list[LocalCluster],
                                                      tmp_path: Path) -> None:
    primary, _, slow = clusters
    assert slow.cpu_limit == SLOW_CPUS and (slow.cpu_cgroup_path() / "cgroup.procs").exists()  # type: ignore[operator]
    config = parse_tuner_config(CONFIG, source="reptest.yaml")
    with start_server(port=0, state_dir=tmp_path / "server") as server, \
            connect(server.url, client_id="coord") as client:
        tuner = Tuner(config, client=client, target=_target(primary), run_id="a",
                      replicas=[Replica("replica-2", _target(slow))])
        result = tuner.run()
        trials = client.join("reptest-a-p1-online").trials()

    online = [r for r in tuner.records if r.session == "p1-online"]
    assert len(online) == 6 and all(r.value is not None for r in online)
    by_replica = {name: [r for r in online if r.replica == name]
                  for name in ("replica-1", "replica-2")}
    assert all(len(rs) >= 1 for rs in by_replica.values()), {k: len(v) for k, v in
                                                             by_replica.items()}
    # the server's session: six trials done, by both replicas' clients, none released
    done = [t for t in trials if t["status"] == "done"]
    assert len(done) == 6
    assert {t["client"] for t in done} == {"coord-replica-1", "coord-replica-2"}
    assert sorted(t["value"] for t in done) == pytest.approx(sorted(r.value for r in online))

    # normalisation: the capped replica's raw throughput (its reference's and its
    # candidates') is far lower, the values the strategy saw are not
    fast, slowed = by_replica["replica-1"], by_replica["replica-2"]
    raw_ratio = statistics.median(map(_raw, slowed)) / statistics.median(map(_raw, fast))
    ref_ratio = (statistics.median(v for r in slowed for v in r.reference)
                 / statistics.median(v for r in fast for v in r.reference))
    norm_ratio = (statistics.median(r.value for r in slowed)  # type: ignore[type-var]
                  / statistics.median(r.value for r in fast))  # type: ignore[type-var]
    # (bounds for this loaded 2-core machine: one block's ratio has a CV of ~30 % under
    # other tests' load, so three blocks a side agree within a factor 1.6 at best)
    assert raw_ratio < 0.4 and ref_ratio < 0.4, (raw_ratio, ref_ratio)
    assert 0.62 < norm_ratio < 1.6, (raw_ratio, norm_ratio)

    # final rounds: each round measured whole on one replica, the replicas in turn
    finals = [r for r in tuner.records if r.session.startswith("final")]
    assert len(result.intervals.rounds) == 2
    per_round = len(finals) // 2
    assert {r.replica for r in finals[:per_round]} == {"replica-1"}
    assert {r.replica for r in finals[per_round:]} == {"replica-2"}
    # both replicas are left with their original configuration
    for cluster in (primary, slow):
        with psycopg.connect(cluster.dsn_for("tpch")) as conn:
            assert conn.execute("SHOW work_mem").fetchone() == ("4MB",)


def test_a_replica_killed_mid_run_loses_its_trial_to_another(clusters: list[LocalCluster],
                                                            tmp_path: Path) -> None:
    primary, victim, _ = clusters
    # six evaluations: the trial the kill loses is often the session's last, which must be
    # handed out again too (Shared.claim waits while a replica measures; before, the survivor
    # ended on "budget" and the run came out one evaluation short in 1 of 2 runs, session 12)
    config = parse_tuner_config(QUICK, source="reptest.yaml")
    killed: list[int] = []  # noqa: F841 (filled by the callback)
    with start_server(port=0, state_dir=tmp_path / "server") as server, \
            connect(server.url, client_id="coord") as client:

        def kill_while_measuring(record: PointRecord) -> None:
            """Once replica-2 has reported its first search point, stop its server hard: the
            next trial it takes cannot be measured."""
            if not killed and record.session == "p1-online" and record.replica == "replica-2":
                victim.stop(mode="immediate")
                killed.append(1)

        tuner = Tuner(config, client=client, target=_target(primary), run_id="b",
                      replicas=[Replica("replica-2", _target(victim))],
                      on_measured=kill_while_measuring)
        try:
            result = tuner.run()
        finally:
            victim.start()
        trials = client.join("reptest-b-p1-online").trials()

    assert killed
    lost = [t for t in trials if t["status"] == "released"]
    assert len(lost) == 1 and lost[0]["client"] == "coord-replica-2"
    # its point was handed out again and measured by replica-1
    again = [t for t in trials if t["candidate"] == lost[0]["candidate"] and t is not lost[0]]
    assert [t["status"] for t in again] == ["done"] and again[0]["client"] == "coord-replica-1"
    # nothing lost, nothing counted twice: six evaluations, one done trial per candidate
    done = [t for t in trials if t["status"] == "done"]
    assert len(done) == 6 == len({t["candidate"] for t in done})
    online = [r for r in tuner.records if r.session == "p1-online" and r.value is not None]
    assert len(online) == 6
    assert any("replica replica-2 dropped" in d for d in result.work.decisions)
    assert tuner.pool is not None and [r.name for r in tuner.pool.live] == ["replica-1"]
    # after the kill, the final rounds ran on the survivor only
    assert {r.replica for r in tuner.records if r.session.startswith("final")} == {"replica-1"}


def test_a_replica_on_another_host_joins_by_name(clusters: list[LocalCluster],
                                                 tmp_path: Path) -> None:
    """``harmony tune CONFIG --server URL --replica far``: the worker finds the coordinator's
    replicated sessions, measures beside its own reference, and its reports count."""
    from tuner_client.cli.replica_worker import run_replica

    primary, far, _ = clusters
    config = parse_tuner_config(QUICK.replace("replicas: {lease_s: 20}",
                                               "replicas: {lease_s: 20, remote: 1}")
                                .replace("final: {rounds: 2,", "final: {rounds: 0,"),
                                source="reptest.yaml")
    with start_server(port=0, state_dir=tmp_path / "server") as server, \
            connect(server.url, client_id="coord") as client:
        reported: list[int] = []
        stop = threading.Event()
        worker = threading.Thread(target=lambda: reported.append(run_replica(
            config, server=server.url, replica="far", target=_target(far), idle_s=120.0,
            stop=stop)))
        worker.start()
        try:
            tuner = Tuner(config, client=client, target=_target(primary), run_id="c")
            tuner.run()
        finally:
            stop.set()
            worker.join(timeout=120)
        trials = client.join("reptest-c-p1-online").trials()
        info = client.describe("reptest-c-p1-online")["definition"]["metadata"][METADATA_KEY]

    # the worker read the session's budget there, and claims nothing once it is all taken
    assert info["evaluations"] == 6
    assert not worker.is_alive() and reported and reported[0] >= 1
    done = [t for t in trials if t["status"] == "done"]
    far_done = [t for t in done if t["client"] == "far"]
    assert len(far_done) >= 1
    # the remote reports count toward the six evaluations (one may still be in flight when
    # the budget is reached: the coordinator waits for it, and keeps it)
    assert 6 <= len(done) <= 7 and len({t["candidate"] for t in done}) == len(done)
    assert not [t for t in trials if t["status"] in ("leased", "released")]
    online = [r for r in tuner.records if r.session == "p1-online"]
    assert sorted(r.value for r in online if r.replica == "far") == \
        pytest.approx(sorted(t["value"] for t in far_done))
    with psycopg.connect(far.dsn_for("tpch")) as conn:  # the worker restored its database
        assert conn.execute("SHOW work_mem").fetchone() == ("4MB",)


def test_replica_cli_needs_a_server(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from harmony.cli import EXIT_BAD_INPUT, main

    monkeypatch.delenv("HARMONY_SERVER", raising=False)
    path = tmp_path / "r.yaml"
    path.write_text("name: r\n")
    assert main(["tune", str(path), "--replica", "far"]) == EXIT_BAD_INPUT
    assert "--replica joins a run hosted on a Harmony server: give --server URL" in \
        capsys.readouterr().err
