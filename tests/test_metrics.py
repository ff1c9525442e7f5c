"""Prometheus metrics of the server and of the tuner: they parse, carry the documented series,
and count what really happened (real in-process server over HTTP, real tuner endpoint)."""

from __future__ import annotations

import asyncio
import math
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_support import Raw, definition, running_server

from harmony_server.app import AppSettings, make_app
from harmony_server.manager import SessionManager
from harmony_server.metrics import (
    CONTENT_TYPE,
    SERVER_METRICS,
    render_metrics,
    render_metrics_text,
)
from harmony_server.stats import LatencyHistogram
from harmony_server.store import Store, default_store_url
from tuner_client.measurer import PointRecord, SampleRecord, StatsDelta
from tuner_client.metrics.exporter import (
    CURVE_POINTS,
    MISS_SLOTS,
    TUNER_METRICS,
    TunerMetrics,
    setting_to_base_units,
)
from tuner_client.stats.screening import KnobLevels, screen

#: metrics whose presence depends on what the server keeps (documented as conditional)
CONDITIONAL = {n for n in SERVER_METRICS if n.startswith("harmony_server_operation_duration")}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition text: (name, sorted labels) -> value."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(parsed: dict[Any, float], name: str, **labels: str) -> float:
    return parsed[(name, tuple(sorted(labels.items())))]


def names(parsed: dict[Any, float]) -> set[str]:
    return {name for name, _ in parsed}


def check_histogram(parsed: dict[Any, float], name: str, **labels: str) -> float:
    """Buckets are cumulative and end at +Inf == _count; returns the count."""
    buckets = sorted(((float(dict(lab)["le"]), v) for (n, lab), v in parsed.items()
                      if n == f"{name}_bucket" and all(dict(lab).get(k) == x
                                                      for k, x in labels.items())))
    counts = [v for _, v in buckets]
    assert counts == sorted(counts), f"{name}: buckets are not cumulative: {counts}"
    assert buckets[-1][0] == math.inf
    count = value(parsed, f"{name}_count", **labels)
    assert buckets[-1][1] == count
    return count


def test_server_metrics_count_real_traffic(tmp_path: Path) -> None:
    with running_server(tmp_path, render_metrics=render_metrics) as server:
        http = Raw(server.url)
        assert http("POST", "/sessions", {"definition": definition("s1")})[0] == 201
        assert http("POST", "/sessions", {"definition": definition("s2", dims=3)})[0] == 201
        for client in ("c1", "c2"):
            assert http("POST", "/sessions/s1/join", {"client": client, "host": {
                "hostname": client, "cpu_count": 2, "ram_bytes": 1 << 33}})[0] == 200
        trials = []
        for i in range(5):
            status, got = http("POST", "/sessions/s1/fetch", {"client": f"c{i % 2 + 1}"})
            assert status == 200 and got["status"] == "trial"
            trials.append(got["trial_id"])
        for i, tid in enumerate(trials[:4]):  # each trial reported by the client it went to
            assert http("POST", "/sessions/s1/report", {"client": f"c{i % 2 + 1}", "trial_id": tid,
                                                        "value": float(tid)})[1]["accepted"]
        assert http("POST", "/sessions/s1/report", {"client": "c1", "trial_id": trials[4],
                                                    "failure": True, "reason": "boom"})[0] == 200
        assert not http("POST", "/sessions/s1/report",
                        {"client": "c1", "trial_id": trials[0], "value": 9.0})[1]["accepted"]
        assert http("POST", "/sessions/nope/fetch", {"client": "c1"})[0] == 404
        assert http("POST", "/sessions/s2/pause", {})[0] == 200

        with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as response:
            assert response.headers["Content-Type"] == CONTENT_TYPE
            text = response.read().decode()

    parsed = samples(text)
    missing = set(SERVER_METRICS) - CONDITIONAL - names(parsed)
    assert not missing, f"documented series not exported: {sorted(missing)}"
    assert value(parsed, "harmony_trials_handed_out_total") == 5
    assert value(parsed, "harmony_reports_total") == 5  # 4 values + 1 failure
    assert value(parsed, "harmony_duplicate_reports_total") == 1
    assert value(parsed, "harmony_server_errors_total", kind="session_not_found") == 1
    assert value(parsed, "harmony_session_trials", session="s1", status="done") == 4
    assert value(parsed, "harmony_session_trials", session="s1", status="failed") == 1
    assert value(parsed, "harmony_session_trials", session="s1", status="leased") == 0
    assert value(parsed, "harmony_session_clients", session="s1") == 2
    assert value(parsed, "harmony_session_evaluations", session="s1") == 5  # failure included
    assert value(parsed, "harmony_session_best_value", session="s1") == min(trials[:4])
    assert value(parsed, "harmony_session_paused", session="s2") == 1
    assert value(parsed, "harmony_sessions", status="paused") == 1
    assert value(parsed, "harmony_sessions", status="running") == 1
    assert value(parsed, "harmony_server_requests_total",
                 route="/sessions/{name}/fetch") == 6
    requests = sum(v for (n, _), v in parsed.items() if n == "harmony_server_requests_total")
    # the scrape itself is counted as a request but not timed yet while it renders
    assert value(parsed, "harmony_server_requests_total", route="/metrics") == 1
    assert check_histogram(parsed, "harmony_server_request_duration_seconds") == requests - 1
    writes = value(parsed, "harmony_store_writes_total")
    assert writes >= 10 and check_histogram(parsed, "harmony_store_write_duration_seconds") \
        == writes
    assert value(parsed, "harmony_store_write_failures_total") == 0
    # the command log: 2 joins + 5 fetches + 5 reports for s1, a pause for s2
    assert value(parsed, "harmony_session_commands", session="s1") == 12
    assert value(parsed, "harmony_store_commands_total") == 13
    # the standard process metrics come along
    assert value(parsed, "process_resident_memory_bytes") > 1e6


def test_metrics_route_serves_exposition_text(tmp_path: Path) -> None:
    """The /metrics route with the renderer plugged in answers parseable text over HTTP."""
    from aiohttp.test_utils import TestClient, TestServer

    store = Store(default_store_url(tmp_path))
    manager = SessionManager(store)

    async def scrape() -> tuple[int, str, str]:
        manager.create(definition("m1"))
        app = make_app(manager, AppSettings(render_metrics=render_metrics_text))
        async with TestClient(TestServer(app)) as client:
            response = await client.get("/metrics")
            return response.status, response.headers["Content-Type"], await response.text()

    try:
        status, content_type, text = asyncio.run(scrape())
    finally:
        store.close()
    assert status == 200 and content_type.startswith("text/plain")
    parsed = samples(text)
    assert value(parsed, "harmony_session_trials", session="m1", status="done") == 0
    assert value(parsed, "harmony_server_requests_total", route="/metrics") == 1


def test_session_series_follow_live_sessions(tmp_path: Path) -> None:
    """The session label is bounded by live sessions: a killed session's series disappear."""
    store = Store(default_store_url(tmp_path))
    try:
        manager = SessionManager(store)
        for i in range(3):
            manager.create(definition(f"k{i}"))
        before = samples(render_metrics(manager).decode())
        manager.kill("k1")
        after = samples(render_metrics(manager).decode())
    finally:
        store.close()

    def sessions_in(parsed: dict[Any, float]) -> set[str]:
        return {dict(lab)["session"] for (n, lab) in parsed if n == "harmony_session_clients"}

    assert sessions_in(before) == {"k0", "k1", "k2"}
    assert sessions_in(after) == {"k0", "k2"}
    assert value(after, "harmony_sessions", status="running") == 2


def test_operation_latency_is_exported_when_the_server_keeps_it(tmp_path: Path) -> None:
    store = Store(default_store_url(tmp_path))
    try:
        manager = SessionManager(store)
        fetch, report = LatencyHistogram(), LatencyHistogram()
        for seconds in (0.0002, 0.003, 0.2, 2.0):
            fetch.observe(seconds)
        report.observe(0.0007)
        manager.stats.route_latency = {"fetch": fetch, "report": report}  # type: ignore[attr-defined]
        parsed = samples(render_metrics(manager).decode())
    finally:
        store.close()
    name = "harmony_server_operation_duration_seconds"
    assert check_histogram(parsed, name, operation="fetch") == 4
    assert check_histogram(parsed, name, operation="report") == 1
    assert value(parsed, f"{name}_bucket", operation="fetch", le="0.005") == 2
    assert value(parsed, f"{name}_sum", operation="fetch") == pytest.approx(2.2032)
    assert CONDITIONAL <= names(parsed)


# -- the tuner ------------------------------------------------------------------------------
def scrape(url: str) -> dict[Any, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return samples(response.read().decode())


def test_setting_to_base_units() -> None:
    assert setting_to_base_units("64MB") == 64 * 1024**2
    assert setting_to_base_units("8kB") == 8192
    assert setting_to_base_units("1GB") == 1024**3
    assert setting_to_base_units("200ms") == pytest.approx(0.2)
    assert setting_to_base_units("5min") == 300
    assert setting_to_base_units("4.5") == 4.5
    assert setting_to_base_units("on") == 1 and setting_to_base_units("off") == 0
    assert setting_to_base_units(True) == 1 and setting_to_base_units(7) == 7
    assert setting_to_base_units("pglz") is None and setting_to_base_units("3 parsecs") is None


def test_tuner_metrics_endpoint_reports_the_flow() -> None:
    knobs = ["shared_buffers", "work_mem", "random_page_cost", "jit"]
    metrics = TunerMetrics(knobs, tuner="test")
    port = metrics.serve("127.0.0.1", 0)
    try:
        metrics.start_pass(1)
        metrics.start_session("t-p1-offline", "offline")
        metrics.record_default(1200.0)
        metrics.record_measurement([1200.0, 1260.0, 1140.0], kind="baseline")
        metrics.record_restart(3.5)
        metrics.record_restart(60.0, ok=False)
        metrics.record_measurement([1800.0, 1900.0, 2000.0], kind="offline",
                                   knobs={"shared_buffers": "256MB"})
        metrics.start_session("t-p1-online", "online")
        metrics.record_measurement([2400.0, 2460.0, 2340.0], kind="online",
                                   knobs={"shared_buffers": "256MB", "work_mem": "64MB",
                                          "random_page_cost": "1.1", "jit": "off",
                                          "not_tuned": "1"})
        metrics.record_measurement([2100.0, 2000.0, 2050.0], kind="online",
                                   knobs={"work_mem": "4MB"})
        # the run ranks its records (paired ratios) and says which is its best
        metrics.set_best(PointRecord(session="t-p1-online", point={}, settings={},
                                     value=2460.0, in_force={"work_mem": "64MB",
                                                             "not_tuned": "1"}))
        metrics.record_failure("infeasible")
        metrics.record_failure("something else")
        metrics.set_budget_slack(-1024.0)
        metrics.record_workload_shift()
        metrics.record_local_minimum()
        metrics.record_local_minimum()
        parsed = scrape(f"http://127.0.0.1:{port}/metrics")
    finally:
        metrics.stop()
    missing = {n for n in TUNER_METRICS if not n.startswith(("harmony_tuner_bme_",
                                                            "harmony_tuner_screening_",
                                                            "harmony_tuner_miss_observation",
                                                            "harmony_tuner_buffer_miss"))
               } - names(parsed)
    assert not missing, f"documented series not exported: {sorted(missing)}"
    assert value(parsed, "harmony_tuner_info", version=value_label(parsed, "harmony_tuner_info",
                                                                    "version"),
                 tuner="test") == 1
    assert value(parsed, "harmony_tuner_pass") == 1
    assert value(parsed, "harmony_tuner_passes_total") == 1
    assert value(parsed, "harmony_tuner_phase", phase="online") == 1
    assert value(parsed, "harmony_tuner_phase", phase="offline") == 0
    # only the current session is exported: one series
    sessions = [dict(lab) for (n, lab) in parsed if n == "harmony_tuner_session_info"]
    assert sessions == [{"session": "t-p1-online", "kind": "online"}]
    assert value(parsed, "harmony_tuner_default_throughput_queries_per_second") == 20.0
    # best-of-3 of the last point: 2100 qpm = 35 qps; the best so far: 2460 qpm = 41 qps
    assert value(parsed, "harmony_tuner_throughput_queries_per_second") == pytest.approx(35.0)
    assert value(parsed, "harmony_tuner_best_throughput_queries_per_second") == \
        pytest.approx(41.0)
    assert value(parsed, "harmony_tuner_knob_value", knob="work_mem") == 4 * 1024**2
    assert value(parsed, "harmony_tuner_best_knob_value", knob="work_mem") == 64 * 1024**2
    assert value(parsed, "harmony_tuner_knob_value", knob="random_page_cost") == 1.1
    assert value(parsed, "harmony_tuner_knob_value", knob="jit") == 0
    assert value(parsed, "harmony_tuner_shared_buffers_bytes") == 256 * 1024**2
    assert not any(dict(lab).get("knob") == "not_tuned" for (_, lab) in parsed)
    assert value(parsed, "harmony_tuner_evaluations_total", kind="online") == 2
    assert value(parsed, "harmony_tuner_evaluations_total", kind="baseline") == 1
    assert value(parsed, "harmony_tuner_samples_total") == 12
    assert value(parsed, "harmony_tuner_point_samples") == 3
    assert value(parsed, "harmony_tuner_sample_spread_ratio") == pytest.approx(100 / 2050)
    assert value(parsed, "harmony_tuner_failed_points_total", kind="infeasible") == 1
    assert value(parsed, "harmony_tuner_failed_points_total", kind="other") == 1
    assert value(parsed, "harmony_tuner_failed_points_total", kind="apply") == 0
    assert value(parsed, "harmony_tuner_restarts_total") == 2
    assert value(parsed, "harmony_tuner_failed_restarts_total") == 1
    assert check_histogram(parsed, "harmony_tuner_restart_duration_seconds") == 1
    assert value(parsed, "harmony_tuner_budget_slack_bytes") == -1024
    assert value(parsed, "harmony_tuner_workload_shifts_total") == 1
    assert value(parsed, "harmony_tuner_local_minima_total") == 2


def value_label(parsed: dict[Any, float], name: str, label: str) -> str:
    return next(dict(lab)[label] for (n, lab) in parsed if n == name)


def test_tuner_metrics_buffer_misses_and_bme_curve() -> None:
    metrics = TunerMetrics(["shared_buffers"])
    mib = 1024**2
    for i in range(40):  # more observations than slots: the label stays bounded
        metrics.record_buffer_miss((16 + 8 * i) * mib, 0.9 / (1 + i))
    metrics.record_buffer_miss(None, 0.5)  # size unknown: only the gauge
    metrics.record_buffer_miss(64 * mib, 1.5)  # outside [0, 1]: ignored
    params = {"p_star": 0.02, "p_c": 0.01, "m_b": 4.0 * mib, "m_star": 192.0 * mib, "r2": 0.97}
    metrics.record_bme_fit(params, sizes=(16.0 * mib, 384.0 * mib))
    parsed = samples(metrics.render().decode())
    assert value(parsed, "harmony_tuner_buffer_miss_probability") == 0.5
    slots = {dict(lab)["slot"] for (n, lab) in parsed
             if n == "harmony_tuner_miss_observation_probability"}
    assert len(slots) == MISS_SLOTS
    assert value(parsed, "harmony_tuner_bme_m_star_bytes") == 192 * mib
    assert value(parsed, "harmony_tuner_bme_r2") == 0.97
    assert value(parsed, "harmony_tuner_bme_fits_total") == 1
    curve = [(value(parsed, "harmony_tuner_bme_curve_shared_buffers_bytes", point=str(i)),
              value(parsed, "harmony_tuner_bme_curve_probability", point=str(i)))
             for i in range(CURVE_POINTS)]
    assert curve[0][0] == 16 * mib and curve[-1][0] == 384 * mib
    misses = [p for _, p in curve]
    assert all(a >= b for a, b in zip(misses, misses[1:], strict=False))  # falls with size
    assert misses[-1] == pytest.approx(0.02)  # beyond M*: the cold-miss floor P*
    assert misses[0] > 0.1


def test_record_point_reads_a_measure_point_record() -> None:
    """The flows' own PointRecord feeds the metrics in one call."""
    metrics = TunerMetrics(["shared_buffers", "work_mem"])
    stats = StatsDelta(xact_commit=100, blks_hit=900, blks_read=100, temp_bytes=0, seconds=1.0)
    record = PointRecord(session="s-online", point={"work_mem": 32},
                         settings={"work_mem": "32MB"},
                         in_force={"shared_buffers": "128MB", "work_mem": "32MB"},
                         samples=[SampleRecord(qpm=q, completed=10, errors=0, seconds=1.0,
                                               stats=stats) for q in (600.0, 660.0, 630.0)],
                         restart_s=2.0, value=660.0)
    metrics.record_point(record, kind="offline")
    failed = PointRecord(session="s-online", point={"work_mem": 999}, settings={},
                         failure="infeasible: over the budget")
    metrics.record_point(failed)
    parsed = samples(metrics.render().decode())
    assert value(parsed, "harmony_tuner_throughput_queries_per_second") == 11.0
    assert value(parsed, "harmony_tuner_samples_total") == 3
    assert value(parsed, "harmony_tuner_evaluations_total", kind="offline") == 1
    assert value(parsed, "harmony_tuner_buffer_miss_probability") == pytest.approx(0.1)
    assert value(parsed, "harmony_tuner_miss_observation_shared_buffers_bytes", slot="0") == \
        128 * 1024**2
    assert value(parsed, "harmony_tuner_restarts_total") == 1
    assert value(parsed, "harmony_tuner_failed_points_total", kind="infeasible") == 1


def test_the_best_so_far_follows_the_runs_own_best() -> None:
    """A later, higher value (measured at another level) does not displace the run's best:
    the metrics never rank points themselves, the gauge and the best knobs follow
    ``set_best``."""
    metrics = TunerMetrics(["work_mem"])
    incumbent = PointRecord(session="p1-offline", point={}, settings={}, value=600.0,
                            in_force={"work_mem": "4MB"})
    metrics.record_point(incumbent)
    metrics.set_best(incumbent)
    higher = PointRecord(session="p1-online", point={}, settings={}, value=900.0, ratio=0.95,
                         in_force={"work_mem": "64MB"})
    metrics.record_point(higher)  # 0.95× the incumbent: the run keeps it
    metrics.set_best(incumbent)
    parsed = samples(metrics.render().decode())
    assert value(parsed, "harmony_tuner_best_throughput_queries_per_second") == 10.0
    assert value(parsed, "harmony_tuner_best_knob_value", knob="work_mem") == 4 * 1024 * 1024


def test_documented_names_are_exactly_the_exported_ones(tmp_path: Path) -> None:
    """The docs (SERVER_METRICS, TUNER_METRICS) and the exporters do not drift apart."""
    metrics = TunerMetrics(["shared_buffers"])
    metrics.start_pass(1)
    metrics.start_session("x-offline", "offline")
    metrics.record_measurement([100.0], knobs={"shared_buffers": "128MB"})
    metrics.set_best(PointRecord(session="x-offline", point={}, settings={}, value=100.0,
                                 in_force={"shared_buffers": "128MB"}))
    metrics.record_buffer_miss(1 << 27, 0.2)
    metrics.record_bme_fit({"p_star": 0.02, "p_c": 0.01, "m_b": 1e6, "m_star": 2e8})
    metrics.record_workload_shift()
    metrics.record_restart(1.0)
    metrics.record_screening(screen([KnobLevels("a", 0, 1), KnobLevels("b", 0, 1)],
                                    {"a": 0, "b": 0}, lambda p: 100.0 + 10 * p["a"],
                                    design="pb").effects)
    tuner = {n for n in names(samples(metrics.render().decode()))
             if n.startswith("harmony_") and not n.endswith("_created")}
    assert tuner == set(TUNER_METRICS)
    store = Store(default_store_url(tmp_path))
    try:
        manager = SessionManager(store)
        hosted, _ = manager.create(definition("d1"))
        got = hosted.try_fetch("c1").assignment
        assert got is not None and hosted.report(got.trial_id, 1.0, client="c1")
        manager.stats.requests["/sessions"] += 1
        manager.stats.errors["bad_request"] += 1
        manager.stats.route_latency = {"fetch": LatencyHistogram()}  # type: ignore[attr-defined]
        server = {n for n in names(samples(render_metrics(manager).decode()))
                  if n.startswith("harmony_")}
    finally:
        store.close()
    assert server == set(SERVER_METRICS)


def test_operations_doc_lists_every_series() -> None:
    doc = (Path(__file__).resolve().parent.parent / "docs" / "operations.md").read_text()
    undocumented = [n for n in (*SERVER_METRICS, *TUNER_METRICS) if f"`{n}`" not in doc]
    assert not undocumented, f"docs/operations.md does not list {undocumented}"


def test_metrics_arguments_serve_on_loopback_when_a_port_is_given(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from tuner_client.metrics.exporter import metrics_from_args
    from tuner_client.metrics.options import add_metrics_arguments

    monkeypatch.delenv("HARMONY_METRICS_PORT", raising=False)
    monkeypatch.delenv("HARMONY_METRICS_HOST", raising=False)
    parser = argparse.ArgumentParser()
    add_metrics_arguments(parser)
    quiet = metrics_from_args(parser.parse_args([]), ["work_mem"])
    assert quiet._server is None  # not served unless asked
    served = metrics_from_args(parser.parse_args(["--metrics-port", "0"]), ["work_mem"],
                               tuner="cli")
    try:
        host, port = served._server.server_address[:2]
        assert host == "127.0.0.1"
        assert value(scrape(f"http://127.0.0.1:{port}/metrics"), "harmony_tuner_pass") == 0
    finally:
        served.stop()
    assert served._server is None
