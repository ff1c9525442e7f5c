"""The final race measured per transaction in a real tuning run (PostgreSQL + TPC-H SF 0.01,
standalone): ``measure.design: per-transaction`` races the candidates in one run and the
result names the design, its transactions and its interval."""

from __future__ import annotations

import psycopg
from tune_fixtures import TpchCluster, tpch_cluster  # noqa: F401  (fixture)

from tuner_client.client import connect
from tuner_client.config import parse_tuner_config
from tuner_client.controllers import LocalController
from tuner_client.flows import Tuner
from tuner_client.knobs import KnobCatalog
from tuner_client.phases.final_per_transaction import differing_knobs
from tuner_client.target import Target

CONFIG = """\
name: pertx
seed: 2
workload:
  tpch: {scale: 0.01, mix: "2Q6,1Q13"}
  statement_timeout_s: 60
measure: {warmup_s: 0.3, samples: 1, queries: 10, design: per-transaction, per_transaction_s: 10}
budget: {os_reserved: 256MB, connections: auto, online: 160MB}
offline:
  knobs: {shared_buffers: {min: 128MB, max: 128MB}}
  evaluations: 1
online:
  knobs:
    work_mem: {min: 1MB, max: 32MB}
    random_page_cost: {min: 0.5, max: 8, step: 0.5}
  strategy: {name: nelder-mead, options: {simplex_size: 3}}
  evaluations: 3
flow: {kind: one-pass}
final: {rounds: 1, candidates: 2, max_seconds: 30}
"""


def test_differing_knobs() -> None:
    assert differing_knobs([{"a": "1", "b": "2"}, {"a": "1", "b": "3"}, {"a": "1"}]) == ["b"]


def test_final_race_per_transaction(tpch_cluster: TpchCluster) -> None:  # noqa: F811
    cluster, dsn = tpch_cluster.cluster, tpch_cluster.dsn
    with psycopg.connect(dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    target = Target(dsn=dsn, catalog=catalog, controller=LocalController(cluster), cluster=None,
                    ram_bytes=None)
    config = parse_tuner_config(CONFIG, source="pertx.yaml")
    assert config.measure.design == "per-transaction"
    result = Tuner(config, client=connect(None), target=target, run_id="t1").run()
    decision = result.intervals.decision
    assert decision is not None and decision.design == "per-transaction", result.work.decisions
    summary = decision.to_dict()
    assert summary["observations"] > 50 and summary["method"].startswith("block bootstrap")
    assert summary["rounds"] == 20  # the time slices of the one run
    decisions = "\n".join(result.work.decisions)
    assert "final: final race measured per-transaction" in decisions
    for label, iv in decision.intervals.items():
        assert iv is not None and 0 < iv.low <= iv.ratio <= iv.high, label
