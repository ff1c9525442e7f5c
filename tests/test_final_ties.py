"""On a tie the race recommends the configuration that commits less memory
(:mod:`tuner_client.phases.final_ties`), with the numbers of capture.s35's fifth run: PGTune's
rules (work_mem 753MB) read 1.22x (1.14-1.32) and the search's best (work_mem 35MB) 1.21x
(1.15-1.28), both above 1, each inside the other's interval; pgbench read the two within 2 %."""

from __future__ import annotations

from collections.abc import Mapping

from tuner_client.phases.decisions import Decision
from tuner_client.phases.final_ties import lighter_on_tie, tied
from tuner_client.stats.paired import RatioInterval
from tuner_client.stats.per_transaction import PerTransactionComparison
from tuner_client.stats.per_transaction_race import PerTransactionRace

MIB = 2**20
CONFIGS = {"default": {"work_mem": "128MB"}, "best": {"work_mem": "35MB"},
           "pgtune": {"work_mem": "753MB"}, "small": {"work_mem": "1MB"}}


def _comparison(k: int, ratio: float, low: float, high: float) -> PerTransactionComparison:
    return PerTransactionComparison(0, k, RatioInterval(ratio, low, high, 20, 0.975, "bootstrap"),
                                    None, (), (30_000, 34_000), 20, 6.0)


def _race(intervals: Mapping[str, tuple[float, float, float]]) -> PerTransactionRace:
    comparisons = {label: _comparison(k, *iv) for k, (label, iv) in
                   enumerate(intervals.items(), 1)}
    clear = [label for label, c in comparisons.items() if c.interval.above_one]
    winner = max(clear, key=lambda label: comparisons[label].interval.ratio, default=None)
    return PerTransactionRace("default", comparisons, comparisons, winner, 0.975, 0.95,
                              {label: () for label in intervals})


def _slack(settings: Mapping[str, str]) -> int:
    """A 24 GB budget less work_mem for 100 connections (what the tuner's formula does in
    kind)."""
    return 24 * 1024 * MIB - 100 * int(settings["work_mem"].removesuffix("MB")) * MIB


def test_a_tie_recommends_the_candidate_that_leaves_more_memory() -> None:
    race = _race({"best": (1.21, 1.15, 1.28), "pgtune": (1.22, 1.14, 1.32)})
    assert race.winner == "pgtune" and tied(race) == ["pgtune", "best"]
    said: list[Decision] = []
    chosen = lighter_on_tie(race, CONFIGS, _slack, said.append)
    assert chosen is not None and chosen.winner == "best"
    # the claim is the chosen candidate's own simultaneous interval, above 1 as the other's
    decision = chosen.to_final_decision()
    assert decision is not None and decision.winner == "best"
    assert decision.improvement_ci is not None and decision.improvement_ci[0] > 0.14
    assert chosen.verdict().startswith("recommend best: 1.21×")
    assert len(said) == 1
    text = said[0].text
    assert text.startswith("final: best (1.21×) ties pgtune (1.22×") and "recommending best" in text
    assert f"leaves {(_slack(CONFIGS['best'])) / MIB:,.0f} MiB" in text
    assert f"against {(_slack(CONFIGS['pgtune'])) / MIB:,.0f} MiB" in text


def test_no_tie_no_change() -> None:
    """capture.s35's second run: best 1.24x lies below PGTune's 1.25-1.30, so PGTune's rules
    stay the winner; a candidate that does not clear 1 never ties; nor does a lighter one
    whose ratio lies above the winner's interval (it would have won)."""
    for intervals in ({"best": (1.24, 1.21, 1.27), "pgtune": (1.27, 1.25, 1.30)},
                      {"small": (1.20, 0.98, 1.45), "pgtune": (1.22, 1.14, 1.32)}):
        race = _race(intervals)
        said: list[Decision] = []
        assert lighter_on_tie(race, CONFIGS, _slack, said.append) is race and not said
        assert tied(race) == ["pgtune"]


def test_the_lighter_winner_stays_and_an_unreadable_budget_changes_nothing() -> None:
    race = _race({"best": (1.23, 1.14, 1.33), "pgtune": (1.22, 1.14, 1.32)})
    assert race.winner == "best" and tied(race) == ["best", "pgtune"]
    said: list[Decision] = []
    assert lighter_on_tie(race, CONFIGS, _slack, said.append) is race and not said
    heavy_wins = _race({"best": (1.21, 1.15, 1.28), "pgtune": (1.22, 1.14, 1.32)})
    assert lighter_on_tie(heavy_wins, CONFIGS, lambda s: None, said.append) is heavy_wins
    assert not said
    # no winner: nothing to tie
    none = _race({"best": (1.02, 0.95, 1.10)})
    assert none.winner is None and lighter_on_tie(none, CONFIGS, _slack, said.append) is none
