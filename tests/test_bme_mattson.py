"""The Mattson stack equals a naive LRU simulation exactly."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from bme import fit_bme, miss_curve, read_trace, stack_distances, stack_histogram
from bme.mattson import earlier_greater_counts
from harmony_base.errors import ConfigError


def _lru_misses(trace: list[object], size: int) -> int:
    cache: OrderedDict[object, None] = OrderedDict()
    misses = 0
    for page in trace:
        if page in cache:
            cache.move_to_end(page)
            continue
        misses += 1
        if size == 0:
            continue
        if len(cache) >= size:
            cache.popitem(last=False)
        cache[page] = None
    return misses


def _naive_distances(trace: list[object]) -> list[int]:
    stack: list[object] = []
    out = []
    for page in trace:
        if page in stack:
            depth = stack.index(page)
            out.append(depth + 1)
            stack.pop(depth)
        else:
            out.append(0)
        stack.insert(0, page)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_equals_naive_lru_for_every_size(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pages = int(rng.integers(2, 60))
    n = int(rng.integers(50, 400))
    skew = rng.zipf(1.3, n) % pages if seed % 2 else rng.integers(0, pages, n)
    trace = [int(x) for x in skew]
    assert stack_distances(trace).tolist() == _naive_distances(trace)
    hist = stack_histogram(trace)
    sizes = np.arange(0, hist.distinct_pages + 3)
    misses = hist.misses(sizes)
    for size in sizes:
        assert misses[size] == _lru_misses(trace, int(size))
    curve_sizes, curve_p = miss_curve(trace)
    assert curve_sizes[0] == 1 and curve_sizes[-1] == hist.distinct_pages
    assert curve_p[-1] == pytest.approx(hist.distinct_pages / n)


def test_string_ids_and_large_integer_ids() -> None:
    trace = ["a", "b", "a", "c", "b", "a", "d", "a"]
    assert stack_distances(trace).tolist() == _naive_distances(trace)
    big = [10**15, 7, 10**15, -3, 7, 10**15]
    assert stack_distances(big).tolist() == _naive_distances(big)
    tuples = [(1, 2), (3, 4), (1, 2)]
    assert stack_distances(tuples).tolist() == [0, 0, 2]
    assert stack_distances([(1,), (1, 2), (1,)]).tolist() == [0, 0, 2]


def test_earlier_greater_counts_match_brute_force() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        values = rng.integers(0, int(rng.integers(1, 300)), int(rng.integers(1, 500)))
        expected = [int((values[:i] > values[i]).sum()) for i in range(values.size)]
        assert earlier_greater_counts(values).tolist() == expected


def test_curve_from_file_is_fitted_well(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    trace = rng.integers(0, 1000, 50_000)
    path = tmp_path / "trace.txt"
    path.write_text("\n".join(str(x) for x in trace) + "\n\n")
    loaded = read_trace(path)
    assert loaded.tolist() == trace.tolist()
    hist = stack_histogram(loaded)
    sizes = np.unique(np.geomspace(1, hist.distinct_pages, 40).astype(int))
    fit = fit_bme(sizes, hist.miss_probability(sizes), p_star=hist.distinct_pages / hist.n_refs)
    assert fit.r2 > 0.95


def test_bad_traces(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(ConfigError, match="no page ids"):
        read_trace(empty)
    with pytest.raises(ConfigError, match="cannot read"):
        read_trace(tmp_path / "missing.txt")
    with pytest.raises(ConfigError, match="empty"):
        miss_curve([])
    with pytest.raises(ConfigError, match="one-dimensional"):
        stack_distances(np.zeros((2, 2)))
    assert stack_distances([]).size == 0
