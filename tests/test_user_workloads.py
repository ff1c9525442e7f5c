"""The user's own workloads on a real PostgreSQL: pgbench scripts and .sql files (read and
write), every bad input stopped before anything runs, capture -> replay fidelity against
pg_stat_statements, and the server's logging restored after a capture, also after an error.

One module-scoped cluster (pg_stat_statements preloaded) with the shop at scale 1.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from harmony_base.errors import ConfigError
from tests.conftest import ClusterFactory
from tuner_client.config import parse_tuner_config
from tuner_client.servers.local_cluster import LocalCluster
from workloads.apps import setup_app
from workloads.capture import capture, capture_settings, logging_for_capture
from workloads.pgbench import find_pgbench
from workloads.replay import ReplayWorkload
from workloads.scripted import ScriptedWorkload

SHOP = Path(__file__).resolve().parent.parent / "workloads" / "apps" / "shop"
LOOKUP, ORDER, REPORT = (str(SHOP / f"{n}.pgbench") for n in ("lookup", "order", "report"))
SCALE = {"scale": 1}
LOG_SETTINGS = list(capture_settings("x"))


@pytest.fixture(scope="module")
def shop(cluster_factory: ClusterFactory) -> Iterator[tuple[LocalCluster, str]]:
    cluster = cluster_factory("shop")
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    cluster.restart()
    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE shop")
    dsn = cluster.dsn_for("shop")
    setup_app(dsn, "shop", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION pg_stat_statements")
    yield cluster, dsn
    cluster.stop(mode="immediate")  # no shutdown checkpoint: the data is thrown away
    cluster.destroy()


def _count(dsn: str, query: str) -> int:
    with psycopg.connect(dsn) as conn:
        return int(conn.execute(query).fetchone()[0])  # type: ignore[index]


def _logging(dsn: str) -> dict[str, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
                            [LOG_SETTINGS]).fetchall()
    return dict(rows)


# -- scripted workloads ------------------------------------------------------------------------
def test_scripted_read_workload_time_window_and_fixed_work(shop: tuple[LocalCluster, str]
                                                           ) -> None:
    _, dsn = shop
    with ScriptedWorkload(dsn, [f"{LOOKUP}@4", f"{REPORT}@1"], clients=2,
                          variables=SCALE) as workload:
        started = time.monotonic()
        window = workload.sample(1.5)
        took = time.monotonic() - started
        fixed = workload.sample(queries=12)
    assert not workload.writing
    # a window of whole seconds (pgbench -T 2), timed as pgbench ran it: never longer than
    # the call that ran it (a sum over the 2 clients would be ~4 s)
    assert window.errors == 0 and 0.9 < window.seconds <= took
    lookups, reports = window.per_query[LOOKUP].completed, window.per_query[REPORT].completed
    assert lookups > 0 and reports > 0 and lookups > reports  # weights 4:1
    assert window.completed == lookups + reports
    # per-statement latencies by file and line: lookup.pgbench's two SELECTs, the report's one
    assert set(window.per_statement) == {f"{LOOKUP}, line 4", f"{LOOKUP}, line 5",
                                         f"{REPORT}, line 4"}
    assert all(0 < s < 1 for s in window.per_statement.values())
    assert fixed.completed == 12  # 6 transactions per client


def test_scripted_write_workload_commits_its_rows(shop: tuple[LocalCluster, str]) -> None:
    _, dsn = shop
    before = _count(dsn, "SELECT count(*) FROM orders")
    with ScriptedWorkload(dsn, [ORDER], clients=2, writes=True, variables=SCALE) as workload:
        sample = workload.sample(queries=10)
    assert workload.writing and sample.errors == 0 and sample.completed == 10
    assert _count(dsn, "SELECT count(*) FROM orders") - before == 10
    assert len(sample.per_statement) == 6  # BEGIN, 4 statements, END


def test_sql_file_statements_are_weighted_units(shop: tuple[LocalCluster, str],
                                                tmp_path: Path) -> None:
    _, dsn = shop
    path = tmp_path / "mine.sql"
    path.write_text("-- @weight 3\n-- @param c = random(1, 100)\n"
                    "SELECT name FROM customers WHERE id = :c;\n\n"
                    "-- @param r = random(1, 10)\nSELECT count(*) FROM customers\n"
                    "  WHERE region = :r;\n")
    with ScriptedWorkload(dsn, [str(path)], clients=2) as workload:
        sample = workload.sample(1.0)
    first, second = sample.per_query[f"{path}:3"], sample.per_query[f"{path}:6"]
    assert first.completed > second.completed > 0 and sample.errors == 0
    assert set(sample.per_statement) == {f"{path}, line 3", f"{path}, line 6"}


def test_the_duet_client_runs_the_users_scripts_not_tpcb(shop: tuple[LocalCluster, str],
                                                         tmp_path: Path) -> None:
    """A duet's per-second client (``progress_command``) of a ``.sql`` mix on a database
    without pgbench's tables: it runs the user's statements (the customers index's scans
    grow), never pgbench's built-in TPC-B, and the
    scripts are checked and written even though ``start()`` was not called."""
    _, dsn = shop
    path = tmp_path / "mine.sql"
    path.write_text("-- @param c = random(1, 100)\nSELECT name FROM customers WHERE id = :c;\n")
    workload = ScriptedWorkload(dsn, [str(path)], clients=1)
    argv, env = workload.progress_command(dsn, 2)
    assert "-f" in argv and "-b" not in argv
    with psycopg.connect(dsn, autocommit=True) as conn:
        def scans() -> int:
            row = conn.execute("SELECT coalesce(idx_scan, 0) FROM pg_stat_user_tables "
                               "WHERE relname = 'customers'").fetchone()
            assert row is not None
            return int(row[0])
        before = scans()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr[-800:]
        time.sleep(1.2)  # the statistics of the ended backends reach the view
        conn.execute("SELECT pg_stat_clear_snapshot()")
        ran = scans() - before
    assert ran > 50, (ran, done.stderr[-800:])
    assert "progress:" in done.stderr


# -- bad inputs: each stops before anything runs, naming file, line and statement -------------
@pytest.mark.parametrize(("script", "line", "message"), [
    ("\\set c random(1, 10)\nSELEC name FROM customers WHERE id = :c;\n", 2, "syntax error"),
    ("SELECT x FROM no_such_table;\n", 1, 'relation "no_such_table" does not exist'),
    ("-- comment\n\\set c random(1, 10)\nSELECT name FROM customers\n  WHERE id = :d;\n", 3,
     "uses :d, but no \\set"),
    ("\\set d random(1, 10)\nSELECT id FROM orders WHERE created_at > :d;\n", 2,
     "uses :d as timestamptz"),
    ("\\set p random(1, 10)\nUPDATE products SET stock = 0 WHERE id = :p;\n", 2,
     "writes (UPDATE), but the workload does not allow writes"),
    ("WITH d AS (DELETE FROM order_items WHERE qty < 0 RETURNING 1) SELECT count(*) FROM d;\n",
     1, "writes (WITH)"),
    ("TRUNCATE order_items;\n", 1, "TRUNCATE command, which changes the database"),
])
def test_bad_script_names_file_line_and_statement(shop: tuple[LocalCluster, str],
                                                  tmp_path: Path, script: str, line: int,
                                                  message: str) -> None:
    _, dsn = shop
    path = tmp_path / "bad.pgbench"
    path.write_text(script)
    stock = _count(dsn, "SELECT sum(stock) FROM products")
    workload = ScriptedWorkload(dsn, [f"{path}@2"], clients=1)
    with pytest.raises(ConfigError) as err:
        workload.start()
    text = str(err.value)
    assert f"{path}, line {line}: statement `" in text and message in text, text
    assert _count(dsn, "SELECT sum(stock) FROM products") == stock  # nothing ran


def test_bad_files_weights_and_expressions(shop: tuple[LocalCluster, str],
                                           tmp_path: Path) -> None:
    _, dsn = shop
    with pytest.raises(ConfigError, match=r"workload script .*missing\.pgbench does not exist"):
        ScriptedWorkload(dsn, [str(tmp_path / "missing.pgbench")])
    for spec in (f"{LOOKUP}@0", f"{LOOKUP}@x", f"{LOOKUP}@-2"):
        with pytest.raises(ConfigError, match="weight .* must be a whole number >= 1"):
            ScriptedWorkload(dsn, [spec])
    other = tmp_path / "q.txt"
    other.write_text("SELECT 1;\n")
    with pytest.raises(ConfigError, match=r"must be a pgbench script \(\.pgbench\) or"):
        ScriptedWorkload(dsn, [str(other)])
    expression = tmp_path / "expr.pgbench"
    expression.write_text("\\set c random(1, \nSELECT 1;\n")
    with pytest.raises(ConfigError, match=r"pgbench cannot parse .*expr\.pgbench"):
        ScriptedWorkload(dsn, [str(expression)], variables=SCALE).start()
    annotated = tmp_path / "w.sql"
    annotated.write_text("SELECT 1;\n-- @weight zero\nSELECT 2;\n")
    with pytest.raises(ConfigError, match=r"w\.sql, line 2: @weight must be a whole number"):
        ScriptedWorkload(dsn, [str(annotated)])


def test_config_rejects_bad_workload_sections() -> None:
    text = ("name: x\nworkload:\n  scripts:\n    files:\n      - a.pgbench@2\n"
            "      - b.pgbench@0\n")
    with pytest.raises(ConfigError, match=r"configs/x\.yaml, line 6: .*weight"):
        parse_tuner_config(text, source="configs/x.yaml")
    with pytest.raises(ConfigError, match="give one workload .* tpch, scripts"):
        parse_tuner_config("name: x\nworkload:\n  tpch: {}\n  scripts: {files: [a.sql]}\n")
    with pytest.raises(ConfigError, match="writes"):
        parse_tuner_config("name: x\nworkload:\n  scripts: {files: [a.sql], writes: yes-please}\n")
    with pytest.raises(ConfigError, match=r"x\.yaml, line 4: .*app must be one of \['shop'\]"):
        parse_tuner_config("name: x\nworkload:\n  replay:\n    app: {name: shopp}\n"
                           "    file: c.json\n", source="x.yaml")
    cfg = parse_tuner_config("name: x\nworkload:\n  replay: {file: c.json}\n")
    assert cfg.workload.kind == "replay" and cfg.workload.clients == 0  # the captured ones
    assert not cfg.workload.writes


# -- capture and replay ------------------------------------------------------------------------
def _shares(rows: list[tuple[int, int, float]]) -> dict[int, tuple[float, float]]:
    calls = sum(r[1] for r in rows)
    time_ms = sum(r[2] for r in rows)
    return {q: (n / calls, t / time_ms) for q, n, t in rows}


def test_capture_then_replay_reproduces_the_mix(shop: tuple[LocalCluster, str]) -> None:
    cluster, dsn = shop
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET log_min_duration_statement = 250")  # the operator's own
        conn.execute("SELECT pg_reload_conf()")
    original = _logging(dsn)
    live = subprocess.Popen(
        [str(find_pgbench()), "-n", "-M", "prepared", "-c", "3", "-T", "5", "-D", "scale=1",
         "-f", f"{LOOKUP}@6", "-f", f"{ORDER}@3", "-f", f"{REPORT}@1", dsn],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        result = capture(dsn, 3.0, None, log_file=cluster.log_path)
    finally:
        live.communicate(timeout=60)
    assert _logging(dsn) == original  # restored, the operator's 250 ms kept
    replay = result.replay
    assert replay.clients == 3 and replay.writes and replay.pg_stat_statements
    assert {len(u) for u in replay.units} == {1, 6}  # single statements and order transactions
    captured = _shares([(d["queryid"], d["calls"], d["total_exec_time_ms"])
                        for d in replay.pg_stat_statements])
    assert len(captured) == 7  # lookup 2, order 4 (BEGIN/END have no queryid), report 1

    with psycopg.connect(cluster.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE shop_copy TEMPLATE shop")
    copy = cluster.dsn_for("shop_copy")
    with psycopg.connect(copy, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")
    with ReplayWorkload(copy, replay, writes=True) as workload:
        sample = workload.sample(queries=len(replay.units), timeout_s=120)
    assert sample.errors == 0
    with psycopg.connect(copy, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT queryid, calls, total_exec_time FROM pg_stat_statements WHERE dbid = "
            "(SELECT oid FROM pg_database WHERE datname = 'shop_copy') AND queryid = ANY(%s)",
            [list(captured)]).fetchall()
    replayed = _shares([(int(q), int(n), float(t)) for q, n, t in rows])
    assert set(replayed) == set(captured)
    for queryid, (calls, busy) in captured.items():
        assert abs(replayed[queryid][0] - calls) <= 0.05, (queryid, replayed[queryid], calls)
        assert abs(replayed[queryid][1] - busy) <= 0.05, (queryid, replayed[queryid], busy)


def test_replay_refuses_writes_and_bad_files(shop: tuple[LocalCluster, str],
                                             tmp_path: Path) -> None:
    cluster, dsn = shop
    result = capture(dsn, 0.3, tmp_path / "c.json", log_file=cluster.log_path)
    assert result.replay.units == () and (tmp_path / "c.json").exists()
    with pytest.raises(ConfigError, match="holds no captured statement"):
        ReplayWorkload(dsn, tmp_path / "c.json")
    with pytest.raises(ConfigError, match="does not exist; record one with harmony capture"):
        ReplayWorkload(dsn, tmp_path / "none.json")
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(ConfigError, match="is not a harmony capture"):
        ReplayWorkload(dsn, tmp_path / "bad.json")
    writes = tmp_path / "w.json"
    writes.write_text('{"format": "harmony-replay", "version": 1, "captured": {}, "seconds": 1,'
                      ' "clients": 1, "statements": [{"id": "s1", "sql": "DELETE FROM '
                      'order_items WHERE qty = $1", "calls": 1, "total_ms": 1, "writes": true}],'
                      ' "units": [[[0, ["3"]]]]}')
    items = _count(dsn, "SELECT count(*) FROM order_items")
    with pytest.raises(ConfigError, match="writes .*set writes: true"):
        ReplayWorkload(dsn, writes)
    assert _count(dsn, "SELECT count(*) FROM order_items") == items


def test_logging_restored_after_an_error_mid_capture(shop: tuple[LocalCluster, str]) -> None:
    _, dsn = shop
    original = _logging(dsn)
    with pytest.raises(RuntimeError, match="mid-capture"), logging_for_capture(dsn, "t1"):
        during = _logging(dsn)
        assert during["log_min_duration_statement"] == "0"
        assert "hcap-t1" in during["log_line_prefix"]
        raise RuntimeError("mid-capture")
    assert _logging(dsn) == original
    # an interrupt from another thread (SIGTERM in the CLI ends the same way)
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    got = capture(dsn, 30.0, None, log_file=shop[0].log_path, stop=stop)
    assert got.replay.seconds < 30.0  # the stop ended its window, not its 30 s
    assert _logging(dsn) == original
    with psycopg.connect(dsn, autocommit=True) as conn:
        auto = conn.execute("SELECT name FROM pg_file_settings WHERE sourcefile LIKE "
                            "'%%postgresql.auto.conf' AND name = ANY(%s)",
                            [LOG_SETTINGS]).fetchall()
    assert {r[0] for r in auto} <= {"log_min_duration_statement"}  # only the operator's own


def test_capture_needs_a_readable_log(shop: tuple[LocalCluster, str]) -> None:
    _, dsn = shop
    original = _logging(dsn)
    with pytest.raises(ConfigError, match="logging_collector is off.*--log-file"):
        capture(dsn, 1.0, None)
    with pytest.raises(ConfigError, match="directory .*no-such-dir must exist"):
        capture(dsn, 1.0, Path("/no-such-dir/c.json"), log_file=shop[0].log_path)
    assert _logging(dsn) == original
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE plain LOGIN"))
    try:
        with pytest.raises(ConfigError, match="capture needs a superuser"):
            capture(dsn + " user=plain", 1.0, None)
    finally:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP ROLE plain")


def test_a_bad_script_stops_the_tuner_before_any_knob(shop: tuple[LocalCluster, str],
                                                      tmp_path: Path) -> None:
    """The tuner checks the scripts when it starts the workload in its prepare phase: the
    error names the file and line, nothing was measured, no setting was changed."""
    from tuner_client.api.client import connect as harmony_connect
    from tuner_client.flows import Tuner
    from tuner_client.knobs.catalog import KnobCatalog
    from tuner_client.servers.controllers.local import LocalController
    from tuner_client.servers.target import Target

    cluster, dsn = shop
    bad = tmp_path / "bad.pgbench"
    bad.write_text("\\set c random(1, 10)\nSELECT name FROM customer WHERE id = :c;\n")
    config = parse_tuner_config(
        f"name: badscript\nworkload:\n  scripts:\n    files: ['{LOOKUP}@3', '{bad}@1']\n"
        f"    variables: {{scale: 1}}\nmeasure: {{warmup_s: 0, seconds: 1, estimator: work}}\n",
        source="badscript.yaml")
    auto_conf = (cluster.data_dir / "postgresql.auto.conf").read_text()
    with psycopg.connect(dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
        before = dict(conn.execute("SELECT name, setting FROM pg_settings").fetchall())
    target = Target(dsn=dsn, catalog=catalog, controller=LocalController(cluster), cluster=None,
                    ram_bytes=None)
    tuner = Tuner(config, client=harmony_connect(None), target=target, run_id="b1")
    with pytest.raises(ConfigError, match=rf"{bad}, line 2: statement `SELECT name FROM "
                                          rf"customer .*\"customer\" does not exist"):
        tuner.run()
    assert tuner.records == []
    assert (cluster.data_dir / "postgresql.auto.conf").read_text() == auto_conf
    with psycopg.connect(dsn) as conn:
        assert dict(conn.execute("SELECT name, setting FROM pg_settings").fetchall()) == before


def test_cli_app_setup_run_and_capture(shop: tuple[LocalCluster, str], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from harmony.cli import main

    cluster, dsn = shop
    assert main(["workload", "app-setup", "shop", "--dsn", dsn, "--create-database",
                 "--stat-statements"]) == 0
    assert "shop at scale 1 reused" in capsys.readouterr().out
    assert main(["workload", "app-setup", "shop", "--dsn", dsn, "--scale", "2"]) == 3
    assert "already holds shop at scale 1" in capsys.readouterr().err
    assert main(["workload", "run", f"{LOOKUP}@1", "--dsn", dsn, "-D", "scale=1",
                 "--seconds", "1", "--clients", "2"]) == 0
    out = capsys.readouterr().out
    assert f"{LOOKUP}, line 4: " in out and " 0 errors" in out
    assert main(["workload", "run", f"{ORDER}@1", "--dsn", dsn, "-D", "scale=1"]) == 2
    assert "order.pgbench, line 9: statement `INSERT" in capsys.readouterr().err
    target = tmp_path / "cap.json"
    assert main(["capture", "--dsn", dsn, "--seconds", "0.2", "--out", str(target),
                 "--log-file", str(cluster.log_path)]) == 0
    assert "captured 0 units" in capsys.readouterr().out and target.exists()
