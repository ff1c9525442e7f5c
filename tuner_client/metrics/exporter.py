"""The tuner daemon's own Prometheus metrics, served on its own port (loopback by default).

:class:`TunerMetrics` is a plain object with update methods the flows call at the moments
that matter (a pass starts, a point was measured, a restart finished, a detector fired);
it holds a private registry, so several tuners in one process (tests) never collide.
Throughput is exported in queries per second (the base unit; the flows pass qpm and it is
converted here), memory in bytes, durations in seconds. Every label is bounded: ``knob``
takes the tuned knob names, ``phase`` and ``kind`` fixed sets, and the BME curve and the
recent miss observations use fixed slot numbers.
"""

from __future__ import annotations

import argparse
import logging
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    generate_latest,
    start_http_server,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from bme.equation import PARAM_KEYS, BMEParams, miss_probability
from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSON
from tuner_client.metrics.labels import FailureKind
from tuner_client.metrics.options import DEFAULT_METRICS_PORT
from tuner_client.metrics.series import (
    CURVE_POINTS,
    FAILURE_KINDS,
    FINAL_DESIGNS,
    MISS_SLOTS,
    PHASES,
    TUNER_METRICS,
    TunerSeries,
    setting_to_base_units,
)

if TYPE_CHECKING:
    from tuner_client.measurer import PointRecord

__all__ = ["CONTENT_TYPE", "DEFAULT_METRICS_PORT", "FAILURE_KINDS", "PHASES", "TUNER_METRICS",
           "TunerMetrics", "setting_to_base_units"]

logger = logging.getLogger(__name__)

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4


class TunerMetrics(TunerSeries):
    """The tuner's metrics and the plain methods that update them.

    ``knobs`` are the knob names the tuner may set (the ``knob`` label's values); a knob
    outside it is refused so that the label stays bounded. ``maximize`` tells which
    throughput is "best" (throughput: True).
    """

    def __init__(self, knobs: Sequence[str] = (), *, tuner: str = "harmony",
                 registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.knobs: set[str] = set(knobs)
        self._lock = threading.Lock()
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._misses: deque[tuple[float, float]] = deque(maxlen=MISS_SLOTS)
        r = self.registry
        self._declare_progress(r, tuner)
        self._declare_failures(r)
        self._declare_memory(r)
        self._declare_screening(r)
        self._declare_bme(r)
        self._declare_detectors(r)
        self._declare_final(r)
        for knob in sorted(self.knobs):
            self.knob_value.labels(knob)

    # -- serving -------------------------------------------------------------------------
    def serve(self, host: str = "127.0.0.1", port: int = DEFAULT_METRICS_PORT) -> int:
        """Serve ``/metrics`` on ``host:port`` from a daemon thread; returns the bound port."""
        if self._server is not None:
            raise ConfigError("the tuner's metrics endpoint is already being served")
        try:
            self._server, self._thread = start_http_server(port, addr=host,
                                                           registry=self.registry)
        except OSError as exc:
            raise ConfigError(f"cannot serve tuner metrics on {host}:{port}: {exc.strerror}; "
                              f"pick another --metrics-port") from None
        bound = int(self._server.server_address[1])
        logger.info("tuner metrics on http://%s:%d/metrics", host, bound)
        return bound

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._server = self._thread = None

    def render(self) -> bytes:
        """The exposition text (for tests, or to serve from another HTTP server)."""
        return generate_latest(self.registry)

    # -- flow events ---------------------------------------------------------------------
    def start_pass(self, number: int) -> None:
        """A tuning pass (offline then online) begins."""
        self.pass_number.set(number)
        self.passes.inc()

    def set_phase(self, phase: str) -> None:
        """What the tuner is doing now: one of :data:`PHASES`."""
        if phase not in PHASES:
            raise ConfigError(f"tuner phase must be one of {', '.join(PHASES)}, got {phase!r}")
        for p in PHASES:
            self.phase.labels(p).set(1.0 if p == phase else 0.0)

    def start_session(self, name: str, kind: str) -> None:
        """The tuner works in session ``name`` now (``kind`` offline/online); sets the phase."""
        with self._lock:
            self.session.clear()  # only the current session is exported: one series
            self.session.labels(name, kind).set(1.0)
        if kind in PHASES:
            self.set_phase(kind)

    def set_knobs(self, values: Mapping[str, JSON]) -> None:
        """The knob values now in force (PostgreSQL strings like ``'64MB'`` or numbers)."""
        for knob, value in values.items():
            number = self._knob_number(knob, value)
            if number is not None:
                self.knob_value.labels(knob).set(number)
                if knob == "shared_buffers":
                    self.shared_buffers.set(number)

    def record_measurement(self, samples_qpm: Sequence[float], value_qpm: float | None = None,
                           *, kind: str = "online", knobs: Mapping[str, JSON] | None = None,
                           maximize: bool = True) -> None:
        """One point measured: its samples (qpm) and aggregate, and ``knobs``, the point's
        values in force. The best-so-far is not ranked here: a value is a paired ratio times
        its reference's level at the time, so a higher one may be the worse configuration;
        the run says which is its best (:meth:`set_best`)."""
        samples = [float(s) for s in samples_qpm if s is not None and math.isfinite(float(s))]
        self.samples.inc(len(samples))
        self.point_samples.set(len(samples))
        self.evaluations.labels(kind).inc()
        if samples:
            mean = statistics.fmean(samples)
            self.spread.set((max(samples) - min(samples)) / mean if mean > 0 else 0.0)
            self.stddev.set(statistics.pstdev(samples) / 60.0)
        if value_qpm is None and samples:
            value_qpm = max(samples) if maximize else min(samples)
        if knobs is not None:
            self.set_knobs(knobs)
        if value_qpm is None or not math.isfinite(value_qpm):
            return
        self.throughput.set(value_qpm / 60.0)

    def set_best(self, record: PointRecord) -> None:
        """The run's own best (``RunState.best``, which paired ratios may rank above a higher
        value measured at another time) as the best-so-far and its knobs as the best knobs."""
        if record.value is None or not math.isfinite(record.value):
            return
        self.best_throughput.set(record.value / 60.0)
        for knob, value in (record.in_force or {}).items():
            number = self._knob_number(knob, value)
            if number is not None:
                self.best_knob_value.labels(knob).set(number)

    def record_point(self, record: PointRecord, *, kind: str = "online",
                     restarts: bool = True) -> None:
        """Everything of one measured point: its samples' throughput, value, knobs in force,
        failure, restart time and the counters' miss ratio. ``restarts=False`` when the caller
        counts restarts itself (the flows do, at the measurer).
        """
        failure = record.failure
        in_force = dict(record.in_force)
        restart_s = record.restart_s
        if restart_s and restarts:
            self.record_restart(float(restart_s), ok=not (failure and "restart" in failure))
        if failure:
            self.record_failure(FailureKind.of(str(failure)))
            if in_force:
                self.set_knobs(in_force)
            return
        qpms = [float(s.qpm) for s in record.samples]
        self.record_measurement(qpms, record.value, kind=kind, knobs=in_force or None)
        delta = record.stats_total()
        miss = delta.miss_ratio if delta is not None else None
        size = setting_to_base_units(in_force.get("shared_buffers")) \
            if "shared_buffers" in in_force else None
        if miss is not None:
            self.record_buffer_miss(size, float(miss))

    def record_default(self, value_qpm: float) -> None:
        """The default configuration's throughput (the baseline of the comparison)."""
        self.default_throughput.set(value_qpm / 60.0)

    def record_final_comparison(self, decision: Mapping[str, Any]) -> None:
        """The final decision as summary.json records it (``FinalDecision.to_dict()``): the
        design that measured it, its observations, and the interval of the recommended (else
        the best) candidate over the original."""
        design = str(decision.get("design") or "windows")
        if design not in FINAL_DESIGNS:
            raise ConfigError(f"the final design must be one of {', '.join(FINAL_DESIGNS)}, "
                              f"got {design!r}")
        for d in FINAL_DESIGNS:
            self.final_design.labels(d).set(1.0 if d == design else 0.0)
            self.final_observations.labels(d).set(
                float(decision.get("observations") or 0) if d == design else 0.0)
        shown = decision.get("winner") or decision.get("best")
        iv = (decision.get("intervals") or {}).get(shown) if shown else None
        if not iv:
            return
        high = iv.get("high")
        self.final_ratio.set(float(iv["ratio"]))
        self.final_low.set(float(iv["low"]))
        self.final_high.set(float(high) if high is not None else 0.0)
        # on the log scale, as the project's half-widths are quoted (0.03: ±3 %)
        self.final_half_width.set(0.5 * math.log(float(high) / float(iv["low"]))
                                  if high is not None and float(iv["low"]) > 0 else math.inf)

    def record_failure(self, kind: str = "other") -> None:
        """A point failed (:data:`FAILURE_KINDS`; anything else counts as ``other``)."""
        self.failures.labels(kind if kind in FAILURE_KINDS else "other").inc()

    def record_restart(self, seconds: float, *, ok: bool = True) -> None:
        """A PostgreSQL restart finished (``ok``) or failed and was rolled back."""
        self.restarts.inc()
        if ok:
            self.restart_duration.observe(seconds)
        else:
            self.failed_restarts.inc()

    def set_budget_slack(self, slack_bytes: float) -> None:
        """Memory left under the budget by the configuration in force (negative: over it)."""
        self.budget_slack.set(slack_bytes)

    def record_buffer_miss(self, shared_buffers_bytes: float | None,
                           miss_probability: float) -> None:
        """A measured miss probability, at the shared_buffers in force when known."""
        if not 0.0 <= miss_probability <= 1.0:
            logger.warning("ignoring miss probability %r outside [0, 1]", miss_probability)
            return
        self.miss.set(miss_probability)
        if shared_buffers_bytes is None:
            return
        self.shared_buffers.set(shared_buffers_bytes)
        with self._lock:
            self._misses.append((float(shared_buffers_bytes), miss_probability))
            observations = sorted(self._misses)
        for slot, (size, miss) in enumerate(observations):
            self.miss_obs.labels(str(slot)).set(miss)
            self.miss_obs_size.labels(str(slot)).set(size)

    def record_screening(self, effects: Sequence[Any]) -> None:
        """A knob screening's effects (``stats.screening.KnobEffect``-like: knob, ratio,
        z_score, cleared)."""
        for e in effects:
            self.screen_ratio.labels(e.knob).set(float(e.ratio))
            self.screen_z.labels(e.knob).set(float(e.z_score))
            self.screen_cleared.labels(e.knob).set(1.0 if e.cleared else 0.0)

    def record_bme_fit(self, params: BMEParams | Mapping[str, object], *, r2: float | None = None,
                       sizes: tuple[float, float] | None = None) -> None:
        """A BME fit: ``params`` a ``BMEParams`` or a dict with p_star, p_c, m_b, m_star (bytes).

        The fitted curve is exported at :data:`CURVE_POINTS` sizes over ``sizes`` (min, max
        bytes; default 1/16 .. 2x M*) so a dashboard can draw it beside the observations.
        """
        data: Mapping[str, object] = params.to_dict() if isinstance(params, BMEParams) \
            else params
        given_r2 = data.get("r2")
        if r2 is None and isinstance(given_r2, int | float):
            r2 = float(given_r2)
        fitted = BMEParams.from_dict({k: data.get(k) for k in PARAM_KEYS},
                                     source="tuner metrics: BME fit")
        p_star, p_c, m_b, m_star = fitted.p_star, fitted.p_c, fitted.m_b, fitted.m_star
        self.fits.inc()
        self.p_star.set(p_star)
        self.p_c.set(p_c)
        self.m_b.set(m_b)
        self.m_star.set(m_star)
        if r2 is not None:
            self.r2.set(float(r2))
        low, high = sizes if sizes is not None else (m_star / 16.0, m_star * 2.0)
        low = max(low, 1.0, -m_b + 1.0)  # the law holds where M + Mb > 0
        for i in range(CURVE_POINTS):
            m = low + (high - low) * i / (CURVE_POINTS - 1)
            self.curve.labels(str(i)).set(float(miss_probability(fitted, m)))
            self.curve_size.labels(str(i)).set(m)

    def record_workload_shift(self) -> None:
        """The workload-shift detector fired: the tuner restarts from the offline session."""
        self.shifts.inc()
        self.last_event.labels("workload_shift").set(time.time())

    def record_guardrail_trip(self, kind: str, seconds: float) -> None:
        """A live-mode guardrail tripped and the last good configuration was restored
        ``seconds`` after the offending one took effect."""
        self.guard_trips.labels(kind).inc()
        self.guard_revert.set(seconds)
        self.last_event.labels("guardrail_trip").set(time.time())

    def record_local_minimum(self) -> None:
        """The local-minimum detector fired: the online session is abandoned."""
        self.local_minima.inc()
        self.last_event.labels("local_minimum").set(time.time())

    # -- helpers -------------------------------------------------------------------------
    def _knob_number(self, knob: str, value: object) -> float | None:
        if self.knobs and knob not in self.knobs:
            logger.debug("metrics: knob %s is not a tuned knob; not exported", knob)
            return None
        number = setting_to_base_units(value)
        if number is None:
            logger.debug("metrics: knob %s=%r has no numeric form; not exported", knob, value)
        return number


def metrics_from_args(args: argparse.Namespace, knobs: Sequence[str], *, tuner: str = "harmony"
                      ) -> TunerMetrics:
    """A :class:`TunerMetrics` for the run, served when ``--metrics-port`` was given.

    The flows can call its methods unconditionally; the caller calls ``stop()`` at the end.
    """
    metrics = TunerMetrics(knobs, tuner=tuner)
    port = getattr(args, "metrics_port", None)
    if port is not None:
        metrics.serve(getattr(args, "metrics_host", "127.0.0.1"), int(port))
    return metrics
