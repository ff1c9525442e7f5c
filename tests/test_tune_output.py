"""What `harmony tune` prints: the verdict with its interval first, then the configuration."""

from __future__ import annotations

from dataclasses import replace

from tuner_client.measurer import objective_unit
from tuner_client.phases.result import TuneResult
from tuner_client.tune_cli import format_result


def _result(winner: bool) -> TuneResult:
    text = (["recommending tuned: tuned/default 1.18× (95 % CI 1.07–1.30) over 4 rounds"]
            if winner else ["no significant improvement; keeping the original (default)",
                            "  best candidate tuned/default 1.03× (95 % CI 0.97–1.10) over 6 "
                            "rounds: the interval includes 1"])
    return TuneResult(best_settings={"work_mem": "8MB" if winner else "4MB"},
                      default_settings={"work_mem": "4MB"},
                      best_qpm=118.0 if winner else 100.0, default_qpm=100.0,
                      ab_rounds=[{}] * 4, passes=1, evaluations=5, output_dir=None,
                      decision={"text": text, "winner": "best" if winner else None},
                      paired_improvement=0.18 if winner else 0.0,
                      improvement_ci=(0.07, 0.30) if winner else None)


def test_a_recommendation_prints_its_interval() -> None:
    lines = format_result(_result(True)).splitlines()
    assert lines[1] == ("result: recommending tuned: tuned/default 1.18× (95 % CI 1.07–1.30) "
                        "over 4 rounds")
    assert "work_mem = 8MB   (default 4MB)" in "\n".join(lines)
    assert lines[-1].endswith("(+18.0%, 95 % CI +7.0% to +30.0%)")


def test_no_significant_improvement_keeps_the_original_and_says_why() -> None:
    out = format_result(_result(False))
    assert "result: no significant improvement; keeping the original (default)" in out
    assert "the interval includes 1" in out
    assert "recommended configuration: the original (no significant improvement)" in out
    assert out.splitlines()[-1].endswith("(+0.0%)")


def test_the_comparison_is_printed_in_the_estimators_unit() -> None:
    assert objective_unit("count", "tpch") == "queries/min"
    assert objective_unit("count", "scripts") == "transactions/min"
    assert objective_unit("count_per_cpu", "pgbench") == "transactions/min per server CPU"
    assert objective_unit("work", "replay") == "reference-cost seconds/s"
    live = replace(_result(True), best_qpm=1.083, default_qpm=0.996,
                   comparison={"default": 0.996, "tuned": 1.083,
                               "unit": objective_unit("latency", "observe")})
    last = format_result(live).splitlines()[-1]
    assert "0.996 -> 1.08 x the original's speed (+18.0%" in last, last
    assert "queries/min" not in format_result(live)
    assert "100.0 -> 118.0 queries/min" in format_result(_result(True))
