"""Partitioning: constraints hold and the result is optimal (brute force on small cases)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bme import BMEParams, miss_probability, partition
from bme.partition import miss_table
from harmony_base.errors import ConfigError

SMALL = [BMEParams(0.1, 0.05, 2.0, 20.0), BMEParams(0.05, 0.02, 1.0, 15.0),
         BMEParams(0.2, 0.1, 3.0, 25.0)]
WEIGHTS = [0.2, 0.5, 0.3]


def _brute(curves: list[BMEParams], total: int, w: list[float],
           cap: float | None = None) -> float:
    tables = [miss_table(c, total) for c in curves]
    best = np.inf
    for head in itertools.product(range(total + 1), repeat=len(curves) - 1):
        last = total - sum(head)
        if last < 0:
            continue
        sizes = [*head, last]
        miss = [tables[i][s] for i, s in enumerate(sizes)]
        if cap is not None and max(miss) > cap:
            continue
        best = min(best, sum(wi * m for wi, m in zip(w, miss, strict=True)) / sum(w))
    return best


@pytest.mark.parametrize("total", [0, 7, 20, 33, 48, 75])
@pytest.mark.parametrize("method", ["exact", "greedy"])
def test_optimal_against_brute_force(total: int, method: str) -> None:
    result = partition(SMALL, total, weights=WEIGHTS, method=method)
    assert sum(result.sizes) == total
    assert all(s >= 0 for s in result.sizes)
    best = _brute(SMALL, total, WEIGHTS)
    if method == "exact":
        assert result.aggregate_miss == pytest.approx(best, abs=1e-12)
    else:  # convex-hull greedy: never better than optimal; these tiny curves are far from
        # convex (clipped at P = 1, steep knees), so it may lose up to 0.05 here
        assert best - 1e-12 <= result.aggregate_miss <= best + 0.05


@pytest.mark.parametrize("total", [31, 45, 60])
def test_caps_hold_and_stay_optimal(total: int) -> None:
    result = partition(SMALL, total, weights=WEIGHTS, max_miss=0.4, method="exact")
    assert max(result.miss) <= 0.4
    assert result.aggregate_miss == pytest.approx(_brute(SMALL, total, WEIGHTS, cap=0.4),
                                                  abs=1e-12)


def test_four_pools_exact() -> None:
    curves = [*SMALL, BMEParams(0.15, 0.02, 0.5, 12.0)]
    w = [0.1, 0.4, 0.3, 0.2]
    result = partition(curves, 30, weights=w, method="exact")
    assert sum(result.sizes) == 30
    assert result.aggregate_miss == pytest.approx(_brute(curves, 30, w), abs=1e-12)


def test_pages_beyond_every_knee_are_handed_out() -> None:
    result = partition(SMALL, 200, weights=WEIGHTS)
    assert sum(result.sizes) == 200
    assert all(s >= c.m_star for s, c in zip(result.sizes, SMALL, strict=True))
    assert result.aggregate_miss == pytest.approx(sum(w * c.p_star for w, c in
                                                      zip(WEIGHTS, SMALL, strict=True)))


def test_realistic_three_pools_exact_equals_greedy_here() -> None:
    curves = [BMEParams(0.02, 0.01, 100, 5000), BMEParams(0.05, 0.02, 50, 8000),
              BMEParams(0.01, 0.005, 200, 12000)]
    exact = partition(curves, 3000, weights=[0.5, 0.3, 0.2], method="exact")
    greedy = partition(curves, 3000, weights=[0.5, 0.3, 0.2], method="greedy")
    assert sum(exact.sizes) == 3000
    assert exact.aggregate_miss <= greedy.aggregate_miss + 1e-12
    # exact optimality: no single-page move between two pools improves the aggregate
    w = np.array([0.5, 0.3, 0.2])
    base = exact.aggregate_miss
    for i, j in itertools.permutations(range(3), 2):
        sizes = list(exact.sizes)
        if sizes[i] == 0:
            continue
        sizes[i] -= 1
        sizes[j] += 1
        moved = sum(w[k] * min(1.0, float(miss_probability(curves[k], sizes[k])))
                    for k in range(3))
        assert moved >= base - 1e-12


def test_bad_input() -> None:
    with pytest.raises(ConfigError, match="weights"):
        partition(SMALL, 10, weights=[1, 2])
    with pytest.raises(ConfigError, match="not all 0"):
        partition(SMALL, 10, weights=[0, 0, 0])
    with pytest.raises(ConfigError, match="below its cold-miss floor"):
        partition(SMALL, 10, max_miss=0.1)
    with pytest.raises(ConfigError, match="caps need at least"):
        partition(SMALL, 5, max_miss=0.3)
    with pytest.raises(ConfigError, match="whole number"):
        partition(SMALL, -1)
    with pytest.raises(ConfigError, match="method"):
        partition(SMALL, 10, method="fast")
