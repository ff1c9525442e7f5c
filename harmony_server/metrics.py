"""The server's Prometheus metrics: its plain counters and live session state as exposition text.

The server and its store keep plain numbers (:mod:`harmony_server.stats`); this module is the
only place that knows Prometheus. A custom collector reads them at scrape time, so nothing is
counted twice and nothing here runs on the request path. Names follow the Prometheus
conventions: ``harmony_`` prefix, base units (seconds), ``_total`` for counters. Labels are
bounded: ``session`` takes one value per live session, ``route`` one per API route,
``kind``/``status`` come from fixed sets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from harmony_base.version import __version__
from harmony_server.stats import BACKGROUND_TASKS, LatencyHistogram, ServerStats, StoreStats

__all__ = ["CONTENT_TYPE", "SERVER_METRICS", "ServerCollector", "render_metrics",
           "render_metrics_text"]

logger = logging.getLogger(__name__)

#: the Content-Type of the exposition text ``render_metrics`` returns (classic text format)
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

#: every series this module exports (sample names) -> what it means; docs and tests use it
SERVER_METRICS: dict[str, str] = {
    "harmony_server_info": "constant 1; label version: the harmony version serving",
    "harmony_server_start_time_seconds": "when this server process started (Unix time)",
    "harmony_sessions": "sessions hosted, by status (running, paused, converged, broken)",
    "harmony_server_requests_total": "HTTP requests, by route (the API's path templates)",
    "harmony_server_errors_total": "HTTP error answers, by kind (bad_request, not_found, ...)",
    "harmony_server_request_duration_seconds_bucket": "HTTP request latency histogram (all routes)",
    "harmony_server_request_duration_seconds_sum": "sum of HTTP request latencies",
    "harmony_server_request_duration_seconds_count": "number of HTTP requests timed",
    "harmony_server_operation_duration_seconds_bucket":
        "latency per API operation (label operation: fetch, report, ...) when the server keeps "
        "ServerStats.route_latency",
    "harmony_server_operation_duration_seconds_sum": "sum of latencies per operation",
    "harmony_server_operation_duration_seconds_count": "requests timed per operation",
    "harmony_trials_handed_out_total": "trials handed out by fetch (leases granted)",
    "harmony_fetch_waits_total": "fetches that answered 'wait' (nothing ready in time)",
    "harmony_reports_total": "reports accepted",
    "harmony_duplicate_reports_total": "duplicate reports ignored",
    "harmony_leases_expired_total": "leases that expired: the trial was handed out again",
    "harmony_background_task_errors_total": "errors a background task (label task: "
                                            "lease_sweeper) caught and survived",
    "harmony_background_task_restarts_total": "times a background task crashed, was logged and "
                                              "was started again (label task)",
    "harmony_store_writes_total": "store transactions committed",
    "harmony_store_commands_total": "commands appended to the durable command log",
    "harmony_store_trial_rows_total": "trial rows upserted",
    "harmony_store_write_failures_total": "store transactions that failed",
    "harmony_store_write_duration_seconds_bucket": "store write (commit) latency histogram",
    "harmony_store_write_duration_seconds_sum": "sum of store write latencies",
    "harmony_store_write_duration_seconds_count": "number of store writes timed",
    "harmony_session_trials": "trials of a session, by status (leased, done, failed, released)",
    "harmony_session_candidates": "distinct points the session's strategy asked for",
    "harmony_session_evaluations": "finished evaluations (aggregated candidates, failed ones "
                                   "included) of a session",
    "harmony_session_clients": "clients that joined a session",
    "harmony_session_leases": "outstanding leases of a session",
    "harmony_session_commands": "length of a session's durable command log",
    "harmony_session_best_value": "a session's best value so far, in the objective's own sign",
    "harmony_session_converged": "1 when a session's search has converged",
    "harmony_session_paused": "1 when a session is paused",
    "harmony_session_created_seconds": "when a session was created (Unix time)",
}

#: trial states the session core knows (fixed label values)
TRIAL_STATES = ("leased", "done", "failed", "released")
#: session states reported by ``harmony_sessions``
SESSION_STATES = ("running", "paused", "converged", "broken")


class StatsSource(Protocol):
    """What the collector reads: a :class:`SessionManager` fits (``stats``, ``store``, sessions)."""

    stats: ServerStats


def histogram_family(name: str, doc: str, hist: LatencyHistogram,
                     labels: Mapping[str, str] | None = None,
                     family: HistogramMetricFamily | None = None) -> HistogramMetricFamily:
    """A Prometheus histogram (cumulative buckets, ``+Inf``) from a :class:`LatencyHistogram`."""
    snap = hist.snapshot()
    cumulative = 0
    buckets: list[tuple[str, float]] = []
    for bound, n in zip(snap.buckets, snap.counts, strict=False):
        cumulative += n
        buckets.append((_le(bound), float(cumulative)))
    buckets.append(("+Inf", float(snap.count)))
    keys = list(labels or {})
    if family is None:
        family = HistogramMetricFamily(name, doc, labels=keys)
    family.add_metric([str(labels[k]) for k in keys] if labels else [], buckets,
                      sum_value=float(snap.sum))
    return family


def _le(bound: float) -> str:
    # the exposition text's canonical form of a bucket bound (repr keeps 0.0001 exact)
    return repr(float(bound))


class ServerCollector:
    """Reads a session manager's counters and live sessions at scrape time.

    ``source`` is a :class:`~harmony_server.manager.SessionManager` (or anything with
    ``stats``, and optionally ``store.stats``, ``sessions`` and ``broken``); collection must
    run on the thread that mutates it (the server's event loop), which the ``/metrics``
    handler does.
    """

    def __init__(self, source: StatsSource, *, started: float | None = None) -> None:
        self.source = source
        self.started = time.time() if started is None else started

    def describe(self) -> Iterable[Metric]:
        return []  # unchecked collector: families are built at scrape time

    def collect(self) -> Iterator[Metric]:
        stats: ServerStats = self.source.stats
        info = GaugeMetricFamily("harmony_server_info", "The harmony version serving.",
                                 labels=["version"])
        info.add_metric([__version__], 1.0)
        yield info
        yield GaugeMetricFamily("harmony_server_start_time_seconds",
                                "When this server process started (Unix time).",
                                value=self.started)
        yield from self._requests(stats)
        yield from self._trial_counters(stats)
        store = getattr(self.source, "store", None)
        store_stats = getattr(store, "stats", None)
        if isinstance(store_stats, StoreStats):
            yield from self._store(store_stats)
        yield from self._sessions()

    # -- families -------------------------------------------------------------------------
    @staticmethod
    def _requests(stats: ServerStats) -> Iterator[Metric]:
        requests = CounterMetricFamily("harmony_server_requests",
                                       "HTTP requests by route.", labels=["route"])
        for route, n in sorted(stats.requests.items()):
            requests.add_metric([route], float(n))
        yield requests
        errors = CounterMetricFamily("harmony_server_errors",
                                     "HTTP error answers by kind.", labels=["kind"])
        for kind, n in sorted(stats.errors.items()):
            errors.add_metric([kind], float(n))
        yield errors
        yield histogram_family("harmony_server_request_duration_seconds",
                               "HTTP request latency (all routes).", stats.request_latency)
        # per-operation latency, when the server keeps it (``route_latency``: name -> histogram)
        per_route: Mapping[str, LatencyHistogram] | None = getattr(stats, "route_latency", None)
        if per_route:
            family = HistogramMetricFamily("harmony_server_operation_duration_seconds",
                                           "Latency per API operation (fetch, report, ...).",
                                           labels=["operation"])
            for operation in sorted(per_route):
                histogram_family(family.name, family.documentation, per_route[operation],
                                 {"operation": operation}, family)
            yield family

    @staticmethod
    def _trial_counters(stats: ServerStats) -> Iterator[Metric]:
        for name, doc, value in (
                ("harmony_trials_handed_out", "Trials handed out by fetch.", stats.fetch_trials),
                ("harmony_fetch_waits", "Fetches that answered 'wait'.", stats.fetch_waits),
                ("harmony_reports", "Reports accepted.", stats.reports),
                ("harmony_duplicate_reports", "Duplicate reports ignored.",
                 stats.duplicate_reports),
                ("harmony_leases_expired", "Leases expired; the trial was handed out again.",
                 stats.leases_expired)):
            yield CounterMetricFamily(name, doc, value=float(value))
        for name, doc, counts in (
                ("harmony_background_task_errors", "Errors a background task caught and "
                 "survived (one session's step failed), by task.", stats.background_errors),
                ("harmony_background_task_restarts", "Times a background task crashed and was "
                 "started again, by task.", stats.background_restarts)):
            family = CounterMetricFamily(name, doc, labels=["task"])
            for task in sorted(set(BACKGROUND_TASKS) | set(counts)):
                family.add_metric([task], float(counts.get(task, 0)))
            yield family

    @staticmethod
    def _store(stats: StoreStats) -> Iterator[Metric]:
        for name, doc, value in (
                ("harmony_store_writes", "Store transactions committed.", stats.writes),
                ("harmony_store_commands", "Commands appended to the command log.",
                 stats.commands),
                ("harmony_store_trial_rows", "Trial rows upserted.", stats.trial_rows),
                ("harmony_store_write_failures", "Store transactions that failed.",
                 stats.failures)):
            yield CounterMetricFamily(name, doc, value=float(value))
        yield histogram_family("harmony_store_write_duration_seconds",
                               "Store write (commit) latency.", stats.write_latency)

    def _sessions(self) -> Iterator[Metric]:
        hosted: Mapping[str, Any] = getattr(self.source, "sessions", {}) or {}
        broken: Mapping[str, str] = getattr(self.source, "broken", {}) or {}
        by_state = dict.fromkeys(SESSION_STATES, 0)
        by_state["broken"] = len(broken)
        trials = GaugeMetricFamily("harmony_session_trials", "Trials of a session by status.",
                                   labels=["session", "status"])
        gauges = _session_gauges()
        for name in sorted(hosted):
            session = hosted[name]
            try:
                core = session.core
                counts = core.counts()
                converged, paused = bool(core.converged), bool(core.paused)
            except Exception:  # a broken plugin must not take the whole scrape down
                logger.exception("metrics: session %s could not be read", name)
                continue
            by_state["paused" if paused else "converged" if converged else "running"] += 1
            for status in TRIAL_STATES:
                trials.add_metric([name, status], float(counts.get(status, 0)))
            _add_session_gauges(gauges, name, session, counts, converged, paused)
        states = GaugeMetricFamily("harmony_sessions", "Sessions hosted, by status.",
                                   labels=["status"])
        for state in SESSION_STATES:
            states.add_metric([state], float(by_state[state]))
        yield states
        yield trials
        yield from gauges.values()


def _session_gauges() -> dict[str, GaugeMetricFamily]:
    """The per-session gauge families (label ``session``), by short name."""
    return {
        "candidates": GaugeMetricFamily("harmony_session_candidates",
                                        "Points the session's strategy asked for.",
                                        labels=["session"]),
        "evaluations": GaugeMetricFamily("harmony_session_evaluations",
                                         "Completed evaluations of a session.",
                                         labels=["session"]),
        "clients": GaugeMetricFamily("harmony_session_clients",
                                     "Clients that joined a session.", labels=["session"]),
        "leases": GaugeMetricFamily("harmony_session_leases",
                                    "Outstanding leases of a session.", labels=["session"]),
        "commands": GaugeMetricFamily("harmony_session_commands",
                                      "Length of a session's command log.",
                                      labels=["session"]),
        "best": GaugeMetricFamily("harmony_session_best_value",
                                  "Best value so far, in the objective's sign.",
                                  labels=["session"]),
        "converged": GaugeMetricFamily("harmony_session_converged",
                                       "1 when the search has converged.",
                                       labels=["session"]),
        "paused": GaugeMetricFamily("harmony_session_paused", "1 when paused.",
                                    labels=["session"]),
        "created": GaugeMetricFamily("harmony_session_created_seconds",
                                     "When the session was created (Unix time).",
                                     labels=["session"]),
    }


def _add_session_gauges(gauges: dict[str, GaugeMetricFamily], name: str, session: Any,
                        counts: Mapping[str, Any], converged: bool, paused: bool) -> None:
    """One hosted session's samples of the per-session gauges."""
    core = session.core
    label = [name]
    gauges["candidates"].add_metric(label, float(counts.get("candidates", 0)))
    gauges["evaluations"].add_metric(label, float(counts.get("completed", 0)))
    gauges["clients"].add_metric(label, float(len(core.clients)))
    gauges["leases"].add_metric(label, float(len(getattr(session, "leases", {}))))
    gauges["commands"].add_metric(label, float(getattr(session, "seq", 0)))
    best = core.best()
    if best is not None:
        gauges["best"].add_metric(label, float(best[1]))
    gauges["converged"].add_metric(label, 1.0 if converged else 0.0)
    gauges["paused"].add_metric(label, 1.0 if paused else 0.0)
    created = getattr(session, "created", None)
    if created is not None:
        gauges["created"].add_metric(label, float(created))


def registry_for(source: StatsSource) -> CollectorRegistry:
    """A registry holding one server's collector plus the standard process/platform metrics.

    Built per scrape: it is cheap, and it keeps no reference to a stopped server.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ServerCollector(source))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def render_metrics(source: StatsSource) -> bytes:
    """The Prometheus text exposition of a server: pass its ``SessionManager``.

    Call it on the server's event-loop thread (the ``/metrics`` handler), and answer with
    ``Content-Type:`` :data:`CONTENT_TYPE`.
    """
    return generate_latest(registry_for(source))


def render_metrics_text(source: StatsSource) -> str:
    """:func:`render_metrics` as ``str`` (what ``AppSettings.render_metrics`` returns)."""
    return render_metrics(source).decode("utf-8")
