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

from harmony_base.errors import ConfigError

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


def page_keys(trace: Iterable[Any] | NDArray[np.generic]) -> NDArray[np.int64]:
    """The trace as non-negative int64 page keys (integers shifted to 0, others numbered)."""
    if isinstance(trace, np.ndarray):
        arr = trace
    else:
        items = list(trace)
        try:
            arr = np.asarray(items)
        except ValueError:                # ragged sequences as page ids
            arr = np.zeros(0)
        if arr.ndim != 1 or arr.size != len(items):   # e.g. tuples as ids: keep them whole
            arr = np.empty(len(items), dtype=object)
            arr[:] = items
    if arr.ndim != 1:
        raise ConfigError(f"a page-reference trace must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.dtype.kind in "iub":
        keys = arr.astype(np.int64)
        low, high = int(keys.min()), int(keys.max())
        if high - low < (1 << 62) // max(arr.size, 1):
            return keys - low
    if arr.dtype.kind in "iubUS":
        _, inverse = np.unique(arr, return_inverse=True)
        return inverse.astype(np.int64).ravel()
    ids: dict[object, int] = {}
    return np.fromiter((ids.setdefault(x, len(ids)) for x in arr), dtype=np.int64,
                       count=arr.size)


def previous_reference(pages: NDArray[np.int64]) -> NDArray[np.int64]:
    """For each reference, the index of the previous reference to the same page (−1: none).

    ``pages`` are non-negative keys small enough that key·n fits in int64 (see
    :func:`page_keys`); one plain sort of key·n + position replaces a slower stable argsort.
    """
    n = pages.size
    prev = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return prev
    packed = np.sort(pages * n + np.arange(n, dtype=np.int64))
    page_sorted, pos_sorted = np.divmod(packed, n)
    same = page_sorted[1:] == page_sorted[:-1]
    prev[pos_sorted[1:][same]] = pos_sorted[:-1][same]
    return prev


def earlier_greater_counts(values: NDArray[np.int64]) -> NDArray[np.int64]:
    """For each i, #{j < i : values[j] > values[i]} (values >= 0), by an MSB-first radix pass.

    Slots hold the elements grouped by the bits above the current one, in position order
    inside a group (each group's start is carried along). At each bit, an element whose bit
    is 0 is exceeded by every earlier member of its group whose bit is 1; then the whole array
    is stably partitioned by the bit, which keeps every refined group contiguous.
    """
    n = values.size
    result = np.zeros(n, dtype=np.int64)
    top = int(values.max()) if n else 0
    if n < 2 or top <= 0:
        return result
    idx = np.arange(n, dtype=np.int64)
    v, order = values.astype(np.int64), idx.copy()
    acc, start = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    bit, ones, zeros, tmp = (np.empty(n, dtype=np.int64) for _ in range(4))
    v2, order2, acc2, start2 = (np.empty(n, dtype=np.int64) for _ in range(4))
    for k in range(top.bit_length() - 1, -1, -1):
        np.right_shift(v, k, out=bit)
        np.bitwise_and(bit, 1, out=bit)
        np.cumsum(bit, out=ones)
        ones -= bit                                     # ones in earlier slots
        np.subtract(idx, ones, out=zeros)               # zeros in earlier slots
        zeros_total = int(zeros[-1]) + 1 - int(bit[-1])
        zeros_at_start = zeros[start]
        # ones earlier in the group = ones - ones[start]; they exceed this element if its bit is 0
        np.subtract(start, zeros_at_start, out=tmp)
        np.subtract(ones, tmp, out=tmp)
        tmp *= 1 - bit
        acc += tmp
        # slot after the partition: zeros keep their rank among zeros, ones follow all zeros
        np.add(ones, zeros_total, out=tmp)
        tmp -= zeros
        tmp *= bit
        tmp += zeros
        v2[tmp] = v
        order2[tmp] = order
        acc2[tmp] = acc
        # the refined group's start: zeros -> zeros_at_start, ones -> zeros_total + ones[start]
        new_start = (zeros_total + start - 2 * zeros_at_start) * bit + zeros_at_start
        start2[tmp] = new_start
        v, v2, order, order2 = v2, v, order2, order
        acc, acc2, start, start2 = acc2, acc, start2, start
    result[order] = acc
    return result


def stack_distances(trace: Iterable[object] | NDArray[np.generic]) -> NDArray[np.int64]:
    """LRU stack distance of each reference (1 = the most recently used page; 0 = cold)."""
    pages = page_keys(trace)
    prev = previous_reference(pages)
    reuse = np.flatnonzero(prev >= 0)
    dist = np.zeros(pages.size, dtype=np.int64)
    if reuse.size:
        repeats = earlier_greater_counts(prev[reuse])
        dist[reuse] = reuse - prev[reuse] - repeats
    return dist


def stack_histogram(trace: Iterable[object] | NDArray[np.generic]) -> StackHistogram:
    """The stack-distance histogram plus cold misses of a trace, in one pass."""
    dist = stack_distances(trace)
    cold = int((dist == 0).sum())
    counts = np.bincount(dist, minlength=cold + 1).astype(np.int64)
    counts[0] = 0
    return StackHistogram(counts=counts, cold=cold, n_refs=int(dist.size))


def miss_curve(trace: Iterable[object] | NDArray[np.generic]) -> tuple[NDArray[np.int64],
                                                             NDArray[np.float64]]:
    """(sizes, P) for an LRU buffer of every size 1 .. distinct pages of the trace."""
    hist = stack_histogram(trace)
    if hist.n_refs == 0:
        raise ConfigError("the page-reference trace is empty")
    sizes = np.arange(1, hist.distinct_pages + 1)
    return sizes, hist.miss_probability(sizes)


def read_trace(path: str | os.PathLike[str]) -> NDArray[np.int64] | NDArray[np.str_]:
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
