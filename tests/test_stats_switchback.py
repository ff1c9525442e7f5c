"""The switchback analysis on synthetic runs whose truth is known: balanced blocks,
attribution to the starting slice with straddlers dropped, the block comparison recovering
the work-weighted ratio with an anytime-valid interval, and the carry-over's settle time."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from harmony_base.errors import ConfigError
from tuner_client.stats.switchback import (
    SliceSpan,
    attribute,
    balanced_order,
    block_log_speedups,
    compare,
    race,
    totals_from_deltas,
    totals_from_transactions,
)
from tuner_client.stats.switchback_carry import carry_over

COST = np.array([0.01, 0.05])  # per-template mean latency under configuration 0 (s)
FREQ = np.array([0.8, 0.2])


def spans_of(order: list[tuple[int, int]], slice_s: float, gap_s: float = 0.002
             ) -> list[SliceSpan]:
    out, t = [], 0.0
    for block, k in order:
        out.append(SliceSpan(block, k, t + gap_s, t + gap_s + slice_s))
        t += gap_s + slice_s
    return out


def closed_loop(spans: list[SliceSpan], speed: dict[int, float], seed: int, *,
                streams: int = 4, carry_s: float = 0.0, drift_sd: float = 0.02
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(template, start, latency, ok) of ``streams`` closed-loop clients; a transaction's
    latency is its template's cost × the machine's drift × lognormal noise / the speed of
    the configuration in force when it starts (the previous one within ``carry_s`` of a
    switch)."""
    rng = np.random.default_rng(seed)
    end = spans[-1].end + 0.5
    level = np.exp(np.cumsum(rng.normal(0, drift_sd, int(end) + 2)))
    begins = np.array([s.begin for s in spans])
    rows = []
    for _ in range(streams):
        t = rng.uniform(0, 0.01)
        while t < end:
            i = max(0, int(np.searchsorted(begins, t, side="right")) - 1)
            k = spans[i].config
            if i > 0 and t - spans[i].begin < carry_s:
                k = spans[i - 1].config
            tpl = int(rng.choice(2, p=FREQ))
            lat = COST[tpl] * level[int(t)] * rng.lognormal(-0.18, 0.6) / speed[k]
            rows.append((tpl, t, lat))
            t += lat
    arr = np.array(rows)
    return arr[:, 0].astype(int), arr[:, 1], arr[:, 2], np.ones(len(rows), dtype=bool)


def test_balanced_order_holds_each_configuration_once_per_block() -> None:
    order = balanced_order(3, 40, seed=1)
    assert len(order) == 120
    for block in range(40):
        assert sorted(k for b, k in order if b == block) == [0, 1, 2]
    firsts = Counter(k for i, (_, k) in enumerate(order) if i % 3 == 0)
    assert all(5 <= firsts[k] <= 25 for k in range(3))  # the order is drawn, not fixed
    assert balanced_order(3, 40, seed=1) == order != balanced_order(3, 40, seed=2)
    with pytest.raises(ConfigError, match="at least 2 configurations"):
        balanced_order(1, 3)


def test_attribution_drops_straddlers_settling_and_between() -> None:
    spans = [SliceSpan(0, 0, 0.0, 1.0), SliceSpan(0, 1, 1.01, 2.0)]
    start = np.array([0.05, 0.20, 0.90, 1.005, 1.02, 1.20, 1.50, 1.95, 2.5])
    latency = np.array([0.01, 0.10, 0.20, 0.001, 0.01, 0.10, 0.10, 0.10, 0.1])
    ok = np.ones(start.size, dtype=bool)
    ok[6] = False
    where, dropped = attribute(spans, start, latency, ok, settle_s=0.1)
    assert where.tolist() == [-1, 0, -1, -1, -1, 1, -1, -1, -1]
    assert dropped == {"straddling": 2, "settling": 2, "between": 2, "failed": 1}
    with pytest.raises(ConfigError, match="ordered and disjoint"):
        attribute(spans[::-1], start, latency, ok, settle_s=0.1)


@pytest.mark.parametrize("true", [1.0, 1.10, 0.80])
def test_compare_recovers_the_speedup(true: float) -> None:
    spans = spans_of(balanced_order(2, 20, seed=3), 2.0)
    template, start, latency, ok = closed_loop(spans, {0: 1.0, 1: true}, seed=4)
    totals = totals_from_transactions(spans, template, start, latency, ok, settle_s=0.05)
    result = compare(totals, 0, 1)
    assert result.blocks == 20 and result.interval.method == "anytime"
    assert result.interval.low < true < result.interval.high
    assert abs(math.log(result.interval.ratio / true)) < 0.03
    assert result.half_width < 0.06
    # every switch but the last ends while 4 clients are in a transaction
    assert 4 * 39 <= totals.dropped["straddling"] <= 4 * 40


def test_aa_coverage_over_synthetic_runs() -> None:
    misses = 0
    for seed in range(40):
        spans = spans_of(balanced_order(2, 10, seed=seed), 1.0)
        template, start, latency, ok = closed_loop(spans, {0: 1.0, 1: 1.0}, seed=seed,
                                                   streams=2, drift_sd=0.05)
        interval = compare(totals_from_transactions(spans, template, start, latency, ok,
                                                    settle_s=0.05)).interval
        misses += not interval.low < 1.0 < interval.high
    assert misses <= 2  # nominal 5 %; the confidence sequence is conservative at fixed n


def test_race_picks_the_faster_candidate_and_says_how() -> None:
    spans = spans_of(balanced_order(3, 12, seed=5), 2.0)
    template, start, latency, ok = closed_loop(spans, {0: 1.0, 1: 1.25, 2: 0.9}, seed=6)
    totals = totals_from_transactions(spans, template, start, latency, ok, settle_s=0.05)
    result = race(totals, ["default", "best", "pgtune"], slice_s=2.0, settle_s=0.05)
    assert result.winner == "best"
    assert result.comparisons["pgtune"].interval.below_one
    decision = result.to_final_decision().to_dict()
    assert decision["design"] == "switchback" and decision["rounds"] == 12
    assert decision["observations"] == 12 and decision["winner"] == "best"
    assert "36 slices of 2 s" in decision["text"][1] and "straddling" in decision["text"][1]


def test_counter_deltas_weigh_statements_by_the_reference_work() -> None:
    spans = spans_of(balanced_order(2, 6, seed=7), 2.0)
    # statement a is 10 % faster under 1, b is as fast; the mix of calls differs by slice
    deltas = []
    for i, span in enumerate(spans):
        calls_a, calls_b = 100 + 10 * (i % 3), 50
        speed = 1.1 if span.config == 1 else 1.0
        deltas.append({"a": (calls_a, calls_a * 0.004 / speed), "b": (calls_b, calls_b * 0.002)})
    logs = block_log_speedups(totals_from_deltas(spans, deltas), 0, 1)
    work_a = 0.004 * 110 / (0.004 * 110 + 0.002 * 50)
    expected = -math.log(work_a / 1.1 + (1 - work_a))
    assert logs.size == 6 and np.allclose(logs, expected, atol=0.01)
    with pytest.raises(ConfigError, match="one counter delta per slice"):
        totals_from_deltas(spans, deltas[:-1])


def test_carry_over_settle_time_is_found() -> None:
    spans = spans_of(balanced_order(2, 30, seed=8), 2.0)
    template, start, latency, ok = closed_loop(spans, {0: 1.0, 1: 1.5}, seed=9,
                                               carry_s=0.6, drift_sd=0.0)
    found = carry_over(spans, template, start, latency, ok, bin_s=0.2)
    assert found.effect == pytest.approx(math.log(1.5), abs=0.05)
    assert 0.6 <= found.settle_s <= 0.8
    assert all(m > 0 for t, m, _, _ in found.profile if t < 0.6)  # toward the previous one
    template, start, latency, ok = closed_loop(spans, {0: 1.0, 1: 1.5}, seed=9, drift_sd=0.0)
    assert carry_over(spans, template, start, latency, ok, bin_s=0.2).settle_s <= 0.2
