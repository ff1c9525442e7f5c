"""Unit tests: mixes, schedules, durations and the sample arithmetic (no database)."""

from __future__ import annotations

import threading
import time

import pytest

from harmony_base.errors import WorkloadError
from workloads.mix import Mix, parse_mix
from workloads.recorder import Recorder
from workloads.sample import Sample, percentile, summarize
from workloads.schedule import Schedule, parse_duration, parse_schedule


def test_compact_mix_keeps_order_and_counts() -> None:
    mix = parse_mix("4Q6,4Q9, 4q13")
    assert mix.streams == (("Q6", 4), ("Q9", 4), ("Q13", 4))
    assert mix.total_streams == 12
    assert str(mix) == "4Q6,4Q9,4Q13"
    assert parse_mix(mix) is mix


def test_yaml_list_forms_give_the_same_mix() -> None:
    expected = Mix((("Q6", 2), ("Q13", 1)))
    assert parse_mix("- 2Q6\n- 1Q13\n") == expected
    assert parse_mix("- {query: Q6, streams: 2}\n- {query: 13, streams: 1}") == expected
    assert parse_mix(["2Q6", {"query": "q13", "streams": 1}]) == expected
    assert parse_mix("[2Q6, 1Q13]") == expected


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("4Q23", "Q1..Q22"),
        ("Q6", "stream count before the query, like 1Q6"),
        ("-1Q6", "must be >= 1, but got -1"),
        ("0Q6", "must be >= 1, but got 0"),
        ("", "at least one term"),
        ("   ", "at least one term"),
        ("4Q6,", "<streams>Q<query>"),
        ("4Q6,2Q6", "appears twice"),
        ("four Q6", "<streams>Q<query>"),
        ([], "at least one term"),
        ([{"query": "Q6"}], "{query: Q6, streams: 4}"),
        ([{"query": "Q6", "streams": "2"}], "whole number"),
        ("- 1Q6\n- [bad", "not valid YAML"),
    ],
)
def test_bad_mixes_name_the_problem(spec: object, fragment: str) -> None:
    with pytest.raises(WorkloadError, match=None) as info:
        parse_mix(spec)  # type: ignore[arg-type]
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90m", 5400.0), ("1h30m", 5400.0), ("45s", 45.0), ("30", 30.0), (2.5, 2.5), ("0.5m", 30.0)],
)
def test_durations(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["0s", "-5m", "abc", "5x", "90m extra", "", "inf", "nan"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(WorkloadError, match="duration"):
        parse_duration(text)


def test_schedule_compact_and_yaml_agree() -> None:
    compact = parse_schedule("12Q6:90m;6Q7,6Q13:30m")
    yaml_form = parse_schedule(
        "- {mix: 12Q6, duration: 90m}\n- {mix: [6Q7, 6Q13], duration: 1800}\n"
    )
    assert compact == yaml_form
    assert [(str(p.mix), p.seconds) for p in compact.phases] == [
        ("12Q6", 5400.0),
        ("6Q7,6Q13", 1800.0),
    ]
    assert compact.total_seconds == 7200.0
    assert Schedule([("1Q6", 10)]).phases[0].seconds == 10.0


@pytest.mark.parametrize(
    "spec",
    ["", "12Q6", "12Q6:0s", "Q6:5m", "4Q23:1m", "- {mix: 1Q6}", "- {mix: 1Q6, duration: 1, x: 2}"],
)
def test_bad_schedules(spec: str) -> None:
    with pytest.raises(WorkloadError):
        parse_schedule(spec)


def test_percentile_interpolates() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([3.0], 95) == 3.0
    assert percentile([], 50) is None


def test_summarize_counts_rates_and_lists_idle_queries() -> None:
    sample = summarize(
        [("Q6", 0.1), ("Q6", 0.3), ("Q13", 1.0)], ["Q13"], 30.0, ("Q6", "Q13", "Q9"), "x"
    )
    assert sample.completed == 3 and sample.errors == 1
    assert sample.qpm == pytest.approx(6.0)
    assert sample.per_query["Q6"].qpm == pytest.approx(4.0)
    assert sample.per_query["Q6"].p50 == pytest.approx(0.2)
    assert sample.per_query["Q13"].errors == 1
    assert sample.per_query["Q9"].completed == 0 and sample.per_query["Q9"].p50 is None


def test_fixed_work_counts_exactly_after_the_first_completion() -> None:
    recorder = Recorder()
    stop = threading.Event()

    def produce(query: str) -> None:
        while not stop.is_set():
            recorder.record(query, time.monotonic() - 0.001, ok=True)
            time.sleep(0.001)

    threads = [threading.Thread(target=produce, args=(q,)) for q in ("Q6", "Q6", "Q13")]
    for t in threads:
        t.start()
    try:
        before = recorder.total_completed
        sample = recorder.sample(queries=200, timeout_s=10)
        after = recorder.total_completed
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert sample.completed == 200
    assert sum(s.completed for s in sample.per_query.values()) == 200
    assert after - before >= 201  # the marking completion is not counted
    assert sample.seconds > 0


def test_sample_arguments_are_checked() -> None:
    recorder = Recorder()
    with pytest.raises(WorkloadError, match="exactly one"):
        recorder.sample()
    with pytest.raises(WorkloadError, match="exactly one"):
        recorder.sample(1.0, queries=3)
    with pytest.raises(WorkloadError, match="> 0 seconds"):
        recorder.sample(0.0)
    with pytest.raises(WorkloadError, match="queries >= 1"):
        recorder.sample(queries=0)
    with pytest.raises(WorkloadError, match="did not finish within 0.05 s"):
        recorder.sample(queries=1, timeout_s=0.05)


def test_fixed_work_sample_fails_fast_when_queries_keep_failing() -> None:
    """A crash-looping server fails the sample after ``queries`` errors, not at the timeout."""
    recorder = Recorder()
    stop = threading.Event()
    failures = 0

    def produce() -> None:
        nonlocal failures
        while not stop.is_set():
            recorder.record("Q9", time.monotonic() - 0.001, ok=False)
            failures += 1
            time.sleep(0.002)

    thread = threading.Thread(target=produce)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(WorkloadError, match=r"20 queries failed .* \(0 completed\)"):
            recorder.sample(queries=20, timeout_s=60)
    finally:
        stop.set()
        thread.join()
    # the 20th failure ended it, not the 60-s timeout (whose error the match above refuses)
    assert time.monotonic() - started < 60
    assert failures >= 20


def test_fixed_work_sample_tolerates_fewer_failures_than_its_work() -> None:
    recorder = Recorder()
    stop = threading.Event()

    def produce() -> None:
        i = 0
        while not stop.is_set():
            recorder.record("Q6", time.monotonic() - 0.001, ok=i % 4 != 0)  # 1 in 4 fails
            i += 1
            time.sleep(0.001)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        sample = recorder.sample(queries=30, timeout_s=30)
    finally:
        stop.set()
        thread.join()
    assert sample.completed == 30
    assert 8 <= sample.errors <= 11  # ~1 failure per 3 completions inside the window


def test_concurrency_estimate_is_streams_over_mean_latency() -> None:
    # 4 streams of Q6 at 2 s per query and 2 of Q9 at 10 s: 4/2 + 2/10 = 2.2 per s = 132 qpm
    completions = [("Q6", 1.5), ("Q6", 2.5), ("Q9", 10.0), ("Q6", 2.0)]
    sample = summarize(completions, [], seconds=5.0, concurrency={"Q6": 4, "Q9": 2})
    assert sample.concurrency_qpm == pytest.approx(132.0)
    assert sample.qpm == pytest.approx(48.0)  # the count: 4 completions in 5 s
    # a query of the mix with no completion: no estimate
    assert summarize([("Q6", 2.0)], [], 5.0, concurrency={"Q6": 4, "Q9": 2}).concurrency_qpm \
        is None
    assert summarize([("Q6", 2.0)], [], 5.0).concurrency_qpm is None


def test_since_drops_queries_started_under_the_previous_configuration() -> None:
    recorder = Recorder()
    results: list[object] = []
    applied = time.monotonic()

    def sample() -> None:
        results.append(recorder.sample(queries=2, timeout_s=10, since=applied, every_query=True,
                                       concurrency=lambda: {"Q6": 1, "Q9": 1}))

    thread = threading.Thread(target=sample)
    thread.start()
    time.sleep(0.05)
    now = time.monotonic()
    recorder.record("Q9", applied - 5.0, ok=True)  # started before: ignored, even as the mark
    recorder.record("Q6", applied + 0.001, ok=True)  # the mark
    recorder.record("Q6", now - 0.02, ok=True)
    recorder.record("Q6", now - 0.02, ok=True)  # 2 completions, but no Q9 yet: not done
    time.sleep(0.05)
    assert thread.is_alive()
    recorder.record("Q9", applied - 1.0, ok=False)  # an old failure does not count either
    recorder.record("Q9", now - 0.01, ok=True)
    thread.join(timeout=5)
    assert not thread.is_alive()
    (got,) = results
    assert isinstance(got, Sample)
    assert got.completed == 3 and got.errors == 0
    assert set(got.per_query) >= {"Q6", "Q9"} and got.per_query["Q9"].completed == 1
    q6, q9 = got.per_query["Q6"].mean, got.per_query["Q9"].mean
    assert q6 is not None and q9 is not None
    assert got.concurrency_qpm == pytest.approx(60.0 * (1 / q6 + 1 / q9))
