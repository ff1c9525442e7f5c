"""Per-transaction assignment on a real PostgreSQL: both configurations drawn about equally,
each transaction really under its configuration, non-session knobs refused."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest
from psycopg import sql
from tune_fixtures import TpchCluster, tpch_cluster  # noqa: F401  (fixture)

from harmony_base.errors import ConfigError, WorkloadError
from tuner_client.config import ObserveConfig, WorkloadConfig
from tuner_client.stats.per_transaction import compare
from workloads.per_transaction import (
    PgbenchAssignment,
    StreamAssignment,
    Template,
    Trace,
    builtin_template,
    padded_set_local,
    statement_draws,
    tpch_draws,
)
from workloads.per_transaction.from_config import make_assignment, unsupported_reason
from workloads.per_transaction.pgbench_variants import variant_text
from workloads.replay import CapturedStatement, ReplayFile
from workloads.script_file import read_script_file

CONFIGS = [{"work_mem": "1MB"}, {"work_mem": "2MB"}]
RECORD = "INSERT INTO seen (work_mem) VALUES (current_setting('work_mem'));"


def _seen_table(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE seen (work_mem text)")


def _seen(dsn: str) -> dict[str, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT work_mem, count(*) FROM seen GROUP BY 1").fetchall()
    return {str(value): int(n) for value, n in rows}


def _balanced(counts: np.ndarray) -> bool:
    """Both counts within 4 binomial standard deviations of half."""
    n = counts.sum()
    return bool(abs(counts[0] - n / 2) <= 4 * np.sqrt(n / 4))


def test_variant_text_puts_set_local_inside_the_transaction() -> None:
    plain = variant_text(Template("t", "\\set x random(1, 9)\nSELECT :x"), ["SET LOCAL a TO '1'"])
    assert plain == "BEGIN;\nSET LOCAL a TO '1';\n\\set x random(1, 9)\nSELECT :x;\nEND;\n"
    tpcb = variant_text(builtin_template("tpcb-like"), ["SET LOCAL a TO '1'"])
    assert tpcb.count("BEGIN;") == 1 and "BEGIN;\nSET LOCAL a TO '1';\nUPDATE" in tpcb
    with pytest.raises(WorkloadError, match="runs 2 transactions"):
        variant_text(Template("two", "BEGIN;\nSELECT 1;\nEND;\nBEGIN;\nSELECT 2;\nEND;\n"), [])


def test_pgbench_assigns_both_configurations_under_set_local(fresh_dsn: str) -> None:
    _seen_table(fresh_dsn)
    run = PgbenchAssignment(fresh_dsn, CONFIGS, [Template("record", RECORD)], clients=2, seed=3)
    # each variant's statements are planned under its own SET LOCAL lines: prepared is safe
    assert run.query_mode == "prepared"
    trace = run.run(2)
    counts = trace.counts()
    assert counts.sum() > 100 and trace.errors == 0 and _balanced(counts)
    # every logged transaction committed its own configuration's work_mem, and no other
    assert _seen(fresh_dsn) == {"1MB": counts[0], "2MB": counts[1]}
    assert trace.templates == ("record",) and set(trace.template.tolist()) == {0}
    assert np.all(trace.latency > 0) and 0 <= trace.start.min() < trace.start.max() <= 2.5


def test_streams_assign_both_configurations_under_set_local(fresh_dsn: str,
                                                           tmp_path: Path) -> None:
    _seen_table(fresh_dsn)
    (tmp_path / "record.sql").write_text(RECORD + "\n")
    scripts = read_script_file(tmp_path / "record.sql")
    run = StreamAssignment(fresh_dsn, CONFIGS, statement_draws(scripts, 2), seed=5)
    trace = run.run(2.0)
    counts = trace.counts()
    assert counts.sum() > 100 and trace.errors == 0 and _balanced(counts)
    seen = _seen(fresh_dsn)
    assert set(seen) == {"1MB", "2MB"}
    # a query committed just after the run's end is in the table but not in the trace
    assert 0 <= seen["1MB"] - counts[0] <= 2 and 0 <= seen["2MB"] - counts[1] <= 2


def test_queries_running_at_the_end_are_waited_for_and_counted(fresh_dsn: str,
                                                               tmp_path: Path) -> None:
    """Dropping the queries in flight when the run ends would drop the slower configuration's
    long queries more often (a bias towards it): every query started within the run counts."""
    (tmp_path / "sleep.sql").write_text("SELECT pg_sleep(0.6);\n")
    draws = statement_draws(read_script_file(tmp_path / "sleep.sql"), 3)
    trace = StreamAssignment(fresh_dsn, CONFIGS, draws, seed=1).run(2.0)
    ends = trace.start + trace.latency
    assert len(trace) >= 3 and trace.errors == 0 and np.all(trace.latency >= 0.6)
    assert np.all(trace.start <= trace.seconds)
    # each stream runs 0.6-s queries back to back, so some were running at the end
    assert np.any(ends > trace.seconds + 0.05)


def test_a_settled_stream_run_ends_early_and_every_look_holds_every_query_before_its_cut(
        fresh_dsn: str, tmp_path: Path) -> None:
    """A stopping rule sees the run so far cut where no query is unfinished: a look leaving
    out a slow query still running would favour the configuration with fewer of them."""
    (tmp_path / "mixed.sql").write_text("SELECT pg_sleep(0.3);\nSELECT 1;\n")
    draws = statement_draws(read_script_file(tmp_path / "mixed.sql"), 3)
    looks: list[Trace] = []

    def settled(trace: Trace) -> bool:
        looks.append(trace)
        return len(looks) == 3

    began = time.monotonic()
    trace = StreamAssignment(fresh_dsn, CONFIGS, draws, seed=2).run(
        30.0, settled=settled, min_s=1.0, check_s=0.5)
    assert time.monotonic() - began < 6.0 and len(looks) == 3
    assert 2.0 <= trace.seconds < 3.0  # looks at 1, 1.5 and 2 s, then the drain
    for look in looks:
        # both statements in every look, and the final trace's queries started before the
        # look's cut are exactly the look's
        assert look.templates == trace.templates and len(trace.templates) == 2
        assert len(look) == int((trace.start < look.seconds - 1e-6).sum())
        assert np.all(look.start < look.seconds)


def test_a_settled_pgbench_run_goes_in_pieces_on_one_clock(fresh_dsn: str) -> None:
    looks: list[int] = []

    def settled(trace: Trace) -> bool:
        looks.append(len(trace))
        return len(looks) == 2

    run = PgbenchAssignment(fresh_dsn, CONFIGS, [Template("one", "SELECT 1;")], clients=2, seed=3)
    trace = run.run(30, settled=settled, min_s=1, check_s=1)
    assert len(looks) == 2 and looks[0] < looks[1] == len(trace)
    assert 1.9 <= trace.seconds <= 4.0 and trace.start.max() < trace.seconds + 0.1
    # the second piece starts after the first on the trace's clock, with its own draws
    first = np.sort(trace.start)[: looks[0]]
    assert first.max() < 1.2 and (trace.start > 1.0).sum() > 50
    assert set(trace.config.tolist()) == {0, 1} and trace.errors == 0


def test_tpch_streams_record_query_templates(tpch_cluster: TpchCluster) -> None:  # noqa: F811
    configs = [{"random_page_cost": "4"}, {"random_page_cost": "1.1", "jit": "off"}]
    trace = StreamAssignment(tpch_cluster.dsn, configs, tpch_draws(tpch_cluster.dsn, "1Q6,1Q14"),
                             seed=1).run(3.0)
    assert set(trace.templates) == {"Q6", "Q14"} and trace.errors == 0
    assert set(trace.config.tolist()) == {0, 1} and len(trace) > 10


def test_knobs_that_are_not_session_settable_are_refused(fresh_dsn: str) -> None:
    draws = statement_draws([], 1)
    with pytest.raises(ConfigError, match="shared_buffers cannot be set per transaction: its "
                                          "pg_settings context is 'postmaster'"):
        StreamAssignment(fresh_dsn, [{}, {"shared_buffers": "64MB"}], draws)
    with pytest.raises(ConfigError, match="checkpoint_timeout cannot be set per transaction: "
                                          "its pg_settings context is 'sighup'"):
        PgbenchAssignment(fresh_dsn, [{}, {"checkpoint_timeout": "10min"}],
                          [Template("r", "SELECT 1;")])
    with pytest.raises(ConfigError, match="work_memory is not a PostgreSQL setting"):
        StreamAssignment(fresh_dsn, [{"work_memory": "1MB"}], draws)
    with pytest.raises(WorkloadError, match="query mode must be one of"):
        PgbenchAssignment(fresh_dsn, [{}], [Template("r", "SELECT 1;")], query_mode="fast")


def test_a_scripted_workload_section_runs_per_transaction(fresh_dsn: str,
                                                          tmp_path: Path) -> None:
    _seen_table(fresh_dsn)
    (tmp_path / "record.sql").write_text(RECORD + "\n")
    wl = WorkloadConfig(kind="scripts", files=(str(tmp_path / "record.sql"),), clients=2,
                        writes=True)
    assert unsupported_reason(wl) is None
    trace = make_assignment(wl, fresh_dsn, CONFIGS, seed=2).run(1)
    assert trace.templates == (f"{tmp_path / 'record.sql'}:1",)
    assert _seen(fresh_dsn) == {"1MB": trace.counts()[0], "2MB": trace.counts()[1]}
    assert "live traffic" in (unsupported_reason(WorkloadConfig(kind="observe",
                                                                observe=ObserveConfig())) or "")
    with pytest.raises(WorkloadError, match="a TPC-H schedule changes its mix"):
        make_assignment(WorkloadConfig(kind="tpch", schedule="x"), fresh_dsn, CONFIGS)


def _replay(tmp_path: Path, statements: list[tuple[str, bool]],
            units: list[list[tuple[int, list[str | None] | None]]]) -> Path:
    path = tmp_path / "captured.json"
    ReplayFile(tuple(CapturedStatement(f"s{i}", text, 1, 1.0, writes)
                     for i, (text, writes) in enumerate(statements)),
               tuple(tuple(u) for u in units), clients=2, seconds=1.0, captured={}).write(path)
    return path


def test_a_captured_replay_runs_per_transaction(fresh_dsn: str, tmp_path: Path) -> None:
    """Each captured unit is the body of a transaction under one configuration: a captured
    BEGIN's isolation level is kept, a captured ROLLBACK undoes the unit, the parameters are
    the captured ones."""
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE seen (work_mem text, isolation text, n int)")
    statements = [("BEGIN ISOLATION LEVEL REPEATABLE READ", False),
                  ("INSERT INTO seen VALUES (current_setting('work_mem'), "
                   "current_setting('transaction_isolation'), $1)", True),
                  ("COMMIT", False), ("BEGIN", False), ("ROLLBACK", False)]
    path = _replay(tmp_path, statements, [[(0, None), (1, ["7"]), (2, None)],
                                          [(1, ["8"])], [(3, None), (1, ["9"]), (4, None)]])
    wl = WorkloadConfig(kind="replay", files=(str(path),), clients=2, writes=True)
    assert unsupported_reason(wl) is None
    trace = make_assignment(wl, fresh_dsn, CONFIGS, seed=4).run(1.5)
    assert trace.errors == 0 and len(trace) > 30 and set(trace.config.tolist()) == {0, 1}
    assert set(trace.templates) == {"s0+s1+s2", "s1", "s3+s1+s4"}
    with psycopg.connect(fresh_dsn) as conn:
        rows = conn.execute("SELECT n, isolation, work_mem, count(*) FROM seen "
                            "GROUP BY 1, 2, 3").fetchall()
    seen = {(n, iso, wm): c for n, iso, wm, c in rows}
    # the rolled-back unit (n = 9) left nothing; the other two ran under both work_mems
    assert {n for n, _, _ in seen} == {7, 8}
    assert {iso for n, iso, _ in seen if n == 7} == {"repeatable read"}
    assert {iso for n, iso, _ in seen if n == 8} == {"read committed"}
    assert {wm for _, _, wm in seen} == {"1MB", "2MB"}
    # units of each template, per configuration: the table holds what the trace counts
    # (a unit committed just after the run's end is in the table but not in the trace)
    committed = sum(seen.values())
    in_trace = int(sum(1 for t in trace.template if trace.templates[t] != "s3+s1+s4"))
    assert 0 <= committed - in_trace <= 2
    # a replay that writes is refused unless the workload allows writes
    with pytest.raises(ConfigError, match="the captured workload writes .*set writes: true"):
        make_assignment(WorkloadConfig(kind="replay", files=(str(path),)), fresh_dsn, CONFIGS)


def test_a_read_only_replay_runs_read_only(fresh_dsn: str, tmp_path: Path) -> None:
    # divides by zero (a failed unit) unless read-only with the workload's statement timeout
    path = _replay(tmp_path, [("SELECT 1 / (current_setting('transaction_read_only')::bool AND "
                               "current_setting('statement_timeout') = $1)::int", False)],
                   [[(0, ["5s"])]])
    wl = WorkloadConfig(kind="replay", files=(str(path),), statement_timeout_s=5)
    trace = make_assignment(wl, fresh_dsn, CONFIGS, seed=1).run(1.0)
    assert trace.errors == 0 and trace.templates == ("s0",) and len(trace) > 10


def test_every_arm_issues_the_same_set_local_lines(fresh_dsn: str) -> None:
    """Two arms with identical settings, one naming them and one not, read 1.0: the unnamed
    arm pays the same round trips with ``TO DEFAULT`` (unpadded, a pgbench arm with fewer
    lines read 1.09×, 1.05–1.14, faster by round trips alone)."""
    names = ["work_mem", "random_page_cost", "jit", "enable_hashjoin", "enable_mergejoin",
             "effective_cache_size"]
    with psycopg.connect(fresh_dsn) as conn:
        current = {n: str(conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(n)))
                          .fetchone()[0]) for n in names}  # type: ignore[index]
    configs = [{}, current]
    padded = [[line.as_string() for line in lines] for lines in padded_set_local(configs)]
    assert len(padded[0]) == len(padded[1]) == len(names)
    assert padded[0][0] == 'SET LOCAL "effective_cache_size" TO DEFAULT'
    assert padded[1][0] == \
        f"SET LOCAL \"effective_cache_size\" TO '{current['effective_cache_size']}'"
    run = PgbenchAssignment(fresh_dsn, configs, [Template("select", "SELECT 1;")], clients=2,
                            seed=5)
    trace = run.run(12)
    assert trace.errors == 0 and trace.counts().min() > 1000
    # Not exactly 1: the arm naming values pays their parsing, 0.99× (99 % CI 0.985–0.997)
    # on SELECT 1 in 2 of 3 quiet runs, which failed CI when this asked for 1 in the interval.
    # What padding must hold is no gap the tuner could act on (3 %: the search's settled
    # half-width); the unpadded arm read 1.09× (1.05–1.14) and fails this.
    # The round trips themselves are compared here, so without the wrapper's correction
    # (which subtracts their pooled cost from both arms: on a SELECT 1 body that leaves
    # almost nothing, and the arms' parsing gap reads 0.87×); the run measured that cost
    assert trace.overhead is not None and float(trace.overhead.min()) > 0
    same = compare(dataclasses.replace(trace, overhead=None), 0, 1, level=0.99, seed=5)
    assert same.interval.low <= 1.03 and same.interval.high >= 0.97, same.text()
    # unpadded, the arm naming its six knobs read 0.35× (0.32–0.37) here (six more round
    # trips than SELECT 1's own); padded 0.96× (0.90–1.03) at load 15, 0.94× (0.78–1.13)
    # beside a second pytest worker: the interval must be narrow enough to rule that gap out
    assert same.interval.low > 0.5 and same.interval.high < 2.0, same.text()
