"""Per-transaction knob screening on simulated runs with a known truth: the rows of a
Plackett–Burman design drawn at random per query by closed-loop streams on a drifting machine;
one knob speeds one template up. The knob that matters clears, with an interval that covers
its truth; the others and the spare columns clear no more often than the level allows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harmony.base.errors import ConfigError
from tuner_client.stats.per_transaction_sim import RunModel, SimTrace, Template
from tuner_client.stats.screening import KnobLevels, plackett_burman
from tuner_client.stats.screening_per_transaction import level_of, screen_trace

#: (streams, mean latency s, log-normal sigma): a fast template and a slow heavy-tailed one
FAST, SLOW = (6, 0.05, 0.6), (2, 0.3, 1.0)
#: the slow template's speedup with knob 0 at its high end
SPEEDUP = 1.5
KNOBS = [KnobLevels(f"k{j}", "lo", "hi") for j in range(5)]


def simulate(matrix: np.ndarray, seed: int, seconds: float = 60.0,
             speedup: float = SPEEDUP) -> SimTrace:
    """Closed-loop streams, each query drawing a design row at random; the machine's log
    level walks by 0.05 a second and bursts 1.6x slower 5 % of the seconds (all rows alike)."""
    rng = np.random.default_rng(seed)
    log_level = np.cumsum(rng.normal(0.0, 0.05, int(seconds) + 1))
    log_level += np.where(rng.random(int(seconds) + 1) < 0.05, math.log(1.6), 0.0)
    rows = []
    for t, (streams, mean, sigma) in enumerate((FAST, SLOW)):
        for _ in range(streams):
            clock = rng.uniform(0.0, mean)
            while clock < seconds:
                arm = int(rng.integers(matrix.shape[0]))
                fast = 1.0 / speedup if t == 1 and matrix[arm, 0] > 0 else 1.0
                latency = (mean * fast * math.exp(log_level[int(clock)])
                           * math.exp(sigma * rng.standard_normal() - sigma ** 2 / 2))
                rows.append((arm, t, clock, latency))
                clock += latency
    arr = np.array(rows)
    return SimTrace(arr[:, 0].astype(int), arr[:, 1].astype(int), arr[:, 2], arr[:, 3],
                    np.ones(len(arr), dtype=bool))


def truth() -> float:
    """Knob 0's work-weighted speedup, high rows over low rows (the estimand of a two-arm
    comparison whose B arm is SPEEDUP faster on the slow template)."""
    return RunModel({"fast": Template(FAST[0], FAST[1], 1.0, FAST[2]),
                     "slow": Template(SLOW[0], SLOW[1], SPEEDUP, SLOW[2])}).truth()


def test_the_knob_that_matters_clears_and_the_others_hold_the_level() -> None:
    matrix = plackett_burman(len(KNOBS))
    assert matrix.shape == (8, 7)
    true_ratio = truth()
    assert 1.08 < true_ratio < 1.15
    seeds = range(30)
    cleared_k0 = covered = false_clears = spare_outside = first = 0
    widths = []
    for seed in seeds:
        result, spare = screen_trace(simulate(matrix, seed), KNOBS, matrix, z=2.0, seed=seed,
                                     resamples=1000)
        effects = {e.knob: e for e in result.effects}
        k0 = effects["k0"]
        first += result.effects[0].knob == "k0"  # the largest effect is ranked first
        cleared_k0 += k0.cleared and k0.ratio > 1
        low, high = (math.exp(math.log(k0.ratio) + s * 2.0 * k0.se) for s in (-1, 1))
        covered += low <= true_ratio <= high
        widths.append(k0.se * 2.0)
        false_clears += sum(effects[f"k{j}"].cleared for j in range(1, 5))
        spare_outside += sum(not i.low <= 1.0 <= i.high for i in spare)
        assert len(spare) == 2 and result.measured == "per-transaction"
        assert result.transactions > 5000
    # the level is 95.45 %: 4 null knobs and 2 spare columns a run, 30 runs
    assert cleared_k0 >= 24, cleared_k0  # 1.105x in a minute: power about 0.85
    assert covered >= 27, covered
    assert first >= 24, first
    assert false_clears <= 12, false_clears
    assert spare_outside <= 6, spare_outside
    # every transaction counts for every knob: knob 0's interval is about as narrow as that of
    # a two-arm run of the same minute that compares only knob 0's two ends
    two_arms = np.array([[-1], [1]])
    alone = [screen_trace(simulate(two_arms, seed), KNOBS[:1], two_arms, seed=seed,
                          resamples=1000)[0].effects[0].se * 2.0 for seed in seeds]
    assert float(np.median(widths)) < 1.25 * float(np.median(alone)), (widths, alone)


def test_without_any_effect_the_knobs_clear_at_the_level() -> None:
    """A/A: knob 0 too does nothing."""
    matrix = plackett_burman(3)
    clears = 0
    for seed in range(30):
        result, _ = screen_trace(simulate(matrix, seed, speedup=1.0), KNOBS[:3], matrix,
                                 seed=seed, resamples=1000)
        clears += sum(e.cleared for e in result.effects)
    assert clears <= 9, clears  # 90 tests at 95.45 %: 4 expected


def test_inputs_are_checked() -> None:
    matrix = plackett_burman(3)
    trace = simulate(matrix, 0, seconds=20.0)
    with pytest.raises(ConfigError, match="screens 1 to 7 knobs"):
        screen_trace(trace, [KnobLevels(f"k{j}", 0, 1) for j in range(8)], matrix)
    with pytest.raises(ConfigError, match="z > 0"):
        screen_trace(trace, KNOBS[:3], matrix, z=0.0)
    with pytest.raises(ConfigError, match="the design's 4 rows"):
        screen_trace(trace, KNOBS[:2], matrix[:4])
    assert level_of(2.0) == pytest.approx(0.9545, abs=1e-4)
