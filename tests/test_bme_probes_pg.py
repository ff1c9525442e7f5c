"""Buffer probes on a real PostgreSQL: restarts at a few shared_buffers sizes, short windows
from a cold buffer, miss probabilities from pg_statio; the Buffer Miss Equation fitted with
P* from the touched relations' pages (docs/background.md §3)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import psycopg
import pytest
from conftest import ClusterFactory
from probe_fixtures import probe_measurer

from bme.probe_decision import Probe, decide, probe_sizes
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.probes.runner import (
    client_pids,
    read_relation_io,
    run_probes,
    settled_io,
    touched_pages,
    window_delta,
)
from tuner_client.servers.controllers.local import LocalController
from tuner_client.servers.local_cluster import LocalCluster
from workloads.loop import Statement, StatementLoop
from workloads.sample import Sample

KB, MB = 1024, 1 << 20
#: scan tables of 0.25 .. 4 MB: a seq scan of a table above shared_buffers/4 goes through a
#: 256 kB ring, so each table stays a miss until shared_buffers is 4x its size
SCAN_TABLES = {f"scan{i}": 2 ** i * 32 for i in range(5)}  # pages: 32 .. 512
LOOKUP_ROWS = 120_000
SMALL_ROWS = 1_000
PROBE_S = 0.8
#: statements a probe's window runs at least (more windows of PROBE_S until then): on a quiet
#: machine one window runs more, on a loaded one (load average ~75) a handful, nearly all of
#: them first touches of the cold buffer, and the curves showed that cold start instead of
#: the cache (scan: P = 0.92, 0.36, 0.50, 1.0 over 256 kB .. 32 MB)
MIN_STATEMENTS = 300
#: pytest's hang guard for the tests that run the tuner (probes, then measurements and a
#: second pass): at a load average of ~80 one took 317 s, past the default 300 s
TUNING_RUN_TIMEOUT_S = 900
#: a guard for those windows together, inside pytest's 300-s timeout for four probes (a
#: failing workload completes nothing)
MIN_STATEMENTS_S = 45.0


@pytest.fixture(scope="module")
def cluster(cluster_factory: ClusterFactory) -> Iterator[LocalCluster]:
    """One private cluster with three small schemas: scan tables, a lookup table, a tiny one."""
    made = cluster_factory("bme-probes")
    with psycopg.connect(made.dsn, autocommit=True) as conn:
        for name, pages in SCAN_TABLES.items():
            # ~60 rows of ~120 bytes per 8 kB page
            conn.execute(f"CREATE TABLE {name} AS SELECT g AS id, repeat('x', 100) AS pad "
                         f"FROM generate_series(1, {pages * 60}) g")
        conn.execute("CREATE TABLE accounts (aid int PRIMARY KEY, bal int, filler char(84))")
        conn.execute("INSERT INTO accounts SELECT g, 0, '' FROM generate_series(1, %s) g",
                     [LOOKUP_ROWS])
        conn.execute("CREATE TABLE small (id int PRIMARY KEY, v int)")
        conn.execute("INSERT INTO small SELECT g, g FROM generate_series(1, %s) g", [SMALL_ROWS])
        conn.execute("VACUUM ANALYZE")
    try:
        yield made
    finally:
        made.destroy()


class _Loop(StatementLoop):
    """A statement loop whose windows last ``seconds`` and :data:`MIN_STATEMENTS` completions
    at least: the probes read the buffer's misses over the window, which needs the same work
    on a loaded machine as on a quiet one. Returns the first window's sample."""

    def sample(self, seconds: float | None = None, **kwargs: Any) -> Sample:
        first = super().sample(seconds, **kwargs)
        done, deadline = first.completed, time.monotonic() + MIN_STATEMENTS_S
        while done < MIN_STATEMENTS and time.monotonic() < deadline:
            done += super().sample(seconds, **kwargs).completed
        return first


def _scan(rng: np.random.Generator) -> Statement:
    # table i is scanned with weight 4^-i: the accesses fall off with size, as in a mix of
    # hot small tables and colder large ones
    names = list(SCAN_TABLES)
    weights = np.array([4.0 ** -i for i in range(len(names))])
    name = names[int(rng.choice(len(names), p=weights / weights.sum()))]
    return f"SELECT count(*) FROM {name}", ()


def _skewed_lookup(rng: np.random.Generator) -> Statement:
    # keys at rank n·u³ of a fixed shuffle: a few hot keys spread over the table's pages
    keys = (LOOKUP_ROWS * rng.random(50) ** 3).astype(np.int64)
    scattered = (keys * 7919) % LOOKUP_ROWS + 1
    return "SELECT sum(bal) FROM accounts WHERE aid = ANY(%s)", (scattered.tolist(),)


def _small_lookup(rng: np.random.Generator) -> Statement:
    return "SELECT v FROM small WHERE id = %s", (int(rng.integers(1, SMALL_ROWS + 1)),)


def _probe(cluster: LocalCluster, draw: Any, sizes: list[int]) -> list[Probe]:
    measurer, original = probe_measurer(cluster, _Loop(cluster.dsn, draw, streams=2))
    try:
        probes, failures = run_probes(measurer, sizes, PROBE_S)
        assert failures == []
        measurer.apply({"shared_buffers": original}, warm_up=False)
    finally:
        # the extensions the probes created (to read how full a buffer got) go as in a run,
        # so the next test on this cluster finds the database as the tuner found it
        measurer.restore({"shared_buffers": original})
        measurer.close()
    return probes


def test_a_probe_reads_the_counts_a_backend_holds_until_it_exits(cluster: LocalCluster) -> None:
    # PostgreSQL 15 flushes a backend's block counts at most once a second while it runs; a
    # query finished sooner after the last flush is held (up to 10 s idle) until the backend
    # exits. Two equal readings 0.2 s apart miss it; waiting for the window's backends to
    # exit does not.
    scan = "scan4"
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        present = client_pids(conn)
        before = read_relation_io(conn)
        worker = psycopg.connect(cluster.dsn, autocommit=True)
        worker.execute("SELECT count(*) FROM small")  # flushed when the backend goes idle
        worker.execute(f"SELECT count(*) FROM {scan}")  # within the second: held
        early = read_relation_io(conn)
        time.sleep(0.3)
        assert read_relation_io(conn).total() == early.total()  # the old rule stopped here
        closer = threading.Timer(1.0, worker.close)
        closer.start()
        try:
            after = settled_io(conn, present)
        finally:
            closer.join()
    pages = SCAN_TABLES[scan]
    held = sum(early.counts[scan]) - sum(before.counts[scan])
    read = sum(after.counts[scan]) - sum(before.counts[scan])
    assert held < pages <= read, (held, pages, read)
    _, _, touched = window_delta(before, after)
    assert touched[scan] >= pages


def _misses(probes: list[Probe]) -> list[float]:
    return [round(p.miss, 4) for p in probes]


def test_scan_workload_gives_a_monotone_curve_and_an_accepted_fit(cluster: LocalCluster) -> None:
    sizes = probe_sizes(256 * KB, 32 * MB, 4, step=8 * KB)
    probes = _probe(cluster, _scan, sizes)
    misses = _misses(probes)
    assert all(b <= a + 0.02 for a, b in zip(misses, misses[1:], strict=False)), misses
    assert misses[0] > 0.5 and misses[-1] < 0.1, misses   # a real knee inside the range
    pages = touched_pages(probes)
    assert pages == pytest.approx(sum(SCAN_TABLES.values()), rel=0.1)
    decision = decide(probes, touched_pages=pages, low=256 * KB, high=32 * MB)
    assert decision.kind == "knee", decision.reason
    assert decision.fit is not None and decision.fit.r2 >= 0.9
    # at the second probe (1.3 MB) the tables of 0.5 MB and up still miss, far above the
    # floor; the largest table is cached from 16 MB on: M* lies between the two
    assert misses[1] > 2 * misses[-1], misses
    assert sizes[1] < decision.fit.params.m_star <= 33 * MB, (decision.reason, misses)


def test_key_lookups_give_a_monotone_curve_and_an_accepted_fit(cluster: LocalCluster) -> None:
    sizes = probe_sizes(256 * KB, 32 * MB, 4, step=8 * KB)
    probes = _probe(cluster, _skewed_lookup, sizes)
    misses = _misses(probes)
    assert all(b <= a + 0.02 for a, b in zip(misses, misses[1:], strict=False)), misses
    assert misses[0] > 2 * misses[-1], misses
    decision = decide(probes, touched_pages=touched_pages(probes), low=256 * KB, high=32 * MB)
    assert decision.kind == "knee", decision.reason
    assert decision.fit is not None and decision.fit.r2 >= 0.9
    assert decision.size is not None and 256 * KB < decision.size <= 32 * MB
    # the miss probability the curve gives at M* is its floor, P*
    assert decision.miss_at(decision.fit.params.m_star) == pytest.approx(
        decision.fit.params.p_star, abs=1e-9)


def test_a_workload_inside_the_smallest_size_has_no_knee(cluster: LocalCluster) -> None:
    sizes = probe_sizes(1 * MB, 32 * MB, 3, step=8 * KB)
    probes = _probe(cluster, _small_lookup, sizes)
    decision = decide(probes, touched_pages=touched_pages(probes), low=1 * MB, high=32 * MB)
    assert decision.kind == "no-knee", (decision.reason, _misses(probes))
    assert decision.size == 1 * MB
    assert "no knee" in decision.reason


TUNE_CONFIG = """\
name: probetest
seed: 3
measure: {warmup_s: 0.3, samples: 1, aggregate: mean, queries: null, seconds: 0.5, paired: false}
budget: {ram: 1GB, shared_buffers_fraction: 0.02, os_reserved: 256MB, connections: 8,
         online: 64MB}
offline:
  knobs: {shared_buffers: {min: 256kB, max: 32MB, step: 256kB}}
  evaluations: 3
online:
  knobs: {random_page_cost: {min: 1, max: 4, step: 1}}
  evaluations: 1
bme: {probes: 4, probe_seconds: 0.6, target_miss: 0.3, settle_s: 0}
flow: {kind: one-pass}
final: {rounds: 0}
"""


def _tuner_target(cluster: LocalCluster) -> tuple[KnobCatalog, str, Any]:
    """The cluster as the tuner's target: its catalog, shared_buffers before, the target."""
    from tuner_client.servers.target import Target

    with psycopg.connect(cluster.dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
        before = conn.execute("SHOW shared_buffers").fetchone()[0]  # type: ignore[index]
    return catalog, before, Target(dsn=cluster.dsn, catalog=catalog,
                                   controller=LocalController(cluster), cluster=None,
                                   ram_bytes=None)


@pytest.mark.timeout(TUNING_RUN_TIMEOUT_S)
def test_the_tuner_sizes_shared_buffers_from_the_probes(cluster: LocalCluster,
                                                       tmp_path: Any) -> None:
    """With bme.target_miss the offline pass probes, fits, and measures only the size the
    equation gives for the target, inside the budget; a second pass re-probes instead of
    searching; the server ends as it began."""
    from bme.size import size_for_target
    from harmony_server.server import start_server
    from tuner_client.api.client import connect
    from tuner_client.config import parse_tuner_config
    from tuner_client.flows import Tuner
    from tuner_client.phases.offline import offline_pass
    from tuner_client.phases.prepare import leave_server

    catalog, before, target = _tuner_target(cluster)
    config = parse_tuner_config(TUNE_CONFIG, source="probetest.yaml")
    with start_server(port=0, state_dir=tmp_path / "server") as server, \
            connect(server.url) as client:
        tuner = Tuner(config, client=client, target=target, run_id="t1",
                      workload=_Loop(cluster.dsn, _skewed_lookup, streams=2))
        result = tuner.run()
        # a second pass (as after a workload shift) re-probes and measures the equation's
        # size only, instead of searching shared_buffers again
        assert tuner.context is not None
        try:
            offline_pass(tuner.context, tuner.state, 2)
        finally:
            leave_server(tuner.context, None, keep_best=False)
    decisions = tuner.state.probe_decisions
    assert len(decisions) == 2 and decisions[1]["pass"] == "p2-offline", tuner.state.decisions
    assert decisions[1]["usable"], decisions[1]["reason"]
    assert [r.session for r in tuner.records if r.session.startswith("p2-")] == \
        ["p2-offline-bme"]
    assert any("p2-offline: shared_buffers from the equation" in d
               for d in tuner.state.decisions)
    decisions = decisions[:1]
    assert len(decisions) == 1 and decisions[0]["decision"] == "knee", decisions
    assert len(decisions[0]["probes"]) == 4 and decisions[0]["probe_cost_s"] > 0
    # the budget caps shared_buffers at 2 % of 1GB, below the knob's 32MB: no probe beyond it
    cap = tuner.budget.budget.shared_buffers_max_bytes  # type: ignore[union-attr]
    assert cap < 32 * MB
    assert max(p["size"] for p in decisions[0]["probes"]) <= cap
    offline = [r for r in tuner.records if r.session.startswith("p1-offline")]
    assert [r.session for r in offline] == ["p1-offline-bme"]  # one size, no search
    from bme.equation import BMEParams
    params = BMEParams.from_dict({k: decisions[0][k] for k in ("p_star", "p_c", "m_b",
                                                                "m_star")})
    wanted = size_for_target(params, 0.3)
    measured = catalog["shared_buffers"].parse(offline[0].in_force["shared_buffers"])
    assert abs(measured - wanted) <= 256 * KB, (measured, wanted)
    assert any("target miss probability 0.3" in d for d in result.work.decisions)
    # the summary's bme: the probes, the fit, the decision and why
    bme = result.to_dict()["bme"]
    assert bme["source"] == "probes" and bme["decision"] == "knee" and bme["reason"]
    assert len(bme["probes"]) == 4 and bme["m_star"] == decisions[0]["m_star"]
    assert 0 < bme["r2"] <= 1 and 0 < bme["p_star"] < 1
    assert decisions[0]["pass"] == "p1-offline"
    with psycopg.connect(cluster.dsn) as conn:
        assert conn.execute("SHOW shared_buffers").fetchone()[0] == before  # type: ignore[index]
        # pg_buffercache, created to see whether the probes' buffers filled, is gone again
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname IN "
                            "('pg_buffercache', 'pg_prewarm')").fetchone()[0] == 0  # type: ignore[index]


SEARCH_CONFIG = TUNE_CONFIG.replace("evaluations: 3", "evaluations: 6").replace(
    "bme: {probes: 4, probe_seconds: 0.6, target_miss: 0.3, settle_s: 0}",
    "bme: {probes: 4, probe_seconds: 0.6, evaluations: 2, settle_s: 0}").replace(
    "shared_buffers_fraction: 0.02", "shared_buffers_fraction: 0.05").replace(
    "max: 32MB", "max: 48MB")


@pytest.mark.timeout(TUNING_RUN_TIMEOUT_S)
def test_the_probes_replace_most_of_the_offline_search(cluster: LocalCluster,
                                                       tmp_path: Any) -> None:
    """Without a target miss probability the probed search starts at the decided size, takes
    bme.evaluations (2 of offline.evaluations 6), and its second size is a step of about 30 %
    of the first (not the plain search's 0.3 of the whole window)."""
    from bme.probe_decision import RADIUS
    from harmony_server.server import start_server
    from tuner_client.api.client import connect
    from tuner_client.config import parse_tuner_config
    from tuner_client.flows import Tuner

    catalog, before, target = _tuner_target(cluster)
    config = parse_tuner_config(SEARCH_CONFIG, source="probesearch.yaml")
    assert (config.offline.evaluations, config.bme.evaluations) == (6, 2)
    with start_server(port=0, state_dir=tmp_path / "server") as server, \
            connect(server.url) as client:
        tuner = Tuner(config, client=client, target=target, run_id="t2",
                      workload=_Loop(cluster.dsn, _skewed_lookup, streams=2))
        tuner.run()
    decision = tuner.state.probe_decisions[0]
    assert decision["usable"] and decision["window"] is not None, decision["reason"]
    start, low, high = decision["window"]
    offline = [r for r in tuner.records if r.session.startswith("p1-offline")]
    assert [r.session for r in offline] == ["p1-offline-bme"] * 2, \
        [r.session for r in offline]
    sizes = [catalog["shared_buffers"].parse(r.in_force["shared_buffers"]) for r in offline]
    assert sizes[0] == start
    step = abs(sizes[1] - sizes[0])
    assert low <= sizes[1] <= high
    # one grid step (256kB) of rounding either way; the plain radius would be 0.3·(high-low)
    assert abs(step - RADIUS * start) <= 256 * KB + 1, (sizes, start, low, high)
    assert any("the probes replace most of the search: 2 evaluation(s)" in d
               for d in tuner.state.decisions), tuner.state.decisions
    with psycopg.connect(cluster.dsn) as conn:
        assert conn.execute("SHOW shared_buffers").fetchone()[0] == before  # type: ignore[index]
