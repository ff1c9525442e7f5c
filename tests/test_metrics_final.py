"""The tuner's metrics name the design that measured the final comparison, its observations
and its interval (issue 27, item 5)."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harmony_base.errors import ConfigError
from tuner_client.metrics.exporter import TunerMetrics
from tuner_client.stats.decision import decide
from tuner_client.stats.paired import RatioInterval
from tuner_client.stats.per_transaction import PerTransactionComparison
from tuner_client.stats.per_transaction_race import PerTransactionRace


def _scrape(metrics: TunerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(metrics.render().decode())
            for s in family.samples}


def test_windows_decision_exports_design_rounds_and_interval() -> None:
    rounds = [{"default": 100.0, "tuned": 118.0}, {"default": 90.0, "tuned": 107.0},
              {"default": 120.0, "tuned": 140.0}, {"default": 110.0, "tuned": 131.0}]
    decision = decide(rounds, baselines=())
    metrics = TunerMetrics()
    before = _scrape(metrics)
    assert before[("harmony_tuner_final_design_info", (("design", "windows"),))] == 0.0
    metrics.record_final_comparison(decision.to_dict())
    got = _scrape(metrics)
    iv = decision.intervals["tuned"]
    assert iv is not None
    assert got[("harmony_tuner_final_design_info", (("design", "windows"),))] == 1.0
    assert got[("harmony_tuner_final_design_info", (("design", "per-transaction"),))] == 0.0
    assert got[("harmony_tuner_final_observations", (("design", "windows"),))] == 4.0
    assert got[("harmony_tuner_final_ratio", ())] == pytest.approx(iv.ratio)
    assert got[("harmony_tuner_final_ratio_low", ())] == pytest.approx(iv.low)
    assert got[("harmony_tuner_final_ratio_high", ())] == pytest.approx(iv.high)
    assert got[("harmony_tuner_final_interval_half_width_ratio", ())] == \
        pytest.approx(0.5 * math.log(iv.high / iv.low))


def test_per_transaction_decision_exports_its_transactions() -> None:
    def comparison(low: float, high: float) -> PerTransactionComparison:
        return PerTransactionComparison(
            reference=0, candidate=1, interval=RatioInterval(1.04, low, high, 20, 0.95,
                                                             "bootstrap"),
            anytime=None, templates=(), transactions=(1500, 1490), slices=20, slice_s=3.0)
    race = PerTransactionRace(reference="default", comparisons={"best": comparison(1.02, 1.06)},
                              plain={"best": comparison(1.02, 1.06)}, winner="best", level=0.95,
                              plain_level=0.95, system_wide={"best": ()})
    metrics = TunerMetrics()
    metrics.record_final_comparison(race.to_final_decision().to_dict())
    got = _scrape(metrics)
    assert got[("harmony_tuner_final_design_info", (("design", "per-transaction"),))] == 1.0
    assert got[("harmony_tuner_final_design_info", (("design", "windows"),))] == 0.0
    assert got[("harmony_tuner_final_observations", (("design", "per-transaction"),))] == 2990
    assert got[("harmony_tuner_final_interval_half_width_ratio", ())] == \
        pytest.approx(0.5 * math.log(1.06 / 1.02))  # ±1.9 %


def test_an_unbounded_interval_and_an_unknown_design() -> None:
    metrics = TunerMetrics()
    metrics.record_final_comparison({"design": "switchback", "observations": 3, "best": "b",
                                     "winner": None,
                                     "intervals": {"b": {"ratio": 1.1, "low": 0.0,
                                                         "high": None}}})
    got = _scrape(metrics)
    assert got[("harmony_tuner_final_observations", (("design", "switchback"),))] == 3
    assert got[("harmony_tuner_final_ratio_high", ())] == 0.0
    assert math.isinf(got[("harmony_tuner_final_interval_half_width_ratio", ())])
    with pytest.raises(ConfigError, match="final design"):
        metrics.record_final_comparison({"design": "slices"})
