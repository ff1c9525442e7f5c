"""When a probe's buffer counts as settled, and what a settled curve decides (no database):
the window starts once the buffer is full or every touched page is resident *and* the miss
probability is stable; P* is then the curve's floor, not the compulsory misses the touched
pages count; a flat settled curve whose largest buffer held every page is a real "no knee"."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bme.equation import BMEParams, miss_probability
from bme.probe_decision import Probe, decide, probe_sizes, search_window
from tuner_client.phases.offline_probes import decide_set, flat_needs_a_full_buffer
from tuner_client.probes.runner import (
    BufferFill,
    ends_flat_settled,
    ends_flat_unfilled,
    fits_at_smallest,
    probe_order,
)
from tuner_client.probes.settle import cannot_fill, settled_state

MB = 1 << 20
ACCESSES = 1_000_000
TRUE = BMEParams(p_star=0.002, p_c=0.05, m_b=4 * MB, m_star=96 * MB)


def test_settled_needs_a_full_or_stopped_buffer_and_a_stable_miss_probability() -> None:
    cap = 10_000
    # filling: the miss probability falls and the occupancy grows
    assert settled_state(cap, [0, 4_000, 7_000], [0.60, 0.35]) is None
    # full, but the last two sub-windows still disagree (0.30 against 0.22)
    assert settled_state(cap, [0, 9_900, 9_950, 9_990], [0.5, 0.30, 0.22]) is None
    # full and stable (within 0.01 absolute or 10 %)
    assert settled_state(cap, [0, 9_900, 9_950, 9_990], [0.5, 0.21, 0.22]) == "full"
    # not full, but it grew by less than 1 % of the capacity and the misses stay ~0
    assert settled_state(cap, [0, 3_000, 3_050], [0.004, 0.001]) == "fits"
    # still growing by 5 % a sub-window: pages still arrive (data larger, buffer not full)
    assert settled_state(cap, [0, 3_000, 3_500], [0.05, 0.048]) is None
    # a slow workload filling a large buffer: it grows little a sub-window but still misses
    # 7.5 % of its accesses, so its pages do not fit (it was called "fits" before)
    assert settled_state(cap, [0, 3_000, 3_050], [0.075, 0.074]) is None
    # one sub-window is never enough, nor a sub-window without an access
    assert settled_state(cap, [0, 9_990], [0.2]) is None
    assert settled_state(cap, [0, 9_990, 9_990], [0.2, None]) is None


def _settled(sizes: list[int], how: str = "full") -> list[Probe]:
    out = []
    for size in sizes:
        reads = int(round(float(miss_probability(TRUE, size)) * ACCESSES))
        out.append(Probe(size=size, hits=ACCESSES - reads, reads=reads, window_s=3.0,
                         cost_s=9.0, settled=how, settle_s=5.5))
    return out


def test_settled_probes_take_p_star_from_the_floor_not_the_touched_pages() -> None:
    sizes = probe_sizes(16 * MB, 256 * MB, 5, step=8 * MB)
    probes = _settled(sizes)
    # 40,000 touched pages over a million accesses would put the floor at 0.04, twenty
    # times the settled curve's 0.002: the cold-window rule would flatten the knee away
    decision = decide(probes, touched_pages=40_000, low=16 * MB, high=256 * MB)
    assert decision.kind == "knee", decision.reason
    assert decision.p_star == pytest.approx(min(p.miss for p in probes))
    assert "settled" in decision.p_star_source
    assert decision.fit is not None and 0.8 * TRUE.m_star < decision.fit.params.m_star \
        < 1.3 * TRUE.m_star
    # a probe that ran out of settle time is named
    late = [*probes[:-1], replace(probes[-1], settled="timeout")]
    assert "1 probe(s) not settled" in decide(late, touched_pages=40_000, low=16 * MB,
                                              high=256 * MB).p_star_source
    assert probes[0].to_dict()["settled"] == "full" and probes[0].to_dict()["settle_s"] == 5.5


def test_a_flat_settled_curve_whose_pages_fit_is_no_knee() -> None:
    """Settled probes whose largest buffer held every touched page (occupancy stopped
    growing short of full) show a real flat curve: the search may be confined; a cold flat
    curve from a buffer that never filled may not."""
    sizes = probe_sizes(128 * MB, 1024 * MB, 4, step=8 * MB)
    flat = np.full(len(sizes), 0.001)
    probes = [Probe(s, ACCESSES - int(m * ACCESSES), int(m * ACCESSES), 3.0, 9.0,
                    settled="fits") for s, m in zip(sizes, flat, strict=True)]
    decision = decide(probes, touched_pages=5_000, low=32 * MB, high=1024 * MB)
    assert decision.kind == "no-knee"
    half = {sizes[-1]: BufferFill(1024 * MB // 8192 // 2, 1024 * MB // 8192)}
    kept = flat_needs_a_full_buffer(decision, half)
    assert kept is decision and search_window(kept, 32 * MB, 1024 * MB, 8 * MB) is not None
    cold = decide([replace(p, settled="") for p in probes], touched_pages=5_000,
                  low=32 * MB, high=1024 * MB)
    assert flat_needs_a_full_buffer(cold, half).reason.startswith("no knee found in range")


def test_a_buffer_that_cannot_fill_in_the_budget_is_given_up_early() -> None:
    cap = 32_768
    # pgbench TPC-B at scale 55 in 256 MB (issue 31): P steady at ~0.08, the buffer grew
    # ~600 buffers a 1.5-s sub-window from 5,000: 20 s more would leave it near 13,000
    assert cannot_fill(cap, [4_000, 4_600, 5_200], [0.081, 0.079], 1.5, 20.0)
    # the same growth with 80 s left would fill it: keep settling
    assert not cannot_fill(cap, [4_000, 4_600, 5_200], [0.081, 0.079], 1.5, 80.0)
    # still falling (0.30 -> 0.15): pages are arriving, it may yet hold every touched one
    assert not cannot_fill(cap, [4_000, 4_600, 5_200], [0.30, 0.15], 1.5, 20.0)
    # stable near zero: about to hold every touched page ("fits"), never given up
    assert not cannot_fill(cap, [4_000, 4_050, 4_080], [0.004, 0.003], 1.5, 1.0)
    # one sub-window, or one without an access, is not enough to tell
    assert not cannot_fill(cap, [4_000, 4_600], [0.08], 1.5, 1.0)
    assert not cannot_fill(cap, [4_000, 4_600, 5_200], [0.08, None], 1.5, 1.0)


def _flat(size: int, miss: float, settled: str = "filling") -> Probe:
    reads = int(miss * ACCESSES)
    return Probe(size, ACCESSES - reads, reads, 3.0, 12.0, settled=settled)


def test_the_two_ends_decide_a_flat_curve_from_a_buffer_still_filling() -> None:
    sizes = probe_sizes(16 * MB, 256 * MB, 4, step=8 * MB)
    assert probe_order(sizes) == [sizes[0], sizes[-1], *sizes[1:-1]]
    assert probe_order(sizes[:2]) == sizes[:2]
    cap = 256 * MB // 8192
    filling = {sizes[-1]: BufferFill(5_350, cap)}
    ends = [_flat(sizes[0], 0.080, "full"), _flat(sizes[-1], 0.072)]
    assert ends_flat_unfilled(ends, filling)
    decision = decide_set(ends, filling, 2, low=16 * MB, high=256 * MB)
    assert decision.kind == "rejected" and decision.reason.startswith("no knee found in range")
    assert "2 probe(s) between" in decision.reason
    assert search_window(decision, 16 * MB, 256 * MB, 8 * MB) is None  # the whole range
    assert not ends_flat_settled(ends, filling)
    # the largest buffer was full, or held every touched page: not "unfilled", but the ends
    # then decide "no knee" at the smallest (the middle lies between them on a falling curve)
    full_fill = {sizes[-1]: BufferFill(cap, cap)}
    fits = [_flat(sizes[0], 0.0, "full"), _flat(sizes[-1], 0.0, "fits")]
    assert not ends_flat_unfilled(ends, full_fill)
    assert not ends_flat_unfilled([ends[0], replace(ends[1], settled="fits")], filling)
    assert ends_flat_settled(ends, full_fill) and ends_flat_settled(fits, filling)
    settled = decide_set(fits, filling, 2, low=16 * MB, high=256 * MB)
    assert settled.kind == "no-knee" and settled.size == sizes[0], settled
    assert "2 probe(s) between" in settled.reason
    window = search_window(settled, 16 * MB, 256 * MB, 8 * MB)
    assert window is not None and window[0] == sizes[0] and window[2] < 256 * MB, window
    assert not ends_flat_unfilled(ends, {})  # fill unknown (no pg_buffercache)
    assert not ends_flat_settled(ends, {})
    # a knee between the ends (0.45 -> 0.01): not flat, the middle probes run
    knee = [_flat(sizes[0], 0.45, "full"), _flat(sizes[-1], 0.01, "fits")]
    assert not ends_flat_unfilled(knee, filling)
    assert not ends_flat_settled(knee, full_fill)
    # after all four probes the ordinary decision applies
    four = [*ends, _flat(sizes[1], 0.079), _flat(sizes[2], 0.075)]
    assert not ends_flat_unfilled(four, filling)
    full = decide_set(four, filling, 0, low=16 * MB, high=256 * MB)
    assert full.kind == "rejected" and "never saw a full buffer" in full.reason


def test_the_smallest_probe_alone_decides_when_its_settled_buffer_never_misses() -> None:
    sizes = probe_sizes(16 * MB, 256 * MB, 4, step=8 * MB)
    # the demo at SF 0.01: 16MB full after prewarming, P = 0.0000 over ~190,000 accesses
    small = _flat(sizes[0], 0.0, "full")
    assert fits_at_smallest([small], sizes[0])
    decision = decide_set([small], {}, 3, low=16 * MB, high=256 * MB)
    assert decision.kind == "no-knee" and decision.size == sizes[0], decision
    assert "the 3 larger probe(s) were not run" in decision.reason
    window = search_window(decision, 16 * MB, 256 * MB, 8 * MB)
    assert window is not None and window[0] == sizes[0] and window[2] < 256 * MB, window
    # what does not decide alone: misses above the flat tolerance (0.005), a buffer that had
    # not settled, a probe that is not the smallest size, and a second probe
    assert not fits_at_smallest([_flat(sizes[0], 0.02, "full")], sizes[0])
    assert not fits_at_smallest([_flat(sizes[0], 0.0, "filling")], sizes[0])
    assert not fits_at_smallest([_flat(sizes[0], 0.0, "")], sizes[0])  # cold
    assert not fits_at_smallest([_flat(sizes[-1], 0.0, "fits")], sizes[0])
    assert not fits_at_smallest([small, _flat(sizes[-1], 0.0, "fits")], sizes[0])
    assert fits_at_smallest([_flat(sizes[0], 0.004, "fits")], sizes[0])
