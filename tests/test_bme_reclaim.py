"""Fair reclamation: Σ Δ_i = Δ, equal P_i/P_i*, and the exact solution is the fairest."""

from __future__ import annotations

import itertools

import pytest

from bme import BMEParams, fair_reclaim, miss_probability
from bme.reclaim import beta_shares, round_preserving_sum
from harmony_base.errors import ConfigError

POOLS = [BMEParams(0.02, 0.01, 100, 5000), BMEParams(0.05, 0.02, 50, 8000),
         BMEParams(0.01, 0.005, 200, 12000)]
SIZES = [3000.0, 4000.0, 5000.0]


@pytest.mark.parametrize("delta", [-500.0, 0.0, 1000.0, 5000.0, 10000.0])
def test_formula_sums_and_nearly_equalises(delta: float) -> None:
    result = fair_reclaim(POOLS, SIZES, delta)
    assert sum(result.deltas) == pytest.approx(delta, abs=1e-9)
    assert [s - d for s, d in zip(SIZES, result.deltas, strict=True)] == \
        pytest.approx(result.sizes)
    # pools 0 and 2 share Pc/P*, so the formula equalises them exactly; pool 1 within 3 %
    assert result.ratios[0] == pytest.approx(result.ratios[2], rel=1e-9)
    assert max(result.ratios) / min(result.ratios) < 1.03


@pytest.mark.parametrize("delta", [-500.0, 1000.0, 10000.0])
def test_exact_mode_equalises_ratios(delta: float) -> None:
    result = fair_reclaim(POOLS, SIZES, delta, exact=True)
    assert sum(result.deltas) == pytest.approx(delta, abs=1e-6)
    assert max(result.ratios) / min(result.ratios) - 1 < 1e-9


def test_beta_matches_the_background_formula() -> None:
    weights = [(p.p_c / p.p_star + 1) * (p.m_star + p.m_b) for p in POOLS]
    assert beta_shares(POOLS) == pytest.approx([w / sum(weights) for w in weights])
    assert sum(beta_shares(POOLS)) == pytest.approx(1.0)


def test_room_past_every_knee_leaves_all_at_floor() -> None:
    result = fair_reclaim(POOLS, [6000, 9000, 13000], 1000, exact=True)
    assert result.ratios == pytest.approx([1.0, 1.0, 1.0])
    assert sum(result.sizes) == pytest.approx(27000)


@pytest.mark.parametrize("delta", [10, 25, 40])
def test_exact_is_the_fairest_against_brute_force(delta: int) -> None:
    pools = [BMEParams(0.1, 0.05, 2.0, 20.0), BMEParams(0.05, 0.02, 1.0, 15.0),
             BMEParams(0.2, 0.1, 3.0, 25.0)]
    sizes = [18, 14, 20]
    target = sum(sizes) - delta

    def worst_ratio(alloc: tuple[int, ...]) -> float:
        return max(float(miss_probability(p, m)) / p.p_star
                   for p, m in zip(pools, alloc, strict=True))

    best = min(worst_ratio((a, b, target - a - b)) for a, b in
               itertools.product(range(target + 1), repeat=2) if a + b <= target)
    exact = fair_reclaim(pools, sizes, delta, exact=True)
    # the continuous equal-ratio split is a lower bound on the best whole-page split ...
    assert max(exact.ratios) <= best + 1e-9
    # ... and its whole-page rounding is within one page per pool of an optimal one
    rounded = fair_reclaim(pools, sizes, delta, exact=True, integral=True)
    assert sum(rounded.sizes) == target
    assert all(abs(r - e) <= 1 for r, e in zip(rounded.sizes, exact.sizes, strict=True))


def test_round_preserving_sum() -> None:
    assert round_preserving_sum([1.4, 2.4, 3.2], 7) == [2, 2, 3]
    assert sum(round_preserving_sum([0.5, 0.5, 0.5, 0.5], 2)) == 2


def test_bad_input() -> None:
    with pytest.raises(ConfigError, match="one size per pool"):
        fair_reclaim(POOLS, [1, 2], 1)
    with pytest.raises(ConfigError, match="hold only"):
        fair_reclaim(POOLS, SIZES, 20000)
    with pytest.raises(ConfigError, match="below 0"):
        fair_reclaim(POOLS, SIZES, 11900)
    with pytest.raises(ConfigError, match="P\\* > 0"):
        fair_reclaim([BMEParams(0.0, 0.1, 1, 10)] * 2, [5, 5], 1)
    with pytest.raises(ConfigError, match="whole-page"):
        fair_reclaim(POOLS, SIZES, 10.5, integral=True)
