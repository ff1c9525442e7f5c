"""The HTML report's verdict names the design that measured the final comparison and its
observations (issue 27, item 5), as summary.json records them."""

from __future__ import annotations

from typing import Any

from harmony.report import summary_from_json
from harmony.report.verdict import verdict_sentences
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
    race = PerTransactionRace("default", {"best": comparison}, "best", 0.95, {"best": ()},
                              {"best": comparison}, 0.95)
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
