"""Mattson's LRU stack: from one page-reference trace, the miss probability at every size.

LRU has the inclusion property, so one pass gives each reference's stack distance (1 + the
distinct pages touched since the same page's last reference; cold references have none) and
P(M) = (cold + #{distance > M}) / n for every M at once. The distance of a reuse at time t of
a page last seen at s is t − s − #{u < t : prev(u) > s} (the repeats inside the reuse window),
counted for all references together by a vectorised MSB-first radix pass over prev
(O(n log n) in numpy; no per-reference Python loop).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from harmony.errors import ConfigError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StackHistogram:
    """Stack-distance counts: ``counts[d]`` references at distance d (d >= 1), plus cold misses."""

    counts: NDArray[np.int64]
    cold: int
    n_refs: int

    @property
    def distinct_pages(self) -> int:
        return self.cold

    def misses(self, sizes: NDArray[np.int64] | None = None) -> NDArray[np.int64]:
        """Miss counts of an LRU buffer of each size (default: 0 .. distinct pages)."""
        if sizes is None:
            sizes = np.arange(self.distinct_pages + 1)
        sizes = np.asarray(sizes)
        if (sizes < 0).any():
            raise ConfigError("buffer sizes for an LRU miss curve must be >= 0")
        hits_within = np.concatenate([[0], np.cumsum(self.counts[1:])])  # hits at size k
        clipped = np.minimum(sizes, hits_within.size - 1)
        return self.n_refs - hits_within[clipped]

    def miss_probability(self, sizes: NDArray[np.int64] | None = None) -> NDArray[np.float64]:
        """P(M) for each size (default: 0 .. distinct pages)."""
        return self.misses(sizes) / max(self.n_refs, 1)


def page_indices(trace: Iterable[Any] | NDArray[Any]) -> NDArray[np.int64]:
    """Map the page ids of a trace (any hashables, or an integer array) to 0 .. D−1."""
    arr = trace if isinstance(trace, np.ndarray) else np.asarray(list(trace))
    if arr.ndim != 1:
        raise ConfigError(f"a page-reference trace must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind in "iub" or arr.dtype.kind in "US":
        _, inverse = np.unique(arr, return_inverse=True)
        return inverse.astype(np.int64).ravel()
    ids: dict[Any, int] = {}
    return np.fromiter((ids.setdefault(x, len(ids)) for x in arr), dtype=np.int64,
                       count=arr.size)


def previous_reference(pages: NDArray[np.int64]) -> NDArray[np.int64]:
    """For each reference, the index of the previous reference to the same page (−1: none)."""
    n = pages.size
    order = np.argsort(pages, kind="stable")
    prev = np.full(n, -1, dtype=np.int64)
    if n > 1:
        same = pages[order[1:]] == pages[order[:-1]]
        prev[order[1:][same]] = order[:-1][same]
    return prev


def earlier_greater_counts(values: NDArray[np.int64]) -> NDArray[np.int64]:
    """For each i, #{j < i : values[j] > values[i]} (values >= 0), by an MSB-first radix pass.

    At each bit, elements are grouped by their higher bits (keeping position order inside a
    group); an element whose bit is 0 is exceeded by every earlier group member whose bit is 1.
    """
    n = values.size
    result = np.zeros(n, dtype=np.int64)
    if n < 2:
        return result
    top = int(values.max())
    if top <= 0:
        return result
    idx = np.arange(n, dtype=np.int64)
    order = idx.copy()                       # element index at each slot
    v = values.astype(np.int64, copy=True)   # values in slot order
    acc = np.zeros(n, dtype=np.int64)        # counts in slot order
    zeros_prefix = np.empty(n + 1, dtype=np.int64)
    zeros_prefix[0] = 0
    for k in range(top.bit_length() - 1, -1, -1):
        high = v >> (k + 1)
        bit = (v >> k) & 1
        starts_flag = np.empty(n, dtype=bool)
        starts_flag[0] = True
        np.not_equal(high[1:], high[:-1], out=starts_flag[1:])
        starts = np.flatnonzero(starts_flag)
        group = np.cumsum(starts_flag) - 1
        gs = starts[group]
        ge = np.append(starts[1:], n)[group]
        np.cumsum(1 - bit, out=zeros_prefix[1:])
        z_i = zeros_prefix[:-1]
        z_gs = zeros_prefix[gs]
        ones_before = (idx - gs) - (z_i - z_gs)
        acc += np.where(bit == 0, ones_before, 0)
        dest = np.where(bit == 0, gs + z_i - z_gs, zeros_prefix[ge] + idx - z_i)
        new_order = np.empty_like(order)
        new_order[dest] = order
        new_v = np.empty_like(v)
        new_v[dest] = v
        new_acc = np.empty_like(acc)
        new_acc[dest] = acc
        order, v, acc = new_order, new_v, new_acc
    result[order] = acc
    return result


def stack_distances(trace: Iterable[Any] | NDArray[Any]) -> NDArray[np.int64]:
    """LRU stack distance of each reference (1 = the most recently used page; 0 = cold)."""
    pages = page_indices(trace)
    prev = previous_reference(pages)
    reuse = np.flatnonzero(prev >= 0)
    dist = np.zeros(pages.size, dtype=np.int64)
    if reuse.size:
        repeats = earlier_greater_counts(prev[reuse])
        dist[reuse] = reuse - prev[reuse] - repeats
    return dist


def stack_histogram(trace: Iterable[Any] | NDArray[Any]) -> StackHistogram:
    """The stack-distance histogram plus cold misses of a trace, in one pass."""
    dist = stack_distances(trace)
    cold = int((dist == 0).sum())
    counts = np.bincount(dist, minlength=cold + 1).astype(np.int64)
    counts[0] = 0
    return StackHistogram(counts=counts, cold=cold, n_refs=int(dist.size))


def miss_curve(trace: Iterable[Any] | NDArray[Any]) -> tuple[NDArray[np.int64],
                                                             NDArray[np.float64]]:
    """(sizes, P) for an LRU buffer of every size 1 .. distinct pages of the trace."""
    hist = stack_histogram(trace)
    if hist.n_refs == 0:
        raise ConfigError("the page-reference trace is empty")
    sizes = np.arange(1, hist.distinct_pages + 1)
    return sizes, hist.miss_probability(sizes)


def read_trace(path: str | os.PathLike[str]) -> NDArray[Any]:
    """Page ids from a file with one id per line (blank lines ignored; integers stay integers)."""
    try:
        with open(path, encoding="utf-8") as handle:
            tokens = [line.strip() for line in handle]
    except OSError as exc:
        raise ConfigError(f"cannot read trace file {os.fspath(path)}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"trace file {os.fspath(path)} is not UTF-8 text: {exc}") from None
    tokens = [t for t in tokens if t]
    if not tokens:
        raise ConfigError(f"trace file {os.fspath(path)} has no page ids (one id per line)")
    arr = np.array(tokens)
    try:
        return arr.astype(np.int64)
    except ValueError:
        return arr
