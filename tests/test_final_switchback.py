"""The final race by switchback in a real tuning run (PostgreSQL + TPC-H SF 0.01, standalone):
with ``measure.design: per-transaction`` and a reload-time knob without memory
(wal_writer_delay, context sighup) differing between the candidates, SET LOCAL cannot
carry it, so the race alternates the configurations in slices (no PGTune baseline: it
changes shared_buffers, a restart); the result names the design, its blocks and its
interval. (bgwriter_delay, raced here before, is a knob with memory now: switchback refuses
it.)"""

from __future__ import annotations

import pytest
from tune_fixtures import TpchCluster, tpch_cluster, tune, tune_yaml  # noqa: F401  (fixture)

from harmony_base.errors import ConfigError
from tuner_client.config import parse_tuner_config
from tuner_client.config.defaults import DEFAULT_SLICE_S

CONFIG = tune_yaml(
    "switchback", 3, mix="2Q6,1Q13",
    measure="design: per-transaction, slice_s: 1, per_transaction_s: 10",
    online="{knobs: {wal_writer_delay: {min: 10ms, max: 2000ms, step: 10ms}}, "
           "strategy: {name: nelder-mead, options: {simplex_size: 3}}, evaluations: 3}",
    final="{rounds: 1, candidates: 2, max_seconds: 30, baselines: []}")


def test_final_race_by_switchback(tpch_cluster: TpchCluster) -> None:  # noqa: F811
    tuner = tune(tpch_cluster, CONFIG, source="switchback.yaml", run_id="t1")
    assert tuner.config.measure.slice_s == 1.0
    result = tuner.run()
    decision = result.intervals.decision
    decisions = "\n".join(result.work.decisions)
    assert decision is not None and decision.design == "switchback", decisions
    assert "by switchback (measure.design: per-transaction); not per-transaction: " \
           "wal_writer_delay ('sighup') differs: SET LOCAL needs the pg_settings context 'user' " \
           "or 'superuser'" in decisions, decisions
    summary = decision.to_dict()
    labels = len(decision.intervals) + 1
    # the planned blocks, less any whose slices kept no query (a TPC-H query may outlast a
    # whole 1-s slice on a loaded machine, so that none starts in it)
    assert 4 <= summary["rounds"] <= max(4, 30 // labels) and \
        summary["rounds"] == summary["observations"]
    # a driven switchback runs every block it planned: the end's t interval (stats/horizon)
    assert summary["method"].startswith("Student t read once at the race's time limit")
    assert f"{max(4, 30 // labels) * labels} slices of 1 s" in decisions
    for label, iv in decision.intervals.items():
        assert iv is not None and iv.method == "t" and iv.n == summary["rounds"], label
        assert 0 < iv.low <= iv.ratio <= iv.high, label


def test_switchback_design_and_slice_length_are_parsed_and_checked() -> None:
    config = parse_tuner_config(CONFIG.replace("design: per-transaction, slice_s: 1",
                                               "design: switchback"), source="s.yaml")
    assert config.measure.design == "switchback" and config.measure.slice_s == DEFAULT_SLICE_S
    with pytest.raises(ConfigError, match="slice_s"):
        parse_tuner_config(CONFIG.replace("slice_s: 1", "slice_s: 0.1"), source="s.yaml")
    with pytest.raises(ConfigError, match="design"):
        parse_tuner_config(CONFIG.replace("design: per-transaction", "design: slices"),
                           source="s.yaml")
