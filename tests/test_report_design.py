"""The HTML report's verdict names the design that measured the final comparison and its
observations (issue 27, item 5), as summary.json records them."""

from __future__ import annotations

from typing import Any

from harmony_report import summary_from_json
from harmony_report.verdict import verdict_sentences
from tuner_client.stats.decision import FinalDecision, decide
from tuner_client.stats.paired import RatioInterval
from tuner_client.stats.per_transaction import PerTransactionComparison
from tuner_client.stats.per_transaction_race import PerTransactionRace


def _summary(decision: FinalDecision, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    return {"decision": decision.to_dict(), "improvement": decision.improvement,
            "improvement_ci": list(decision.improvement_ci) if decision.improvement_ci
            else None, "ab_rounds": rounds, "default_qpm": None, "best_qpm": None}


def test_a_per_transaction_decision_is_worded_with_its_transactions() -> None:
    comparison = PerTransactionComparison(
        reference=0, candidate=1, interval=RatioInterval(1.04, 1.02, 1.06, 20, 0.95,
                                                         "bootstrap"),
        anytime=None, templates=(), transactions=(1500, 1490), slices=20, slice_s=3.0)
    race = PerTransactionRace(reference="default", comparisons={"best": comparison},
                              plain={"best": comparison}, winner="best", level=0.95,
                              plain_level=0.95, system_wide={"best": ()})
    words = verdict_sentences(summary_from_json(_summary(race.to_final_decision(), [])), None)
    assert words[-1] == ("In words: tuned measured +4.0% (95 % CI +2.0% to +6.0%) against the "
                         "default in one per-transaction run (2,990 transactions in 20 time "
                         "slices, each transaction drawing one configuration at random), so it "
                         "is recommended.")
    assert any(line.startswith("Final race measured per-transaction") for line in words)


def test_a_windows_decision_is_worded_with_its_rounds() -> None:
    rounds = [{"default": 100.0, "tuned": 101.0}, {"default": 90.0, "tuned": 89.0},
              {"default": 120.0, "tuned": 121.0}]
    summary = summary_from_json(_summary(decide(rounds, baselines=()), rounds))
    words = verdict_sentences(summary, None)
    assert words[-1] == ("In words: none of the 1 configurations raced measured clearly "
                         "better than the default over 3 interleaved rounds in whole-server "
                         "windows, so the original configuration is kept.")
    assert "paired rounds in windows" in words[1]


def test_a_split_decision_is_worded_with_both_parts() -> None:
    whole = RatioInterval(1.155, 1.07, 1.24, 4008, 0.95, "anytime")
    decision = FinalDecision(
        winner="tuned", reference="default", best="tuned", intervals={"tuned": whole},
        unstable={}, lines=("recommending {'work_mem': '64MB'}: 1.16× the original",),
        rounds=8, level=0.95, decision_level=0.95, improvement=0.155,
        improvement_ci=(0.07, 0.24), design="split", transactions=(2000, 2000))
    words = verdict_sentences(summary_from_json(_summary(decision, [])), None)
    assert words[-1] == ("In words: tuned measured +15.5% (95 % anytime-valid CI +7.0% to "
                         "+24.0%) against the default in two parts: the session-settable knobs "
                         "in one run drawing a configuration per transaction (4,000 "
                         "transactions) at the original's restart-time settings, then the "
                         "restart-time knobs over 8 interleaved rounds in whole-server windows "
                         "on top of the part chosen, so it is recommended."), words[-1]
