"""What `harmony tune` prints: the verdict with its interval first, then the configuration."""

from __future__ import annotations

from dataclasses import replace

from tuner_client.cli.tune_run import format_result
from tuner_client.measurer import objective_unit
from tuner_client.phases.result import Best, Intervals, RunStatus, Throughput, TuneResult, Work
from tuner_client.stats.decision import FinalDecision


def _result(winner: bool) -> TuneResult:
    text = (["recommending tuned: tuned/default 1.18× (95 % CI 1.07–1.30) over 4 rounds"]
            if winner else ["no significant improvement; keeping the original (default)",
                            "  best candidate tuned/default 1.03× (95 % CI 0.97–1.10) over 6 "
                            "rounds: the interval includes 1"])
    decision = FinalDecision(winner="best" if winner else None, reference="default",
                             best="best", intervals={}, unstable={}, lines=tuple(text),
                             rounds=4, level=0.95, decision_level=0.95,
                             improvement=0.18 if winner else 0.0,
                             improvement_ci=(0.07, 0.30) if winner else None)
    best = Best({"work_mem": "8MB" if winner else "4MB"}, {"work_mem": "4MB"},
                Throughput(default=100.0, best=118.0 if winner else 100.0))
    return TuneResult.conclude(best, Intervals([{}] * 4, decision), Work(passes=1, evaluations=5))


def test_a_recommendation_prints_its_interval() -> None:
    lines = format_result(_result(True)).splitlines()
    assert lines[1] == ("result: recommending tuned: tuned/default 1.18× (95 % CI 1.07–1.30) "
                        "over 4 rounds")
    assert "work_mem = 8MB   (default 4MB)" in "\n".join(lines)
    assert lines[-1].endswith("(+18.0%, 95 % anytime-valid CI +7.0% to +30.0%)")
    result = _result(True)
    assert result.status is RunStatus.IMPROVED and result.message.startswith("recommending tuned")


def test_no_significant_improvement_keeps_the_original_and_says_why() -> None:
    out = format_result(_result(False))
    assert "result: no significant improvement; keeping the original (default)" in out
    assert "the interval includes 1" in out
    assert "recommended configuration: the original (no significant improvement)" in out
    assert out.splitlines()[-1].endswith("(+0.0%)")
    assert _result(False).status is RunStatus.KEPT_ORIGINAL
    undecided = TuneResult.conclude(_result(False).best, Intervals([{}]), Work(1, 5))
    assert undecided.status is RunStatus.UNDECIDED and undecided.improvement == 0.0


def test_the_comparison_is_printed_in_the_estimators_unit() -> None:
    assert objective_unit("count", "tpch") == "queries/min"
    assert objective_unit("count", "scripts") == "transactions/min"
    assert objective_unit("count_per_cpu", "pgbench") == "transactions/min per server CPU"
    assert objective_unit("work", "replay") == "reference-cost seconds/s"
    tuned = _result(True)
    live = replace(tuned, best=replace(tuned.best, throughput=Throughput(
        default=0.996, best=1.083, unit=objective_unit("latency", "observe"))))
    last = format_result(live).splitlines()[-1]
    assert "0.996 -> 1.08 x the original's speed (+18.0%" in last, last
    assert "queries/min" not in format_result(live)
    assert "100.0 -> 118.0 queries/min" in format_result(_result(True))


def test_the_summary_keeps_its_keys_and_values() -> None:
    """summary.json is read by reports and scripts: its layout does not change."""
    summary = _result(True).to_dict()
    assert list(summary) == [
        "best_settings", "default_settings", "best_qpm", "default_qpm", "recommended_qpm",
        "search_best_qpm", "improvement", "improvement_ci", "decision", "ab_rounds", "passes",
        "evaluations", "decisions", "interrupted", "comparison", "bme", "sessions",
        "screening", "guardrails", "decision_records"]
    assert summary["best_settings"] == {"work_mem": "8MB"}
    assert summary["default_settings"] == {"work_mem": "4MB"}
    assert (summary["best_qpm"], summary["default_qpm"]) == (118.0, 100.0)
    assert summary["improvement"] == 0.18 and summary["improvement_ci"] == [0.07, 0.30]
    assert summary["decision"]["winner"] == "best" and summary["decision"]["rounds"] == 4
    assert summary["comparison"] == {"default": 100.0, "tuned": 118.0, "unit": "queries/min"}
    assert summary["interrupted"] is False and summary["guardrails"] is None
    assert (summary["passes"], summary["evaluations"], len(summary["ab_rounds"])) == (1, 5, 4)
