"""Duet (:mod:`tuner_client.duet`): the clone of a real cluster, the driver on both at once,
the analysis with the clone's asymmetry cancelled, and the crash safety of the clone: a tuner
killed with SIGKILL mid-segment leaves the server on its original configuration, the clone
stopped and deleted, and no process of it."""

from __future__ import annotations

import math
import os
import subprocess
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import psycopg
import pytest
from duet_fixtures import (  # noqa: F401  (fixture)
    clone_parent,
    gone,
    kill_owner,
    pgbench_pids,
    start_owner,
    wait_for_segment,
)
from tune_fixtures import TpchCluster, tpch_cluster, tune_yaml  # noqa: F401  (fixture)

from harmony.cli import main
from harmony_base.errors import ConfigError
from tuner_client.config import TunerConfig, parse_tuner_config, tuner_config_from_dict
from tuner_client.config.knobspace import resolve_knob_space
from tuner_client.crashsafe.clones import clone_paths, postmaster_pid
from tuner_client.duet.clone import check_disk, check_memory, make_clone
from tuner_client.duet.counted import counted_runner
from tuner_client.duet.driver import client_runner
from tuner_client.duet.race import Arm, candidate_on_clone, run_duet
from tuner_client.duet.stats import Segment, compare, race, segment_half_width
from tuner_client.engine.comparison import OFFLINE_SEARCH_DESIGNS
from tuner_client.plan.designs import final_design, search_design
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.target import read_catalog
from tuner_client.stats.paired import interval_from_logs
from workloads.pgbench import PgbenchWorkload, find_pgbench


def _pgbench_db(cluster: LocalCluster) -> str:
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE bench")
    dsn = cluster.dsn_for("bench")
    subprocess.run([str(cluster.bin_dir / "pgbench"), "-i", "-q", "-s", "1", dsn], check=True,
                   capture_output=True)
    return dsn


def test_the_asymmetry_cancels_and_the_interval_covers_the_truth() -> None:
    """Synthetic segments: truth 1.10×, the clone 15 % faster than the server, 6 % noise
    per second. The role swaps cancel the clone's advantage; one orientation alone would
    read 1.10 × 1.15 or 1.10 / 1.15."""
    rng = np.random.default_rng(11)
    theta, asym = math.log(1.10), math.log(1.15)
    segments = []
    for block in range(6):
        on_clone = block % 2 == 0
        mean = theta + (asym if on_clone else -asym)
        segments.append(Segment(1, on_clone, tuple(mean + 0.06 * rng.standard_normal(20))))
    got = compare(segments, 1)
    assert got is not None
    assert got.interval.low < 1.10 < got.interval.high
    assert got.interval.ratio == pytest.approx(1.10, rel=0.03)
    assert got.asymmetry == pytest.approx(1.15, rel=0.03)
    assert got.interval.above_one and got.batches == 24
    outcome = race(segments, ["default", "best"], segment_s=20)
    assert outcome is not None and outcome.winner == "best"
    decision = outcome.to_final_decision()
    assert decision.design == "duet" and decision.winner == "best"
    assert any("clone/server asymmetry 1.1" in line for line in decision.lines)
    assert decision.to_dict()["second"] == "clone"
    # on the user's twin the words name it, and the summary records it
    twin = race(segments, ["default", "best"], segment_s=20, second="twin")
    assert twin is not None
    words = "\n".join(twin.to_final_decision().lines)
    assert "twin/server asymmetry 1.1" in words and "the server and the twin" in words
    assert "clone" not in words
    assert twin.to_final_decision().to_dict()["second"] == "twin"
    with pytest.raises(ConfigError, match=r"a duet's second cluster is one of clone, twin, "
                                          r"but got 'replica'"):
        race(segments, ["default", "best"], segment_s=20, second="replica")
    # one orientation only: no interval yet
    assert compare(segments[::2], 1) is None


def test_the_abba_order_cancels_an_asymmetry_that_drifts() -> None:
    """The clusters' asymmetry drifting linearly over the race (the clone 10 % faster at the
    start, 10 % slower after eight blocks: its caches, a neighbour's load), no noise, an A/A
    (truth 1): the ABBA order (:func:`candidate_on_clone`) reads exactly 1 after every four
    blocks and a third of ABAB's error after six, where alternating read half a block's drift
    in every ratio."""
    assert [candidate_on_clone(b) for b in range(8)] == [True, False, False, True] * 2

    def ratio(order: Callable[[int], bool], blocks: int) -> float:
        segments = []
        for block in range(blocks):
            on_clone = order(block)
            # the asymmetry at the block's seconds, second/server: +10 % -> -10 % over 8
            asym = math.log(1.10) - (block + 0.5) / 8 * math.log(1.10 ** 2)
            mean = asym if on_clone else -asym
            segments.append(Segment(1, on_clone, tuple(mean + 1e-4 * ((t % 2) - 0.5)
                                                       for t in range(20))))
        got = compare(segments, 1, ended=True)
        assert got is not None
        return math.log(got.interval.ratio)

    step = math.log(1.10 ** 2) / 8  # the asymmetry's drift per block
    for blocks in (4, 8):
        assert abs(ratio(candidate_on_clone, blocks)) < 1e-6
        assert ratio(lambda b: b % 2 == 0, blocks) == pytest.approx(step / 2, rel=1e-3)
    assert ratio(candidate_on_clone, 6) == pytest.approx(step / 6, rel=1e-3)
    assert ratio(lambda b: b % 2 == 0, 6) == pytest.approx(step / 2, rel=1e-3)


def test_segments_that_spread_wider_than_their_batches_widen_the_interval() -> None:
    """Each segment starts from its own restart: a level that moves from one segment to the
    next (±8 % here) while its seconds move little (1 %) makes batches that agree within a
    segment and disagree across them. The interval then takes the segments' width, not the
    batches' (which would claim ±1 %); segments that agree leave the batches' interval."""
    rng = np.random.default_rng(5)
    offsets = [0.08, -0.07, -0.09, 0.06, 0.02, -0.03, 0.07, -0.05]

    def segments(spread: float) -> list[Segment]:
        return [Segment(1, k % 2 == 0,
                        tuple(math.log(1.05) + spread * offsets[k]
                              + 0.01 * rng.standard_normal(20))) for k in range(8)]

    wide = compare(segments(1.0), 1, ended=True)
    assert wide is not None and wide.by_segment and wide.segment_half_width is not None
    half = 0.5 * math.log(wide.interval.high / wide.interval.low)
    assert half == pytest.approx(wide.segment_half_width) and half > 0.04
    assert wide.interval.low < 1.0 < wide.interval.high  # 1.05x is not shown by 4 restarts
    assert "by segment (the interval's: its batches said less)" in wide.text()
    calm = compare(segments(0.0), 1, ended=True)
    assert calm is not None and not calm.by_segment and calm.interval.low > 1.03
    assert 0.5 * math.log(calm.interval.high / calm.interval.low) < 0.01
    # segments of independent seconds: the F test widens about 5 % of them, no more
    widened = sum(bool(c is not None and c.by_segment) for c in (
        compare([Segment(1, k % 2 == 0, tuple(0.04 * rng.standard_normal(20)))
                 for k in range(4)], 1, ended=True) for _ in range(1000)))
    assert 20 <= widened <= 80, widened


def test_the_segment_interval_holds_its_level_with_few_segments() -> None:
    """Segments whose means scatter from restart to restart (5 % here, a 10 % asymmetry,
    no effect), in the ABBA order: the interval over their means covers the truth in 95 % of
    races with 4 segments and with 8. The asymmetry is estimated from the same means, so
    their variance has k - 2 degrees of freedom; read with k - 1 (as before) 4 segments
    covered 88 %."""
    rng = np.random.default_rng(11)
    races = 4000
    for k in (4, 8):
        covered = naive = 0
        for _ in range(races):
            means = [(on_clone, (0.1 if on_clone else -0.1) + 0.05 * rng.standard_normal())
                     for on_clone in (candidate_on_clone(j) for j in range(k))]
            side = {c: float(np.mean([m for s, m in means if s == c])) for c in (True, False)}
            asym, theta = 0.5 * (side[True] - side[False]), 0.5 * (side[True] + side[False])
            half = segment_half_width(means, asym, 0.95)
            assert half is not None
            covered += abs(theta) <= half
            old = interval_from_logs([m - asym if s else m + asym for s, m in means])
            assert old is not None
            naive += abs(theta) <= 0.5 * math.log(old.high / old.low)
        # binomial se at 95 % over 4,000 races: 0.34 %
        assert 0.935 <= covered / races <= 0.965, (k, covered)
        if k == 4:
            assert naive / races < 0.9, naive
    # one segment of an orientation: no interval over segments
    assert segment_half_width([(True, 0.1), (False, -0.1), (True, 0.12)], 0.1, 0.95) is None


def test_a_clone_needs_the_disk_and_the_memory_and_says_how_much() -> None:
    with pytest.raises(ConfigError, match=r"needs .* MiB free in /tmp .* × 1.2.* is free"):
        check_disk(Path("/tmp"), 10 ** 15, "127.0.0.1:5432")
    with pytest.raises(ConfigError, match=r"needs about .* MiB of memory beside the server "
                                          r"\(its shared_buffers .* MiB and 64 MiB more\), "
                                          r"but only .* MiB is available"):
        check_memory(10 ** 15, "127.0.0.1:5432")
    assert check_memory(128 * 2 ** 20, "x") == 192 * 2 ** 20


def test_a_duet_on_a_clone_of_a_real_cluster_and_the_clone_removed(
        own_cluster: LocalCluster, tmp_path: Path, clone_parent: Path) -> None:  # noqa: F811
    dsn = _pgbench_db(own_cluster)
    clone = make_clone(dsn, journals=tmp_path / "journals", mark="duet-test",
                       parent=clone_parent)
    try:
        assert len(clone_paths(tmp_path / "journals", "duet-test")) == 1
        with psycopg.connect(clone.dsn_like(dsn)) as conn:
            row = conn.execute("SELECT count(*) FROM pgbench_accounts").fetchone()
        assert row is not None and row[0] == 100_000  # the same data
        assert clone.cluster.port != own_cluster.port
        # a postmaster knob restarts the clone, a reload-time one does not
        assert clone.apply({"shared_buffers": "32MB"}) is True
        assert clone.apply({"shared_buffers": "32MB", "work_mem": "8MB"}) is False
        with psycopg.connect(clone.dsn_like(dsn)) as conn:
            shown = [conn.execute(f"SHOW {n}").fetchone() for n in ("shared_buffers",
                                                                    "work_mem")]
        assert shown == [("32MB",), ("8MB",)]
        workload = PgbenchWorkload(dsn, clients=1, scale=1, builtin="select-only")
        with psycopg.connect(own_cluster.dsn, autocommit=True) as conn:
            server = Arm("server", dsn, lambda s: _alter(conn, s))
            started = time.monotonic()
            outcome = run_duet(server, Arm("clone", clone.dsn_like(dsn),
                                           lambda s: clone.apply(dict(s))),
                               [{"work_mem": "4MB"}, {"work_mem": "8MB"}],
                               ["default", "best"], client_runner(workload.progress_command),
                               max_seconds=12, segment_s=8, warmup_s=1, min_blocks=2)
            took = time.monotonic() - started
        assert outcome is not None
        best = outcome.plain["best"]
        assert best.segments == 2 and best.batches == 2
        # work_mem does not matter to pgbench -S: no winner, 1 inside the interval
        assert outcome.winner is None
        assert best.interval.low < 1.0 < best.interval.high
        assert took < 30
    finally:
        data_dir = clone.cluster.data_dir
        clone.remove()
    assert not Path(clone.record.scratch).exists()
    assert postmaster_pid(data_dir) is None
    assert not clone_paths(tmp_path / "journals")


def _alter(conn: psycopg.Connection[tuple[object, ...]], settings: object) -> None:
    assert isinstance(settings, dict)
    for name, value in settings.items():
        conn.execute(psycopg.sql.SQL("ALTER SYSTEM SET {} = {}").format(
            psycopg.sql.Identifier(name), psycopg.sql.Literal(value)))
    conn.execute("SELECT pg_reload_conf()")


#: a tuner stand-in: journals the server, starts the guard, changes a knob, makes the clone
#: and runs a duet segment on both; killed with SIGKILL once the segment runs
KILLED = textwrap.dedent("""
    import sys
    from pathlib import Path
    import psycopg
    from tuner_client.crashsafe.run import RunSafety
    from tuner_client.crashsafe.journal import journal_dir
    from tuner_client.knobs.apply import apply_online_knobs
    from tuner_client.knobs.catalog import KnobCatalog
    from tuner_client.servers.controllers import PgCtlController
    from tuner_client.servers.target import Target
    from tuner_client.duet.clone import make_clone
    from tuner_client.duet.driver import run_together
    from workloads.pgbench import PgbenchWorkload, find_pgbench

    class Config:
        source = "duet-kill.yaml"
        class database:
            restart_timeout_s = 60.0

    dsn, data_dir, parent = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    with psycopg.connect(dsn, autocommit=True) as conn:
        catalog = KnobCatalog.from_connection(conn)
    target = Target(dsn=dsn, catalog=catalog, cluster=None, ram_bytes=None,
                    controller=PgCtlController(data_dir, dsn))
    safety = RunSafety(Config, "duet-kill")
    safety.protect(target)
    with psycopg.connect(dsn, autocommit=True) as conn:
        apply_online_knobs(conn, catalog, {"work_mem": "8MB"})
    clone = make_clone(dsn, journals=journal_dir(), mark=safety.mark, parent=parent)
    print(clone.record.scratch, clone.cluster.data_dir, flush=True)
    workload = PgbenchWorkload(dsn, clients=1, scale=1, builtin="select-only")
    run_together(workload.progress_command, (dsn, clone.dsn_like(dsn)), 60)
""")


def test_a_tuner_killed_during_a_duet_leaves_the_server_restored_and_no_clone(
        own_cluster: LocalCluster, tmp_path: Path, clone_parent: Path) -> None:  # noqa: F811
    dsn = _pgbench_db(own_cluster)
    auto_conf = (own_cluster.data_dir / "postgresql.auto.conf").read_text()
    journals = tmp_path / "journals"
    proc, (scratch, clone_data) = start_owner(
        tmp_path / "killed.py", KILLED, [dsn, str(own_cluster.data_dir), str(clone_parent)],
        journals)
    wait_for_segment()
    clone_pid = postmaster_pid(clone_data)
    assert clone_pid is not None
    kill_owner(proc)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and (Path(scratch).exists() or pgbench_pids()
                                           or list(journals.glob("*.json"))):
        time.sleep(0.2)
    assert not Path(scratch).exists()
    assert not pgbench_pids()
    assert not list(journals.glob("*.json"))
    assert gone(clone_pid)
    assert (own_cluster.data_dir / "postgresql.auto.conf").read_text() == auto_conf
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SHOW work_mem").fetchone()
    assert row is not None and row[0] == "4MB"


def _plan_config(dsn: str, **extra: object) -> TunerConfig:
    return tuner_config_from_dict({
        "name": "duet-plan",
        "database": {"dsn": dsn, "allow_restarts": True,
                     "controller": {"kind": "pg_ctl", "options": {"data_dir": "/nonexistent"}}},
        "workload": {"pgbench": {"clients": 2}},
        "online": {"knobs": {"max_wal_size": {"min": "32MB", "max": "1GB"},
                             "work_mem": {"min": "1MB", "max": "64MB"}}},
        **extra}, source="duet-plan.yaml")


def test_the_plan_names_duet_and_its_clone_or_why_not(pg_cluster: LocalCluster) -> None:
    """A knob with memory (max_wal_size) and a restart-time one (shared_buffers) on a local
    pgbench server: the final race by duet, with the clone's disk, memory and set-up time;
    live traffic: windows, said why."""
    catalog = read_catalog(pg_cluster.dsn)
    config = _plan_config(pg_cluster.dsn)
    offline = resolve_knob_space(config.offline.knobs, catalog, kind="offline")
    online = resolve_knob_space(config.online.knobs, catalog, kind="online")
    assert offline.names == ["shared_buffers"]
    text = final_design(config, catalog, offline, online, data_bytes=500 * 2 ** 20,
                        shared_buffers="128MB")
    assert "online knobs: duet, the most precise design valid here" in text, text
    assert "max_wal_size ('sighup') differs: its effect plays out over a cycle" in text
    assert "600 MiB of disk (the data × 1.2), about 128MB more memory" in text
    assert "set-up about 10 s" in text  # 5 s + 500 MiB at 100 MiB/s
    assert "shared_buffers differs too (a restart): the whole race by duet" in text
    # the online search by duet on a clone of its own (issue 51, item 1), the offline one in
    # windows with its warm restarts
    searched = search_design(config, catalog, online, data_bytes=500 * 2 ** 20,
                             shared_buffers="128MB")
    assert searched.startswith("duet, the most precise design valid here"), searched
    assert "600 MiB of disk" in searched and "removed after the session" in searched
    offline_text = search_design(config, catalog, offline, designs=OFFLINE_SEARCH_DESIGNS)
    assert offline_text.startswith("windows"), offline_text
    live = _plan_config(pg_cluster.dsn, workload={"observe": {"poll_s": 1}},
                        database={"dsn": pg_cluster.dsn, "controller": {
                            "kind": "pg_ctl", "options": {"data_dir": "/nonexistent"}}})
    online = resolve_knob_space(live.online.knobs, catalog, kind="online")
    text = final_design(live, catalog, resolve_knob_space((), catalog, kind="offline"), online)
    assert text.startswith("when the candidates differ in the online knobs: windows"), text
    assert "not duet: the traffic is live: the application talks to one server" in text


def test_a_clone_a_dead_run_left_is_removed_by_harmony_restore(
        own_cluster: LocalCluster, tmp_path: Path, clone_parent: Path,  # noqa: F811
        capsys: pytest.CaptureFixture[str]) -> None:
    """The guard died too (a reboot, or killed first): ``harmony restore --all`` (and a later
    run) stops and deletes the clone whose run ended; a live run's clone is left alone."""
    journals = tmp_path / "journals"
    live = make_clone(own_cluster.dsn, journals=journals, mark="alive", parent=clone_parent)
    dead = make_clone(own_cluster.dsn, journals=journals, mark="dead", parent=clone_parent)
    child = subprocess.Popen(["true"])
    child.wait()
    dead.record.owner_pid, dead.record.owner_ticks = child.pid, None
    dead.record.save()
    try:
        assert main(["restore", "--all", "--journal-dir", str(journals)]) == 0
        assert f"{dead.record.describe()}: its run ended; removed" in capsys.readouterr().out
        assert not Path(dead.record.scratch).exists()
        assert postmaster_pid(dead.cluster.data_dir) is None
        assert Path(live.record.scratch).exists() and postmaster_pid(live.cluster.data_dir)
        assert clone_paths(journals) == [live.record.path]
    finally:
        live.remove()
        dead.remove()


def test_a_driver_without_a_per_second_report_is_counted_on_both_servers(
        tpch_cluster: TpchCluster, tmp_path: Path, clone_parent: Path) -> None:  # noqa: F811
    """TPC-H streams report no per-second count: each server's commits are read every second
    from pg_stat_database while one driver per server runs; the same mix on the same data
    reads about the same on both."""
    config = parse_tuner_config(tune_yaml("counted", 1, mix="2Q6", measure="paired: true",
                                          online="{knobs: {work_mem: {min: 4MB, max: 4MB}}}",
                                          final="{rounds: 1}"), source="counted.yaml")
    clone = make_clone(tpch_cluster.dsn, journals=tmp_path / "journals", mark="counted",
                       parent=clone_parent)
    try:
        runner = counted_runner(config.workload, config.seed)
        # each driver in its own process, pinned to a CPU of its own as the duet pins them
        paired = runner((tpch_cluster.dsn, clone.dsn_like(tpch_cluster.dsn)), 7, 2,
                        ("0", str((os.cpu_count() or 1) - 1)))
    finally:
        clone.remove()
    assert 4 <= len(paired.seconds) <= 5
    server, twin = (sum(c) for c in paired.counts)
    assert server > 10 and twin > 10, paired
    assert 0.5 < twin / server < 2.0, paired


def test_a_common_seed_draws_the_same_statements_on_both_clusters(
        own_cluster: LocalCluster, tmp_path: Path) -> None:
    """Common random numbers: with a seed the two clients of a segment draw the same
    parameters in the same order (each logs its draws under its own application name), and
    the next segment draws others; without one each client seeds from the clock."""
    script = tmp_path / "draw.pgbench"
    script.write_text("\\set x random(1, 1000000000)\n"
                      "INSERT INTO duet_draws VALUES (current_setting('application_name'), "
                      ":x, clock_timestamp());\n")
    with psycopg.connect(own_cluster.dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS duet_draws")
        conn.execute("CREATE TABLE duet_draws (who text, x bigint, at timestamptz)")
    pgbench = find_pgbench()

    def command(dsn: str, seconds: int) -> tuple[list[str], dict[str, str] | None]:
        return [str(pgbench), "-n", "-f", str(script), "-c", "1", "-T", str(seconds), "-P",
                "1", "--progress-timestamp", dsn], None

    def draws(run: Callable[[tuple[str, str]], object]) -> tuple[list[int], list[int]]:
        with psycopg.connect(own_cluster.dsn, autocommit=True) as conn:
            conn.execute("TRUNCATE duet_draws")
        run((f"{own_cluster.dsn} application_name=a", f"{own_cluster.dsn} application_name=b"))
        with psycopg.connect(own_cluster.dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT who, x FROM duet_draws ORDER BY at").fetchall()
        return [x for w, x in rows if w == "a"], [x for w, x in rows if w == "b"]

    runner = client_runner(command, seed=11)
    first = draws(lambda dsns: runner(dsns, 2, 0.0, (None, None)))
    n = min(map(len, first))
    assert n >= 20 and first[0][:n] == first[1][:n]  # the same draws, in the same order
    second = draws(lambda dsns: runner(dsns, 2, 0.0, (None, None)))
    m = min(map(len, second))
    assert m >= 20 and second[0][:m] == second[1][:m]
    assert second[0][:20] != first[0][:20]  # the next segment's seed draws others
    own = draws(lambda dsns: client_runner(command)(dsns, 2, 0.0, (None, None)))
    assert min(map(len, own)) >= 20 and own[0][:20] != own[1][:20]
