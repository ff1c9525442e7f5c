"""The ``progress`` estimator: queries credited by the share of their run time inside the
sample's window (:func:`workloads.sample.progress_credit`), on known spans, on a seeded
closed-loop simulation and on the recorder with real threads (on TPC-H:
``tests/test_measure.py``)."""

from __future__ import annotations

import statistics
import threading
import time

import numpy as np
import pytest

from harmony_base.errors import ConfigError
from tuner_client.config import parse_tuner_config
from workloads.recorder import Recorder
from workloads.sample import progress_credit


def test_credit_of_known_spans() -> None:
    # window [10, 40]: a query over [0, 20] ran half inside it; [15, 25] wholly; one started
    # at 30 expected to take 20 s has done 10 of them; one started at 5 and still running at
    # 35 s elapsed (longer than its expected 20 s) has spent 30 of its 35 s inside
    credit = progress_credit(10.0, 40.0, [(0.0, 20.0), (15.0, 25.0)],
                             [(30.0, 20.0), (5.0, 20.0)])
    assert credit == pytest.approx(0.5 + 1.0 + 0.5 + 30.0 / 35.0)
    # without an expected duration a running query counts its part as if it ended now
    assert progress_credit(10.0, 40.0, [], [(20.0, None)]) == pytest.approx(1.0)
    assert progress_credit(10.0, 40.0, [], [(40.0, 5.0)]) == 0.0  # starts at the very end


def _closed_loop(rng: np.random.Generator, *, streams: dict[float, int], window: float,
                 windows: int, cv: float) -> tuple[list[float], list[float]]:
    """Count and progress credit of ``windows`` consecutive windows over closed-loop streams
    (mean duration -> streams) with lognormal durations of about ``cv``."""
    horizon = window * (windows + 2)
    runs: list[tuple[float, float, float]] = []  # (started, ended, mean)
    for mean, n in streams.items():
        for _ in range(n):
            t = -rng.uniform(0, mean)
            while t < horizon:
                d = mean * rng.lognormal(-cv * cv / 2, cv)
                runs.append((t, t + d, mean))
                t += d
    counts, credits = [], []
    for i in range(1, windows + 1):
        s, e = i * window, (i + 1) * window
        finished = [(a, b) for a, b, _ in runs if s <= b < e]
        running = [(a, m) for a, b, m in runs if a < e <= b]
        counts.append(float(len(finished)))
        credits.append(progress_credit(s, e, finished, running))
    return counts, credits


def test_progress_keeps_the_count_s_mean_and_removes_its_noise_at_the_ends() -> None:
    """The study's memory-bound mix in miniature: 4 streams of a 3.5-s query, 4 of 11 s and
    4 of 42 s, in 30-s windows (seeded). Same expectation as the count. Where the queries'
    durations vary little (5 %), the count's spread is the windows' ends deciding whether a
    long query counts 0 or 1, and progress removes most of it; where they vary 30 % (random
    parameters), part of the spread is the work itself and progress still narrows it."""
    expected = 30.0 * (4 / 3.5 + 4 / 11.0 + 4 / 42.0)  # queries a window, in steady state
    cvs = {}
    for cv in (0.05, 0.3):
        counts, credits = _closed_loop(np.random.default_rng(11), streams={3.5: 4, 11.0: 4,
                                                                           42.0: 4},
                                       window=30.0, windows=400, cv=cv)
        assert statistics.fmean(counts) == pytest.approx(expected, rel=0.03)
        assert statistics.fmean(credits) == pytest.approx(expected, rel=0.03)
        cvs[cv] = (statistics.stdev(counts) / statistics.fmean(counts),
                   statistics.stdev(credits) / statistics.fmean(credits))
    (count_5, progress_5), (count_30, progress_30) = cvs[0.05], cvs[0.3]
    assert count_5 > 0.02 and progress_5 < 0.35 * count_5, cvs
    assert progress_30 < 0.9 * count_30, cvs


def test_the_recorder_credits_running_queries_from_its_streams() -> None:
    """Three threads run 0.25-s 'queries' through the recorder's begin/record; a 1-s window
    is credited 60 * 3 / 0.25 = 720 queries per minute up to scheduling delays, whichever of
    them happened to end inside it."""
    recorder = Recorder()
    stop = threading.Event()

    def stream() -> None:
        while not stop.is_set():
            token, started = recorder.begin("Q1")
            time.sleep(0.25)
            recorder.record("Q1", started, ok=True, token=token)

    threads = [threading.Thread(target=stream) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.4)
        samples = [recorder.sample(1.0) for _ in range(3)]
    finally:
        stop.set()
        for t in threads:
            t.join()
    for got in samples:
        assert got.progress_qpm is not None
        mean = got.per_query["Q1"].mean
        assert mean is not None and mean >= 0.25
        assert 0.85 * 180.0 / mean < got.progress_qpm <= 1.02 * 180.0 / mean, \
            (got.progress_qpm, mean)
    # a stream that stopped mid-query is forgotten: later windows credit nothing for it
    token, _ = recorder.begin("Q1")
    recorder.forget(token)
    assert recorder.sample(0.05).progress_qpm == 0.0
    # a driver that never reports starts gives no progress value
    assert Recorder().sample(0.01).progress_qpm is None


def test_the_estimator_is_only_for_drivers_that_report_starts() -> None:
    cfg = parse_tuner_config("name: x\nmeasure: {estimator: progress}\n")
    assert cfg.measure.estimator == "progress"
    with pytest.raises(ConfigError) as err:
        parse_tuner_config("name: x\nworkload: {pgbench: {scale: 1}}\n"
                           "measure: {estimator: progress}\n", source="configs/p.yaml")
    msg = str(err.value)
    assert "configs/p.yaml" in msg and "measure.estimator" in msg and "pgbench" in msg
