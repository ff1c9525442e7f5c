"""The final race measured per transaction in a real tuning run (PostgreSQL + TPC-H SF 0.01,
standalone): ``measure.design: per-transaction`` races the candidates in one run and the
result names the design, its transactions and its interval, and the reference's drift over
the run's slices is a record of its own."""

from __future__ import annotations

from tune_fixtures import TpchCluster, tpch_cluster, tune, tune_yaml  # noqa: F401  (fixture)

from tuner_client.engine.designs import differing_knobs
from tuner_client.phases.decisions import Kind

CONFIG = tune_yaml(
    "pertx", 2, mix="2Q6,1Q13", measure="design: per-transaction, per_transaction_s: 10",
    online="{knobs: {work_mem: {min: 1MB, max: 32MB}, random_page_cost: {min: 0.5, max: 8, "
           "step: 0.5}}, strategy: {name: nelder-mead, options: {simplex_size: 3}}, "
           "evaluations: 3}",
    final="{rounds: 1, candidates: 2, max_seconds: 30}")


def test_differing_knobs() -> None:
    assert differing_knobs([{"a": "1", "b": "2"}, {"a": "1", "b": "3"}, {"a": "1"}]) == ["b"]


def test_final_race_per_transaction(tpch_cluster: TpchCluster) -> None:  # noqa: F811
    tuner = tune(tpch_cluster, CONFIG, source="pertx.yaml", run_id="t1")
    assert tuner.config.measure.design == "per-transaction"
    result = tuner.run()
    decision = result.intervals.decision
    assert decision is not None and decision.design == "per-transaction", result.work.decisions
    summary = decision.to_dict()
    assert summary["observations"] > 50 and summary["method"].startswith("block bootstrap")
    assert summary["rounds"] == 20  # the time slices of the one run
    decisions = "\n".join(result.work.decisions)
    assert "final: final race measured per-transaction" in decisions
    for label, iv in decision.intervals.items():
        assert iv is not None and 0 < iv.low <= iv.ratio <= iv.high, label
    # the reference's own level over the run's slices, said after the race (issue 51, item 5)
    drift = [r for r in tuner.state.decision_records
             if r.kind is Kind.DRIFT and r.design == "per-transaction"]
    assert len(drift) == 1 and drift[0].labels == (decision.reference,), decisions
    assert drift[0].reason in ("moved", "steady") and 15 <= (drift[0].rounds or 0) <= 20
