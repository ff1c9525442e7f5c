"""The default path (issue 45): a config without ``measure.design`` meets the precise design
on its own. A server whose original configuration has hash joins off (Q3, Q9 and Q13 merge
or loop instead of hashing at SF 0.01), one session knob searched: the engine measures the
search and the final race per transaction, says so, and recommends hash joins on with an
interval above 1."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import psycopg
import pytest
from tune_fixtures import TpchCluster, tpch_cluster, tune, tune_yaml  # noqa: F401  (fixture)

from tuner_client.phases.decisions import SCHEMA_PATH

ROOT = Path(__file__).resolve().parents[1]

CONFIG = tune_yaml(
    "engine-default", 6, mix="1Q3,1Q9,1Q13", measure="per_transaction_s: 10",
    online="{knobs: {enable_hashjoin: {values: ['on', 'off']}}, strategy: {name: exhaustive}, "
           "evaluations: 2}",
    final="{rounds: 2, max_rounds: 2, close_call_rounds: 2, max_seconds: 30, baselines: []}")


@pytest.fixture
def hash_joins_off(tpch_cluster: TpchCluster) -> Iterator[TpchCluster]:  # noqa: F811
    """The cluster with enable_hashjoin off as its original configuration (put back after)."""
    with psycopg.connect(tpch_cluster.dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET enable_hashjoin = off")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield tpch_cluster
    finally:
        with psycopg.connect(tpch_cluster.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET enable_hashjoin")
            conn.execute("SELECT pg_reload_conf()")


def test_without_measure_design_the_run_measures_per_transaction_and_says_why(
        hash_joins_off: TpchCluster, tmp_path: Path) -> None:
    tuner = tune(hash_joins_off, CONFIG, source="engine-default.yaml", run_id="d1",
                 output_dir=tmp_path)
    assert tuner.config.measure.design == "auto"
    result = tuner.run()
    decisions = "\n".join(result.work.decisions)
    assert result.best.original["enable_hashjoin"] == "off", result.best.original
    online = [r for r in tuner.records if r.session == "p1-online"]
    assert online and all(r.design == "per-transaction" for r in online), decisions
    # the final race: one session knob differs, so the most precise design, said so
    assert "final: the race of default, best by per-transaction, the most precise design " \
           "valid here" in decisions, decisions
    decision = result.intervals.decision
    assert decision is not None and decision.design == "per-transaction", decisions
    assert "the ratio counts queries per second of the streams" in decisions
    # what was raced, by label: the best's hash joins on (what differs from the original)
    assert "final: raced: best {'enable_hashjoin': 'on'}" in decisions, decisions
    # hash joins on: clearly faster than the original's off, recommended on its interval
    assert decision.winner is not None, decisions
    assert result.best.settings["enable_hashjoin"] == "on"
    iv = decision.intervals[decision.winner]
    assert iv is not None and iv.low > 1.0 and iv.ratio > 1.05, iv
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["decision"]["design"] == "per-transaction"
    # the decisions as records under the published schema (issue 53): what was raced, by
    # which design and why, with what interval, without parsing a sentence
    jsonschema.validate(summary, json.loads((ROOT / SCHEMA_PATH).read_text()))
    records = summary["decision_records"]
    assert [r["text"] for r in records] == summary["decisions"]
    chosen = next(r for r in records if r["kind"] == "design" and r["phase"] == "final")
    assert chosen["design"] == "per-transaction" and chosen["labels"] == ["default", "best"]
    verdict = next(r for r in records if r.get("winner") == decision.winner)
    assert verdict["design"] == "per-transaction" and verdict["low"] > 1.0
    # the race as data, slice by slice, for the report's chart
    assert summary["race"]["design"] == "per-transaction"
    assert summary["race"]["unit"] == "slice" and len(summary["race"]["trajectory"]["best"]) > 2
