"""The final race in two stages (``final.restart_part: together`` when the candidates differ
in a restart-time knob): the searched candidates that share the best's shared_buffers are
chosen between in one per-transaction run, and only that one races the original (and PGTune's
rules) in windows, the Bonferroni split counting both stages. A candidate with another
shared_buffers races too only when the search ranks it within noise of the best."""

from __future__ import annotations

import math

import pytest
from tune_fixtures import TpchCluster, tpch_cluster, tune, tune_yaml  # noqa: F401  (fixture)

from tuner_client.measurer import PointRecord
from tuner_client.phases.final_narrow import search_noise, within_noise
from tuner_client.stats.noise import POINT_CV_20S

# the offline pass measures only 64MB (the original is 128MB): every searched candidate has
# shared_buffers 64MB, the original and PGTune's rules do not
CONFIG = tune_yaml(
    "two-stage", 5, mix="2Q6,1Q13",
    measure="design: per-transaction, per_transaction_s: 10, clone: false",
    offline="{knobs: {shared_buffers: {min: 64MB, max: 64MB}}, evaluations: 1}",
    online="{knobs: {work_mem: {min: 1MB, max: 32MB}, random_page_cost: {min: 0.5, max: 8, "
           "step: 0.5}}, strategy: {name: nelder-mead, options: {simplex_size: 3}}, "
           "evaluations: 3}",
    final="{rounds: 2, max_rounds: 2, close_call_rounds: 2, candidates: 3, max_seconds: 30, "
          "restart_part: together}",
    extra="bme: {probes: 0}\n")

ORIGINAL = {"shared_buffers": "128MB", "work_mem": "4MB"}


def _record(value: float, reference: tuple[float, float], **settings: str) -> PointRecord:
    return PointRecord(session="p1-offline", point={}, settings=dict(settings),
                       in_force={**ORIGINAL, **settings}, value=value, reference=list(reference))


def test_within_noise_uses_the_references_repeats() -> None:
    # references drifting ±5 % around their candidates: log(after/before) = ±0.05 (sd 0.0577)
    refs = [(100.0, 100.0 * math.exp(d)) for d in (0.05, -0.05, 0.05, -0.05)]
    records = [_record(110.0, refs[0], shared_buffers="64MB"),
               _record(106.0, refs[1], shared_buffers="64MB"),
               _record(104.0, refs[2], shared_buffers="256MB"),
               _record(80.0, refs[3], shared_buffers="32MB")]
    noise, blocks = search_noise(records)
    assert blocks == 4 and noise == pytest.approx(0.0577 / math.sqrt(2), rel=1e-2)
    best = {"shared_buffers": "64MB", "work_mem": "4MB"}
    near = within_noise(records, ORIGINAL, best, {"shared_buffers": "256MB", "work_mem": "4MB"})
    assert near is not None and near.ratio == pytest.approx(104 / 108)
    # z·σ·√(1/2 + 1/1) = 1.96 · 0.0408 · 1.22 = 0.098: 0.963× is within, 0.741× is not
    assert near.allowed == pytest.approx(1.96 * noise * math.sqrt(1.5), rel=1e-3)
    assert near.within and "0.96× the best" in near.text()
    far = within_noise(records, ORIGINAL, best, {"shared_buffers": "32MB", "work_mem": "4MB"})
    assert far is not None and not far.within
    assert within_noise(records, ORIGINAL, best, {"shared_buffers": "1GB", "work_mem": "4MB"}) \
        is None  # never measured
    # without two reference repeats the noise model's 20-s point CV stands in, said so
    assert search_noise(records[:1]) == (POINT_CV_20S, 0)


def test_final_race_in_two_stages(tpch_cluster: TpchCluster) -> None:  # noqa: F811
    result = tune(tpch_cluster, CONFIG, source="two-stage.yaml", run_id="t2").run()
    decisions = "\n".join(result.work.decisions)
    decision = result.intervals.decision
    assert decision is not None and decision.design == "windows", decisions
    assert "final: not one per-transaction run for every candidate: shared_buffers " \
           "('postmaster') differs: SET LOCAL needs the pg_settings context" in decisions, decisions
    stage1 = [d for d in result.work.decisions if d.startswith("final: stage 1: ")]
    group = 1 + len(stage1)
    assert group >= 2, decisions  # the best and at least one runner-up, all at 64MB
    for line in stage1:  # each candidate/best with its interval and observations
        assert "× (" in line and "CI" in line and "per transaction: " in line and \
            " transactions in " in line, line
    chosen_line = next(d for d in result.work.decisions if d.startswith("final: stage 1 chose "))
    chosen = chosen_line.split()[4]
    assert f"also counts the {group - 1} compared here" in chosen_line
    # the windows race held the original, the eligible baselines and the chosen one only
    racing = [k for k in decision.intervals if k not in decision.baselines]
    assert chosen in racing and set(racing) <= {chosen, "pgtune"}, racing
    assert {k for row in result.intervals.rounds for k in row} <= \
        {"default", "pgtune", "recommended", "tuned", chosen}
    # Bonferroni over every candidate compared in either stage
    m = len(racing) + group - 1
    assert decision.decision_level == pytest.approx(1 - 0.05 / m)
    assert f"rounds in whole-server windows of default, {chosen}" in decisions
    for label, iv in decision.intervals.items():
        assert iv is not None and iv.n == decision.rounds == 2, label
