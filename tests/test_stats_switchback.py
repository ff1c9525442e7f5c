"""The switchback analysis on synthetic runs whose truth is known: balanced blocks,
attribution to the starting slice (transactions that run past a switch carried, not dropped:
dropping them biased the ratio towards the slower configuration), the block comparison
recovering the work-weighted ratio with an anytime-valid interval, and the carry-over's
settle time."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from harmony_base.errors import ConfigError
from tuner_client.stats.estimand import Estimand
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


def test_attribution_carries_straddlers_and_drops_settling_and_between() -> None:
    spans = [SliceSpan(0, 0, 0.0, 1.0), SliceSpan(0, 1, 1.01, 2.0)]
    start = np.array([0.05, 0.20, 0.90, 1.005, 1.02, 1.20, 1.50, 1.95, 2.5])
    latency = np.array([0.01, 0.10, 0.20, 0.001, 0.01, 0.10, 0.10, 0.10, 0.1])
    ok = np.ones(start.size, dtype=bool)
    ok[6] = False
    where, dropped, carried = attribute(spans, start, latency, ok, settle_s=0.1)
    # 0.90 + 0.20 and 1.95 + 0.10 run past their slice's end: kept in the slice they began in
    assert where.tolist() == [-1, 0, 0, -1, -1, 1, -1, 1, -1]
    assert dropped == {"settling": 2, "between": 2, "failed": 1} and carried == 2
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
    assert result.half_width < 0.07
    # every planned block ran: the end's t interval, on the same blocks, ~0.6 as wide
    ended = compare(totals, 0, 1, ended=True)
    assert ended.interval.method == "t" and ended.interval.ratio == result.interval.ratio
    assert ended.interval.low < true < ended.interval.high
    assert ended.half_width < 0.7 * result.half_width
    # every switch but the last ends while 4 clients are in a transaction: carried, kept
    assert 4 * 39 <= totals.carried <= 4 * 40 and "straddling" not in totals.dropped


def test_aa_coverage_over_synthetic_runs() -> None:
    misses = ended_misses = 0
    for seed in range(40):
        spans = spans_of(balanced_order(2, 10, seed=seed), 1.0)
        template, start, latency, ok = closed_loop(spans, {0: 1.0, 1: 1.0}, seed=seed,
                                                   streams=2, drift_sd=0.05)
        totals = totals_from_transactions(spans, template, start, latency, ok, settle_s=0.05)
        interval = compare(totals).interval
        misses += not interval.low < 1.0 < interval.high
        ended = compare(totals, ended=True).interval
        ended_misses += not ended.low < 1.0 < ended.high
    assert misses <= 2  # nominal 1 %; the confidence sequence is conservative at fixed n
    assert ended_misses <= 4  # nominal 4 %: the end's t interval, 1.6 of 40 expected


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
    assert "36 slices of 2 s" in decision["text"][1]
    assert f"{totals.carried} carried past a switch, kept in the slice they started in" \
        in decision["text"][1]
    assert result.summary()["carried"] == totals.carried > 0


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


def test_carrying_straddlers_removes_the_length_bias_of_dropping_them() -> None:
    """A mix of 2-ms lookups (85 %) and long reports (15 %, lognormal, 0.5 s under the
    reference, twice as fast under the candidate), 4 clients, 200 blocks of 3-s slices: the
    true throughput ratio of a closed loop is Σ p·t(A) / Σ p·t(B) = 1.96. A report straddles
    a switch almost twice as often under the reference, and the ones that do are its longest:
    dropping them prices the reference's reports at its shorter runs and reads 1.73×, its
    interval excluding the truth; keeping them in the slice they started in recovers it
    (1.86×, 1.75–1.99)."""
    freq, cost = np.array([0.85, 0.15]), np.array([0.002, 0.5])
    speed = {0: np.array([1.0, 1.0]), 1: np.array([1.0, 2.0])}
    true = float(freq @ cost / (freq @ (cost / speed[1])))
    spans = spans_of(balanced_order(2, 200, seed=11), 3.0)
    rng = np.random.default_rng(13)
    begins = np.array([s.begin for s in spans])
    rows = []
    for _ in range(4):
        t = rng.uniform(0, 0.01)
        while t < spans[-1].end + 0.5:
            i = max(0, int(np.searchsorted(begins, t, side="right")) - 1)
            tpl = int(rng.choice(2, p=freq))
            lat = cost[tpl] * rng.lognormal(-0.32, 0.8) / speed[spans[i].config][tpl]
            rows.append((tpl, t, lat))
            t += lat
    arr = np.array(rows)
    template, start, latency = arr[:, 0].astype(int), arr[:, 1], arr[:, 2]
    ok = np.ones(start.size, dtype=bool)
    new = totals_from_transactions(spans, template, start, latency, ok, settle_s=0.05)
    # the rule until issue 45: a transaction that ends after its slice is left out
    ends = np.array([s.end for s in spans])
    where = np.clip(np.searchsorted(begins, start, side="right") - 1, 0, None)
    straddle = start + latency > ends[where]
    old = totals_from_transactions(spans, template[~straddle], start[~straddle],
                                   latency[~straddle], ok[~straddle], settle_s=0.05)
    configs = np.array([s.config for s in spans])[where]
    rate = [float((straddle & (template == 1) & (configs == k)).sum()
                  / ((template == 1) & (configs == k)).sum()) for k in (0, 1)]
    assert rate[0] > 1.5 * rate[1]  # a reference's report straddles more often
    old_iv, new_iv = compare(old).interval, compare(new).interval
    assert true == pytest.approx(1.957, abs=0.001)
    assert old_iv.ratio < 0.95 * true and old_iv.high < true  # 1.73× (1.63–1.83)
    # one draw's log ratio spreads 1.7 % (12 draws of this mix: mean +0.8 %): a 3-sd bound,
    # beside the old rule's -6.7 %
    assert abs(math.log(new_iv.ratio / true)) < 0.05 and new_iv.low < true < new_iv.high
    assert 0 < new.carried <= int(straddle.sum())  # the kept ones: not settling, not between
    # the decisions name the carried and ask for slices ten times the longest statement
    lines = race(new, ["original", "candidate"], slice_s=3.0, settle_s=0.05).decisions()
    assert 0.3 < new.longest_mean_s < 0.5  # the reports, both arms pooled
    assert f"{new.carried} carried past a switch, kept in the slice they started in" in lines[1]
    assert f"slices of {10 * new.longest_mean_s:.2g} s or more (measure.slice_s)" in lines[-1]


def test_loops_count_the_streams_queries_where_draws_weigh_by_time() -> None:
    """TPC-H streams each loop one query: the user's queries per second weigh a template by
    its completions. A fast template that gains 1.6× and a slow one that loses (0.9×): by
    count the candidate is 1.56× faster, by the draws formula (work-weighted) less."""
    cost, speedup, loops = {0: 0.01, 1: 0.08}, {0: 1.6, 1: 0.9}, {0: 4, 1: 2}
    spans = spans_of(balanced_order(2, 30, seed=3), 1.0)
    rng = np.random.default_rng(5)
    begins = np.array([s.begin for s in spans])
    rows = []
    for tpl, streams in loops.items():
        for _ in range(streams):
            t = rng.uniform(0, 0.01)
            while t < spans[-1].end:
                i = max(0, int(np.searchsorted(begins, t, side="right")) - 1)
                fast = speedup[tpl] if spans[i].config == 1 else 1.0
                lat = cost[tpl] * float(rng.lognormal(0, 0.2)) / fast
                rows.append((tpl, t, lat))
                t += lat
    template, start, latency = (np.array(c) for c in zip(*rows, strict=True))
    totals = totals_from_transactions(spans, template, start, latency,
                                      np.ones(len(rows), dtype=bool), settle_s=0.0)
    truth = (sum(n * speedup[t] / cost[t] for t, n in loops.items())
             / sum(n / cost[t] for t, n in loops.items()))
    assert truth == pytest.approx(1.56, abs=0.01)
    counted = race(totals, ["a", "b"], slice_s=1.0, settle_s=0.0,
                   estimand=Estimand.for_templates(["0", "1"], {"0": 4, "1": 2}))
    by_time = race(totals, ["a", "b"], slice_s=1.0, settle_s=0.0)
    iv = counted.comparisons["b"].interval
    assert iv.low < truth < iv.high and abs(math.log(iv.ratio / truth)) < 0.03, iv
    assert by_time.comparisons["b"].interval.ratio < truth / 1.1  # not the user's count
    assert "queries per second of the streams" in "\n".join(counted.decisions())
