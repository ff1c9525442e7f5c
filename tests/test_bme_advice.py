"""The shared_buffers prior: advice from a good fit, a clear fallback from a poor one."""

from __future__ import annotations

import numpy as np
import pytest

from bme import BMEParams, SharedBuffersAdvisor, miss_probability, touched_pages_p_star
from harmony_base.errors import ConfigError

MB = 1 << 20
TRUE = BMEParams(p_star=0.02, p_c=0.01, m_b=8.0 * MB, m_star=192.0 * MB)


def _window(prior: SharedBuffersAdvisor, size: int, accesses: int = 1_000_000) -> None:
    p = float(miss_probability(TRUE, size))
    reads = round(p * accesses)
    prior.add_point(size, accesses - reads, reads)


def test_good_fit_gives_advice_inside_the_budget() -> None:
    prior = SharedBuffersAdvisor(p_star=TRUE.p_star)
    for size in (16 * MB, 32 * MB):
        _window(prior, size)
    assert not prior.ready
    advice = prior.recommend(max_bytes=1024 * MB, min_bytes=1 * MB)
    assert not advice.usable and "needs 3" in advice.reason
    _window(prior, 64 * MB)
    _window(prior, 64 * MB)                      # a repeat does not count as a new size
    assert prior.ready and prior.n_sizes == 3
    advice = prior.recommend(max_bytes=1024 * MB, min_bytes=1 * MB)
    assert advice.usable, advice.reason
    assert advice.fit is not None and advice.fit.r2 > 0.999
    assert advice.m_star_bytes == pytest.approx(TRUE.m_star, rel=0.01)   # forward, P* given
    assert not advice.capped
    low, high = advice.search_range  # type: ignore[misc]
    assert low < advice.m_star_bytes < high
    first, second = advice.simplex  # type: ignore[misc]
    assert first == advice.m_star_bytes and second != first and low <= second <= high
    summary = prior.to_dict()
    assert set(summary) >= {"p_star", "p_c", "m_b", "m_star", "r2"}
    assert summary["m_star"] == pytest.approx(TRUE.m_star, rel=0.01)


def test_m_star_is_capped_by_the_budget() -> None:
    prior = SharedBuffersAdvisor(p_star=TRUE.p_star)
    for size in (8 * MB, 16 * MB, 32 * MB, 48 * MB):
        _window(prior, size)
    advice = prior.recommend(max_bytes=128 * MB, min_bytes=8 * MB)
    assert advice.usable and advice.capped
    assert advice.m_star_bytes == 128 * MB
    low, high = advice.search_range  # type: ignore[misc]
    assert high == 128 * MB and low >= 8 * MB
    assert advice.simplex == (128 * MB, 96 * MB)


def test_poor_fit_falls_back() -> None:
    prior = SharedBuffersAdvisor()
    rng = np.random.default_rng(5)
    for size in (16, 32, 48, 64, 96, 128):
        reads = int(rng.integers(1000, 900_000))       # miss rates unrelated to size
        prior.add_point(size * MB, 1_000_000 - reads, reads)
    advice = prior.recommend(max_bytes=1024 * MB, min_bytes=MB)
    assert not advice.usable
    assert advice.fit is not None and advice.fit.r2 < 0.9
    assert "poor fit" in advice.reason and "falling back" in advice.reason
    assert advice.search_range is None and advice.simplex is None


def test_touched_pages_p_star_and_bad_input() -> None:
    assert touched_pages_p_star(5_000, 1_000_000) == 0.005
    with pytest.raises(ConfigError, match="exceeds"):
        touched_pages_p_star(10, 5)
    with pytest.raises(ConfigError, match="> 0"):
        touched_pages_p_star(0, 5)
    prior = SharedBuffersAdvisor()
    with pytest.raises(ConfigError, match="no block accesses"):
        prior.add_point(MB, 0, 0)
    with pytest.raises(ConfigError, match="stats reset"):
        prior.add_point(MB, -1, 5)
    with pytest.raises(ConfigError, match="min_bytes < max_bytes"):
        prior.recommend(max_bytes=MB, min_bytes=2 * MB)
    with pytest.raises(ConfigError, match="p_star"):
        SharedBuffersAdvisor(p_star=2.0)
