"""The per-transaction analysis on synthetic runs whose true ratio is known: it recovers the
work-weighted ratio and its intervals cover it at about their level."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest

from harmony_base.errors import ConfigError
from tuner_client.stats.per_transaction import compare, completions_per_slice
from tuner_client.stats.per_transaction_race import race_per_transaction
from workloads.per_transaction import Trace, concat

FREQ = np.array([0.6, 0.3, 0.1])  # how often each template is drawn
COST = np.array([0.001, 0.010, 0.050])  # its mean latency under A (s)
RATIO = np.array([0.9, 1.0, 0.8])  # its mean latency under B over A


@dataclass
class Synthetic:
    config: np.ndarray
    template: np.ndarray
    start: np.ndarray
    latency: np.ndarray
    ok: np.ndarray


def true_speedup(ratio: np.ndarray = RATIO) -> float:
    weights = FREQ * COST / (FREQ * COST).sum()
    return float(1.0 / (weights * ratio).sum())


def synthetic(seed: int, *, n: int = 6000, seconds: float = 60.0, ratio: np.ndarray = RATIO,
              drift_sd: float = 0.05, noise_sd: float = 0.6,
              more: tuple[np.ndarray, ...] = ()) -> Synthetic:
    """A run with a drifting machine level (a random walk per second, shared by every arm)
    and log-normal per-transaction noise whose mean is the template's cost; configuration 1
    has latency ratios ``ratio``, configurations 2, 3, ... those of ``more``."""
    rng = np.random.default_rng(seed)
    start = np.sort(rng.uniform(0, seconds, n))
    level = np.exp(np.cumsum(rng.normal(0, drift_sd, int(seconds) + 1)))
    ratios = np.vstack([np.ones(3), ratio, *more])
    config = rng.integers(0, len(ratios), n)
    template = rng.choice(3, n, p=FREQ)
    noise = np.exp(rng.normal(-noise_sd**2 / 2, noise_sd, n))
    latency = COST[template] * ratios[config, template] * level[start.astype(int)] * noise
    return Synthetic(config, template, start, latency, np.ones(n, dtype=bool))


def test_recovers_the_work_weighted_ratio_with_coverage() -> None:
    truth = true_speedup()
    assert truth == pytest.approx(1.1406, abs=1e-3)
    hits = anytime_hits = 0
    estimates, half_widths = [], []
    runs = 200
    for seed in range(runs):
        result = compare(synthetic(seed), resamples=1000, seed=seed)
        estimates.append(result.interval.ratio)
        half_widths.append(result.half_width)
        hits += result.interval.low <= truth <= result.interval.high
        assert result.anytime is not None
        anytime_hits += result.anytime.low <= truth <= result.anytime.high
    assert abs(np.median(estimates) / truth - 1) < 0.01
    assert hits / runs >= 0.88  # nominal 95 %; 0.88 is > 4 binomial sd below it
    assert anytime_hits / runs >= 0.95  # a confidence sequence is conservative at a fixed n
    assert 0.01 < np.median(half_widths) < 0.08


@dataclass
class Wrapped(Synthetic):
    overhead: np.ndarray


def test_the_runs_wrapper_is_subtracted() -> None:
    """Every transaction carries 5 ms of the run's own round trips (BEGIN; SET LOCAL ...;
    END), in both arms: uncorrected the ratio is pulled toward 1; with the overhead the run
    measured, the body's ratio (the user's client's) comes back."""
    truth = true_speedup()
    body = synthetic(3, noise_sd=0.2)
    wrapped = dataclasses.replace(body, latency=body.latency + 0.005)
    raw = compare(wrapped, resamples=500).interval.ratio
    corrected = compare(Wrapped(**vars(wrapped), overhead=np.full((2, 3), 0.005)),
                        resamples=500)
    assert raw < 1 + 0.75 * (truth - 1)  # diluted: 5 ms beside a mix of 8.6 ms a transaction
    assert abs(corrected.interval.ratio / truth - 1) < 0.03, corrected.text()
    assert corrected.wrapper_ms == pytest.approx(5.0)
    assert "the SET LOCAL wrapper's 5 ms a transaction (measured in the run) subtracted" \
        in corrected.text()


def test_a_a_interval_covers_one() -> None:
    covered = sum(compare(synthetic(seed, ratio=np.ones(3)), resamples=1000, seed=seed)
                  .interval.low <= 1.0 <= compare(synthetic(seed, ratio=np.ones(3)),
                                                  resamples=1000, seed=seed).interval.high
                  for seed in range(100, 160))
    assert covered >= 52  # of 60 at a nominal 95 %


def test_per_template_figures_and_weights() -> None:
    result = compare(synthetic(7, n=20000), resamples=500)
    assert [t.template for t in result.templates] == [0, 1, 2]
    weights = FREQ * COST / (FREQ * COST).sum()
    for t in result.templates:
        assert t.weight == pytest.approx(weights[t.template], abs=0.05)
        assert t.speedup == pytest.approx(1 / RATIO[t.template], rel=0.08)
    assert sum(result.transactions) == 20000
    assert "per transaction: 20,000 transactions in 20 slices" in result.text()


def test_completions_per_slice_counts_every_transaction() -> None:
    run = synthetic(3)
    counts, busy = completions_per_slice(run, 2, 5.0)
    assert counts.shape == (12, 2) and counts.sum() == 6000
    assert busy.sum() == pytest.approx(run.latency.sum())
    # equal assignment: each slice's split is within 4 binomial sd of half
    n = counts.sum(axis=1)
    assert np.all(np.abs(counts[:, 0] - n / 2) <= 4 * np.sqrt(n / 4))


def test_refuses_what_it_cannot_compare() -> None:
    run = synthetic(1)
    with pytest.raises(ConfigError, match="two configurations"):
        compare(run, 0, 0)
    with pytest.raises(ConfigError, match="configuration 2 has no finished transaction"):
        compare(run, 0, 2)
    with pytest.raises(ConfigError, match="at least 8 time slices"):
        compare(run, slice_s=10.0)


def test_race_recommends_the_faster_candidate_and_flags_system_wide_knobs() -> None:
    race = race_per_transaction(synthetic(11, n=9000, more=(np.ones(3),)),
                                ["default", "tuned", "same"], [{}, {"work_mem": "64MB"},
                                 {"max_parallel_workers_per_gather": "0"}], seed=1)
    assert race.level == pytest.approx(0.975)
    assert race.winner == "tuned"
    assert race.comparisons["tuned"].interval.low > 1.0
    assert race.comparisons["same"].interval.low < 1.0 < race.comparisons["same"].interval.high
    assert race.system_wide == {"tuned": (), "same": ("max_parallel_workers_per_gather",)}
    text = "\n".join(race.decisions())
    assert "final race measured per-transaction" in text and "recommend tuned" in text
    assert "confirm it with whole-server windows" in text
    summary = race.summary()
    assert summary["design"] == "per-transaction" and summary["winner"] == "tuned"
    assert summary["comparisons"]["tuned"]["transactions"][0] > 0


def test_race_keeps_the_reference_without_a_clear_winner() -> None:
    run = synthetic(9, ratio=np.ones(3))
    race = race_per_transaction(run, ["default", "same"], [{}, {"jit": "off"}])
    assert race.winner is None and race.decisions()[0].startswith("kept default")


def test_race_as_the_tuners_final_decision() -> None:
    race = race_per_transaction(synthetic(11, n=9000, more=(np.ones(3),)),
                                ["default", "best", "pgtune"], [{}, {"jit": "off"}, {"jit": "on"}])
    decision = race.to_final_decision()
    assert decision.winner == "best" and decision.lines[0].startswith("recommend best")
    assert decision.level == 0.95 and decision.decision_level == pytest.approx(0.975)
    low, high = decision.improvement_ci or (0.0, 0.0)
    assert 0.0 < low < decision.improvement < high
    summary = decision.to_dict()
    assert summary["design"] == "per-transaction"
    assert summary["observations"] == sum(race.comparisons["best"].transactions) > 5000
    assert summary["method"].startswith("block bootstrap over time slices")
    assert summary["intervals"]["pgtune"]["low"] < 1.0 < summary["intervals"]["pgtune"]["high"]


def test_concat_puts_consecutive_runs_on_the_first_runs_clock() -> None:
    configs = ({"work_mem": "1MB"}, {"work_mem": "2MB"})
    a = Trace.from_rows(configs, ["Q1", "Q6"], [(0, 0, 0.5, 0.1, True), (1, 1, 1.5, 0.2, True)],
                        2.0, origin=100.0)
    b = Trace.from_rows(configs, ["Q6", "Q9"], [(1, 0, 0.25, 0.3, True), (0, 1, 0.75, 0.4, False)],
                        1.0, origin=102.5)
    both = concat([a, b])
    assert both.templates == ("Q1", "Q6", "Q9") and both.origin == 100.0
    assert both.seconds == pytest.approx(3.5)
    assert both.start.tolist() == pytest.approx([0.5, 1.5, 2.75, 3.25])
    assert [both.templates[k] for k in both.template] == ["Q1", "Q6", "Q6", "Q9"]
    assert both.config.tolist() == [0, 1, 1, 0] and both.ok.tolist() == [True, True, True, False]
    with pytest.raises(ValueError, match="same configurations"):
        concat([a, Trace.from_rows(configs[:1], [], [], 1.0)])
