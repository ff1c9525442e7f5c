"""The ledger of comparisons (:mod:`tuner_client.stats.ledger`): a configuration's ratio to
the original carried through the chain of paired comparisons that measured it, and the run
ranking its candidates by it (:meth:`tuner_client.phases.state.RunState.rank`,
:func:`tuner_client.phases.final_candidates.rank_configurations`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tuner_client.measurer import PointRecord
from tuner_client.phases.final_candidates import rank_configurations
from tuner_client.phases.state import RunState
from tuner_client.stats.ledger import Ledger, interval_variance

#: the demo's tuned knobs before the run
ORIGINAL = {"shared_buffers": "128MB", "work_mem": "4MB", "max_parallel_workers_per_gather": "2"}
ONLINE = ("work_mem", "max_parallel_workers_per_gather")


def _record(session: str, value: float, ratio: float, *, reference: list[float] | None = None,
            interval: tuple[float, float] | None = None, design: str = "windows",
            **settings: str) -> PointRecord:
    return PointRecord(session=session, point={}, settings=dict(settings),
                       in_force={**ORIGINAL, **settings}, value=value, ratio=ratio,
                       reference=list(reference or []), design=design, interval=interval)


def test_log_ratios_and_variances_add_along_a_chain() -> None:
    ledger = Ledger.of(ORIGINAL)
    a = {**ORIGINAL, "shared_buffers": "24MB"}
    b = {**a, "work_mem": "64MB"}
    ledger.add(ORIGINAL, a, 1.10, 0.02 ** 2)
    ledger.add(a, b, 1.20, 0.03 ** 2)
    st = ledger.standing(b)
    assert st is not None
    assert st.ratio == pytest.approx(1.32)
    assert st.variance == pytest.approx(0.02 ** 2 + 0.03 ** 2)
    assert st.depth == 2 and st.links == 2
    low, high = st.interval()
    assert low == pytest.approx(1.32 * math.exp(-1.96 * math.sqrt(0.0013)), rel=1e-3)
    assert high > 1.32 > low > 1.0
    assert ledger.standing(ORIGINAL) is not None and ledger.standing(ORIGINAL).ratio == 1.0
    # nothing chains to a configuration only measured against an unknown reference
    ledger.add({**ORIGINAL, "work_mem": "1MB"}, {**ORIGINAL, "work_mem": "2MB"}, 1.5)
    assert ledger.standing({**ORIGINAL, "work_mem": "2MB"}) is None


def test_repeated_links_pool_by_inverse_variance() -> None:
    ledger = Ledger.of(ORIGINAL)
    a = {**ORIGINAL, "work_mem": "64MB"}
    ledger.add(ORIGINAL, a, math.exp(0.10), 0.04 ** 2)
    ledger.add(ORIGINAL, a, math.exp(0.20), 0.02 ** 2)
    st = ledger.standing(a)
    assert st is not None
    # weights 625 and 2500: (0.10·625 + 0.20·2500) / 3125 = 0.18
    assert st.log_ratio == pytest.approx(0.18)
    assert st.variance == pytest.approx(1 / 3125)


def test_a_window_link_takes_the_runs_own_noise() -> None:
    """Without an interval a window's link gets the variance of the run's window noise,
    estimated from the reference's drifts (log(after/before) is two windows' noise)."""
    ledger = Ledger.of(ORIGINAL)
    rng = np.random.default_rng(3)
    for d in 0.08 * math.sqrt(2) * rng.standard_normal(400):
        ledger.note_drift(1000.0, 1000.0 * math.exp(d))
    assert math.sqrt(ledger.window_variance()) == pytest.approx(0.08, rel=0.1)
    link = ledger.add(ORIGINAL, {**ORIGINAL, "work_mem": "8MB"}, 1.1, references=2)
    assert link is not None and link.variance == pytest.approx(1.5 * ledger.window_variance())
    assert interval_variance(1.15, 1.28) == pytest.approx(
        ((math.log(1.28) - math.log(1.15)) / 3.92) ** 2, rel=1e-3)
    assert interval_variance(0.0, 2.0) is None


def test_the_online_best_outranks_the_offline_best_by_its_paired_ratio_and_is_raced() -> None:
    """The demo's case: an offline window read 8,885 queries/min; the online search, against
    the offline best then in force, read 1.215× (per transaction, parallel workers 0) but
    came to 7,939 queries/min minutes later. Ranked by levels the offline point raced as
    "best"; through the ledger the online configuration is 1.215× the offline best's own
    standing, so it is the run's best and the race's first candidate."""
    state = RunState()
    offline_lucky = _record("p1-offline", 8_885.0, 1.03, reference=[8_500.0, 8_750.0],
                            shared_buffers="24MB")
    offline_best = _record("p1-offline", 8_440.0, 1.09, reference=[7_600.0, 7_900.0],
                           shared_buffers="16MB")
    offline_ref = {"shared_buffers": "128MB"}  # the session's reference: the original
    for rec in (offline_lucky, offline_best):
        state.records.append(rec)
        state.rank(rec, offline_ref, ORIGINAL)
    # the offline phase's best and the run's best are one point (not the highest level)
    assert state.best is offline_best
    assert state.best_among([offline_lucky, offline_best]) is offline_best
    online_ref = {n: ORIGINAL[n] for n in ONLINE}  # the online originals over the offline best
    online = _record("p1-online", 7_939.0, 1.215, interval=(1.15, 1.28),
                     design="per-transaction", shared_buffers="16MB",
                     max_parallel_workers_per_gather="0")
    state.records.append(online)
    assert state.rank(online, online_ref, ORIGINAL)
    assert state.best is online
    assert online.value is not None and offline_lucky.value is not None
    assert online.value < offline_lucky.value  # a lower absolute level ...
    st = state.standing(online)
    assert st is not None and st.depth == 2
    assert st.ratio == pytest.approx(1.09 * 1.215, rel=0.02)  # ... and 1.32× the original
    ranked = rank_configurations(state.records, ORIGINAL, state.ledger)
    assert ranked[0][0] == {**ORIGINAL, "shared_buffers": "16MB",
                            "max_parallel_workers_per_gather": "0"}
    assert [s["shared_buffers"] for s, _ in ranked[1:]] == ["16MB", "24MB"]
    # by levels alone (no ledger) the lucky offline window would have raced first
    assert rank_configurations(state.records, ORIGINAL)[0][0]["shared_buffers"] == "24MB"


def test_a_shift_forgets_the_ledger() -> None:
    state = RunState()
    rec = _record("p1-online", 100.0, 1.2, work_mem="64MB")
    state.rank(rec, {"work_mem": "4MB"}, ORIGINAL)
    assert state.standing(rec) is not None
    state.forget_best()
    assert state.standing(rec) is None and state.best is None


def test_a_noisy_evaluation_does_not_outrank_precise_ones_on_its_luck() -> None:
    """An A/A of server-wide knobs (s31, run 0): against the online reference, a duet
    evaluation of 3 batches read 1.05× (0.35–3.14) and the precise ones 0.97–1.03×; ranked
    by points the noisy one raced first. Each link shrunk toward no change by its noise
    (τ² from the run's links, here at its 1 % floor), the precise 1.03× ranks first, the
    noisy one below every precise one above 1; the standings' own points stay as measured."""
    state = RunState()
    ref = {"work_mem": "4MB"}
    reads = {"8MB": (1.05, (0.35, 3.14)), "16MB": (1.03, (0.99, 1.07)),
             "32MB": (1.00, (0.95, 1.06)), "64MB": (0.97, (0.91, 1.04)),
             "2MB": (1.01, (0.96, 1.06))}
    records = {}
    for work_mem, (ratio, interval) in reads.items():
        records[work_mem] = rec = _record("p1-online", 100.0 * ratio, ratio, interval=interval,
                                          design="duet", work_mem=work_mem)
        state.records.append(rec)
        state.rank(rec, ref, ORIGINAL)
    assert state.ledger is not None
    assert state.ledger.effect_variance() == pytest.approx(0.01 ** 2)
    assert state.best is records["16MB"]
    ranked = [s["work_mem"] for s, _ in rank_configurations(state.records, ORIGINAL,
                                                           state.ledger)]
    assert ranked[0] == "16MB" and ranked.index("8MB") > ranked.index("2MB"), ranked
    noisy = state.standing(records["8MB"])
    assert noisy is not None and noisy.ratio == pytest.approx(1.05)  # shown as measured
    # by the points alone the noisy link would have ranked first
    standings = state.ledger.standings()
    assert max(standings, key=lambda k: standings[k].log_ratio)[1] == "8MB"


def test_precise_links_keep_their_order_and_real_spread_shrinks_little() -> None:
    """Where the effects are real (the demo's online candidates, 1.10–1.30× at ±3 %), τ²
    comes from them and a ±3 % link keeps nearly all its effect: the ranking is the points'.
    A 1.35× read at ±60 % is shrunk below the precise 1.30×."""
    ledger = Ledger.of(ORIGINAL)
    ref = dict(ORIGINAL)
    for work_mem, ratio in (("8MB", 1.10), ("16MB", 1.20), ("32MB", 1.30), ("64MB", 1.25)):
        ledger.add(ref, {**ORIGINAL, "work_mem": work_mem}, ratio,
                   interval_variance(ratio / 1.03, ratio * 1.03))
    ledger.add(ref, {**ORIGINAL, "work_mem": "2MB"}, 1.35, interval_variance(1.35 / 1.6,
                                                                            1.35 * 1.6))
    tau2 = ledger.effect_variance()
    assert 0.02 < tau2 < 0.05  # the precise links' own spread of log-ratios
    order = [k[1] for k in ledger.rank(list(ledger.standings()))]
    assert [k for k in order if k in ("8MB", "16MB", "32MB", "64MB")] == \
        ["32MB", "64MB", "16MB", "8MB"], order
    assert order.index("2MB") > order.index("64MB"), order
    kept = ledger.score({**ORIGINAL, "work_mem": "32MB"})
    assert kept is not None and kept == pytest.approx(math.log(1.30), rel=0.01)
    noisy = ledger.score({**ORIGINAL, "work_mem": "2MB"})
    assert noisy is not None and noisy < math.log(1.25)
