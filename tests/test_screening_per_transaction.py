"""Per-transaction knob screening on simulated runs with a known truth: the rows of two
Plackett–Burman designs (each knob moved from its setting in force up, or down) drawn at random
per query by closed-loop streams on a drifting machine. A knob whose move up speeds one
template clears toward its high end, with an interval that covers its truth; a knob whose move
down only loses is held; the others and the spare columns clear no more often than the level
allows."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from benchmarks.simulators.per_transaction_sim import RunModel, SimTrace, Template
from harmony_base.errors import ConfigError
from tuner_client.stats.screening import KnobLevels
from tuner_client.stats.screening_designs import plackett_burman
from tuner_client.stats.screening_per_transaction import (
    design_rows,
    level_of,
    screen_from_default,
)

#: (streams, mean latency s, log-normal sigma): a fast template and a slow heavy-tailed one
FAST, SLOW = (6, 0.05, 0.6), (2, 0.3, 1.0)
#: the slow template's speedup when knob 0 moves up (to "hi")
SPEEDUP = 2.0
#: the fast template's slowdown when knob 1 moves down (to "lo"): random_page_cost 4 -> 0.1
LOSS = 1.5
KNOBS = [KnobLevels(f"k{j}", "lo", "hi") for j in range(5)]
DEFAULT = {k.name: "mid" for k in KNOBS}
MATRIX = plackett_burman(len(KNOBS))
ROWS = design_rows(KNOBS, DEFAULT, MATRIX)

#: a template's latency factor under a row: (template index, row settings) -> factor
Factor = Callable[[int, dict[str, str]], float]


def effects(template: int, row: dict[str, str]) -> float:
    """Knob 0 up speeds the slow template; knob 1 down slows the fast one; nothing else."""
    if template == 1 and row["k0"] == "hi":
        return 1.0 / SPEEDUP
    if template == 0 and row["k1"] == "lo":
        return LOSS
    return 1.0


def simulate(rows: list[dict[str, str]], seed: int, factor: Factor = effects,
             seconds: float = 60.0) -> SimTrace:
    """Closed-loop streams, each query drawing a row at random; the machine's log level walks
    by 0.05 a second and bursts 1.6x slower 5 % of the seconds (all rows alike)."""
    rng = np.random.default_rng(seed)
    log_level = np.cumsum(rng.normal(0.0, 0.05, int(seconds) + 1))
    log_level += np.where(rng.random(int(seconds) + 1) < 0.05, math.log(1.6), 0.0)
    out = []
    for t, (streams, mean, sigma) in enumerate((FAST, SLOW)):
        for _ in range(streams):
            clock = rng.uniform(0.0, mean)
            while clock < seconds:
                arm = int(rng.integers(len(rows)))
                latency = (mean * factor(t, rows[arm]) * math.exp(log_level[int(clock)])
                           * math.exp(sigma * rng.standard_normal() - sigma ** 2 / 2))
                out.append((arm, t, clock, latency))
                clock += latency
    arr = np.array(out)
    return SimTrace(arr[:, 0].astype(int), arr[:, 1].astype(int), arr[:, 2], arr[:, 3],
                    np.ones(len(arr), dtype=bool))


def truth() -> float:
    """Knob 0's move up, work-weighted (the estimand of a two-arm comparison whose B arm is
    SPEEDUP faster on the slow template; knob 1's loss falls on both sides alike)."""
    return RunModel({"fast": Template(FAST[0], FAST[1], 1.0, FAST[2]),
                     "slow": Template(SLOW[0], SLOW[1], SPEEDUP, SLOW[2])}).truth()


def test_the_rows_move_each_knob_from_its_setting_in_force() -> None:
    assert len(ROWS) == 16
    # up rows: a knob at its high end or in force; down rows: at its low end or in force
    assert all(set(r.values()) <= {"hi", "mid"} for r in ROWS[:8])
    assert all(set(r.values()) <= {"lo", "mid"} for r in ROWS[8:])
    assert ROWS[7] == DEFAULT and ROWS[15] == DEFAULT  # PB's last row: every knob at −1
    assert sum(r["k0"] == "hi" for r in ROWS) == 4 and sum(r["k0"] == "lo" for r in ROWS) == 4


def test_a_gaining_move_clears_a_losing_one_does_not_and_the_rest_hold_the_level() -> None:
    true_ratio = truth()
    assert 1.15 < true_ratio < 1.2
    seeds = range(30)
    cleared_k0 = covered = held_k1 = false_clears = spare_outside = 0
    for seed in seeds:
        result, spare = screen_from_default(simulate(ROWS, seed), KNOBS, DEFAULT, MATRIX,
                                            z=2.0, seed=seed, resamples=1000)
        by_knob = {e.knob: e for e in result.effects}
        k0 = by_knob["k0"]
        if k0.cleared:
            assert (k0.low, k0.high) == ("mid", "hi") and k0.ratio > 1
            assert result.predicted_best(DEFAULT)[0]["k0"] == "hi"
        cleared_k0 += k0.cleared
        low, high = (math.exp(math.log(k0.ratio) + s * 2.0 * k0.se) for s in (-1, 1))
        covered += k0.high == "hi" and low <= true_ratio <= high
        # knob 1: its move down reads clearly below 1, and no move gains: held
        held_k1 += not by_knob["k1"].cleared and "down to lo 0." in by_knob["k1"].reason
        false_clears += sum(by_knob[f"k{j}"].cleared for j in range(1, 5))
        spare_outside += sum(not i.low <= 1.0 <= i.high for i in spare)
        assert len(spare) == 4 and result.measured == "per-transaction"
        assert result.design_runs == 16 and result.transactions > 4000
    assert cleared_k0 >= 24, cleared_k0  # 1.18x, each move on half the minute's transactions
    assert covered >= 27, covered
    assert held_k1 >= 27, held_k1
    # the level is 95.45 % a side, and only a gain clears: 8 null moves a run (k1 down is
    # not null, and cannot clear), 30 runs
    assert false_clears <= 10, false_clears
    assert spare_outside <= 8, spare_outside


def test_a_move_is_as_precise_as_a_two_arm_run_of_its_designs_share() -> None:
    """Every transaction of a design's rows counts for each of its moves: knob 0's move up is
    about as precise as a two-arm run (in force, moved) of half the minute."""
    def gain_only(template: int, row: dict[str, str]) -> float:
        return 1.0 / SPEEDUP if template == 1 and row["k0"] == "hi" else 1.0

    widths, alone = [], []
    two_arms = [{**DEFAULT}, {**DEFAULT, "k0": "hi"}]
    for seed in range(12):
        result, _ = screen_from_default(simulate(ROWS, seed, gain_only), KNOBS, DEFAULT,
                                        MATRIX, seed=seed, resamples=500)
        widths.append(next(e.se for e in result.effects if e.knob == "k0"))
        single, _ = screen_from_default(simulate(two_arms, seed, gain_only, seconds=30.0),
                                        [KnobLevels("k0", "mid", "hi")], DEFAULT,
                                        np.array([[-1], [1]]), seed=seed, resamples=500)
        alone.append(single.effects[0].se)
    assert float(np.median(widths)) < 1.25 * float(np.median(alone)), (widths, alone)


def test_without_any_effect_no_knob_clears_beyond_the_level() -> None:
    rows = design_rows(KNOBS[:3], DEFAULT, plackett_burman(3))
    clears = 0
    for seed in range(20):
        result, _ = screen_from_default(simulate(rows, seed, factor=lambda t, r: 1.0),
                                        KNOBS[:3], DEFAULT, plackett_burman(3), seed=seed,
                                        resamples=1000)
        clears += sum(e.cleared for e in result.effects)
    assert clears <= 6, clears  # 120 one-sided looks at 2.3 %: 2.7 expected


def test_an_end_that_is_the_setting_in_force_is_not_a_move() -> None:
    default = {**DEFAULT, "k2": "hi"}
    rows = design_rows(KNOBS, default, MATRIX)
    result, _ = screen_from_default(simulate(rows, 0), KNOBS, default, MATRIX, seed=0,
                                    resamples=1000)
    k2 = next(e for e in result.effects if e.knob == "k2")
    assert "up hi is the setting in force" in k2.reason and k2.high == "lo"


def test_inputs_are_checked() -> None:
    trace = simulate(ROWS, 0, seconds=20.0)
    with pytest.raises(ConfigError, match="screens 1 to 7 knobs"):
        screen_from_default(trace, [KnobLevels(f"k{j}", 0, 1) for j in range(8)],
                            {f"k{j}": 0 for j in range(8)}, MATRIX)
    with pytest.raises(ConfigError, match="z > 0"):
        screen_from_default(trace, KNOBS, DEFAULT, MATRIX, z=0.0)
    with pytest.raises(ConfigError, match=r"\['k4'\] have none"):
        screen_from_default(trace, KNOBS, {f"k{j}": "mid" for j in range(4)}, MATRIX)
    with pytest.raises(ConfigError, match="the two designs' 8 rows"):
        screen_from_default(trace, KNOBS[:2], DEFAULT, MATRIX[:4])
    assert level_of(2.0) == pytest.approx(0.9545, abs=1e-4)
