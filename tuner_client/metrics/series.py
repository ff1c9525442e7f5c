"""The series the tuner exports and their fixed label sets: :data:`TUNER_METRICS` names every
series with its meaning (the docs and tests read it), :data:`PHASES` and
:data:`FAILURE_KINDS` bound the ``phase`` and ``kind`` labels; and knob values as one number
in base units (bytes, seconds, 0/1), the form the ``knob`` series carry.
:class:`TunerSeries` declares them in a registry;
:class:`tuner_client.metrics.exporter.TunerMetrics` updates them.
"""

from __future__ import annotations

import re
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

from harmony_base.units import MEMORY_UNITS, TIME_UNITS_MS
from harmony_base.version import __version__
from tuner_client.metrics.labels import FailureKind, Phase

#: what the tuner is doing (values of the ``phase`` label)
PHASES = tuple(p.value for p in Phase)
#: why a point failed (values of the ``kind`` label)
FAILURE_KINDS = tuple(k.value for k in FailureKind)
#: how many recent (shared_buffers, miss probability) observations are kept as slots
MISS_SLOTS = 16
#: how many points of the fitted BME curve are exported
CURVE_POINTS = 24
#: how the final comparison may be measured (values of the ``design`` label)
FINAL_DESIGNS = ("windows", "per-transaction", "switchback", "duet", "split")

#: every series this module exports (sample names) -> what it means; docs and tests use it
TUNER_METRICS: dict[str, str] = {
    "harmony_tuner_info": "constant 1; labels version and tuner (the config name)",
    "harmony_tuner_start_time_seconds": "when the tuner started (Unix time)",
    "harmony_tuner_pass": "the current tuning pass (1, 2, ...; 0 before the first)",
    "harmony_tuner_passes_total": "tuning passes started",
    "harmony_tuner_phase": "1 for the phase the tuner is in (label phase), 0 for the others",
    "harmony_tuner_session_info": "1 for the session being tuned (labels session, kind)",
    "harmony_tuner_throughput_queries_per_second": "throughput of the last measured point",
    "harmony_tuner_best_throughput_queries_per_second": "best throughput found so far",
    "harmony_tuner_default_throughput_queries_per_second":
        "throughput of the default configuration (baseline), when measured",
    "harmony_tuner_knob_value": "value in force of each tuned knob (label knob; bytes, "
                                "seconds or plain number)",
    "harmony_tuner_best_knob_value": "each knob's value in the best configuration so far",
    "harmony_tuner_evaluations_total": "points measured, by kind (offline, online, baseline, "
                                       "final, reference: the reference of a paired block)",
    "harmony_tuner_samples_total": "throughput samples taken",
    "harmony_tuner_point_samples": "samples taken for the last measured point",
    "harmony_tuner_sample_spread_ratio": "(max - min) / mean of the last point's samples",
    "harmony_tuner_sample_stddev_queries_per_second": "standard deviation of the last point's "
                                                      "samples",
    "harmony_tuner_failed_points_total": "points that failed, by kind (apply, restart, measure, "
                                         "infeasible, other)",
    "harmony_tuner_restarts_total": "PostgreSQL restarts (offline knob changes)",
    "harmony_tuner_failed_restarts_total": "restarts that failed (rolled back)",
    "harmony_tuner_restart_duration_seconds_bucket": "restart duration histogram",
    "harmony_tuner_restart_duration_seconds_sum": "sum of restart durations",
    "harmony_tuner_restart_duration_seconds_count": "number of restarts timed",
    "harmony_tuner_budget_slack_bytes": "memory budget left by the configuration in force "
                                        "(RAM - W*m - S - M - T - O - n*P)",
    "harmony_tuner_buffer_miss_probability": "buffer miss probability of the last measured point "
                                             "(blks_read / (blks_read + blks_hit))",
    "harmony_tuner_shared_buffers_bytes": "shared_buffers in force",
    "harmony_tuner_miss_observation_probability": "recent miss probabilities, label slot",
    "harmony_tuner_miss_observation_shared_buffers_bytes": "shared_buffers of each slot's "
                                                           "observation",
    "harmony_tuner_bme_m_star_bytes": "fitted natural buffer size M* (BME)",
    "harmony_tuner_bme_m_b_bytes": "fitted memory outside the buffer Mb (BME)",
    "harmony_tuner_bme_p_star": "fitted cold-miss probability P* (BME)",
    "harmony_tuner_bme_p_c": "fitted convexity parameter Pc (BME)",
    "harmony_tuner_bme_r2": "R^2 of the BME fit",
    "harmony_tuner_bme_fits_total": "BME fits made",
    "harmony_tuner_screening_effect_ratio": "screening: throughput at the knob's high end over "
                                            "its low end (per transaction: its best move "
                                            "from the setting in force; label knob)",
    "harmony_tuner_screening_z": "screening: the knob's effect over its standard error "
                                 "(label knob)",
    "harmony_tuner_screening_cleared": "screening: 1 when the knob's effect cleared the noise "
                                       "and the knob is searched, else 0 (label knob)",
    "harmony_tuner_bme_curve_probability": "fitted miss probability at curve point (label point)",
    "harmony_tuner_bme_curve_shared_buffers_bytes": "shared_buffers at curve point (label point)",
    "harmony_tuner_workload_shifts_total": "workload shifts detected (restart from offline)",
    "harmony_tuner_local_minima_total": "local minima detected (online session abandoned)",
    "harmony_tuner_guardrail_trips_total": "live mode: guardrail trips, by kind (latency, "
                                           "errors, memory); each restored the last good "
                                           "configuration",
    "harmony_tuner_guardrail_revert_seconds": "live mode: from the harmful configuration "
                                              "taking effect to the last good one back in "
                                              "force, at the last trip",
    "harmony_tuner_last_event_time_seconds": "when a detector last fired (label event)",
    "harmony_tuner_final_design_info": "1 for the design that measured the final comparison "
                                       "(label design: windows, per-transaction, switchback), "
                                       "0 for the others",
    "harmony_tuner_final_observations": "observations behind the final interval (paired "
                                        "rounds, transactions or switchback blocks; label "
                                        "design)",
    "harmony_tuner_final_ratio": "the recommended (else the best) candidate over the "
                                 "original in the final comparison",
    "harmony_tuner_final_ratio_low": "the final interval's lower end (95 % unless configured)",
    "harmony_tuner_final_ratio_high": "the final interval's upper end (0 while unbounded)",
    "harmony_tuner_final_interval_half_width_ratio": "half the final interval's width on the "
                                                     "log scale, as a fraction (0.03: ±3 %; "
                                                     "+Inf while unbounded)",
}

#: case-insensitive: bytes per memory unit, seconds per time unit
_MEMORY = {unit.lower(): float(size) for unit, size in MEMORY_UNITS.items()}
_TIME = {unit: float(ms / 1000) for unit, ms in TIME_UNITS_MS.items()}
_SETTING_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*([A-Za-z]*)\s*$")
_BOOLS = {"on": 1.0, "true": 1.0, "yes": 1.0, "off": 0.0, "false": 0.0, "no": 0.0}


def setting_to_base_units(value: object) -> float | None:
    """A knob value as one number: ``'64MB'`` -> bytes, ``'200ms'`` -> seconds, ``'on'`` -> 1.

    Numbers pass through; anything else (an enum such as ``'pglz'``) gives ``None``.
    """
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    text = str(value).strip()
    if text.lower() in _BOOLS:
        return _BOOLS[text.lower()]
    m = _SETTING_RE.match(text)
    if not m:
        return None
    number, unit = float(m.group(1)), m.group(2).lower()
    if not unit:
        return number
    if unit in _MEMORY:
        return number * _MEMORY[unit]
    if unit in _TIME:
        return number * _TIME[unit]
    return None


class TunerSeries:
    """The tuner's Prometheus series, declared in a registry group by group; the series
    labelled by :data:`PHASES`, :data:`FAILURE_KINDS` and the guardrail kinds start at 0."""

    def _declare_progress(self, r: CollectorRegistry, tuner: str) -> None:
        """Who is tuning, the pass and phase, throughput and knobs, the samples."""
        Info("harmony_tuner", "The tuner: harmony version and config name.",
             registry=r).info({"version": __version__, "tuner": tuner})
        Gauge("harmony_tuner_start_time_seconds", "When the tuner started (Unix time).",
              registry=r).set(time.time())
        self.pass_number = Gauge("harmony_tuner_pass", "The current tuning pass.", registry=r)
        self.passes = Counter("harmony_tuner_passes", "Tuning passes started.", registry=r)
        self.phase = Gauge("harmony_tuner_phase", "1 for the phase the tuner is in.",
                           ["phase"], registry=r)
        for phase in PHASES:
            self.phase.labels(phase).set(1.0 if phase == "idle" else 0.0)
        self.session = Gauge("harmony_tuner_session_info", "The session being tuned.",
                             ["session", "kind"], registry=r)
        self.throughput = Gauge("harmony_tuner_throughput_queries_per_second",
                                "Throughput of the last measured point.", registry=r)
        self.best_throughput = Gauge("harmony_tuner_best_throughput_queries_per_second",
                                     "Best throughput so far.", registry=r)
        self.default_throughput = Gauge("harmony_tuner_default_throughput_queries_per_second",
                                        "Throughput of the default configuration.", registry=r)
        self.knob_value = Gauge("harmony_tuner_knob_value", "Value in force of each tuned knob.",
                                ["knob"], registry=r)
        self.best_knob_value = Gauge("harmony_tuner_best_knob_value",
                                     "Each knob's value in the best configuration so far.",
                                     ["knob"], registry=r)
        self.evaluations = Counter("harmony_tuner_evaluations", "Points measured, by kind.",
                                   ["kind"], registry=r)
        self.samples = Counter("harmony_tuner_samples", "Throughput samples taken.", registry=r)
        self.point_samples = Gauge("harmony_tuner_point_samples",
                                   "Samples of the last measured point.", registry=r)
        self.spread = Gauge("harmony_tuner_sample_spread_ratio",
                            "(max - min) / mean of the last point's samples.", registry=r)
        self.stddev = Gauge("harmony_tuner_sample_stddev_queries_per_second",
                            "Standard deviation of the last point's samples.", registry=r)

    def _declare_failures(self, r: CollectorRegistry) -> None:
        """Failed points and PostgreSQL restarts."""
        self.failures = Counter("harmony_tuner_failed_points", "Points that failed, by kind.",
                                ["kind"], registry=r)
        for kind in FAILURE_KINDS:
            self.failures.labels(kind)
        self.restarts = Counter("harmony_tuner_restarts", "PostgreSQL restarts.", registry=r)
        self.failed_restarts = Counter("harmony_tuner_failed_restarts",
                                       "Restarts that failed (rolled back).", registry=r)
        self.restart_duration = Histogram(
            "harmony_tuner_restart_duration_seconds", "Restart duration.",
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300), registry=r)

    def _declare_memory(self, r: CollectorRegistry) -> None:
        """The memory budget, the buffer miss probability, its recent observations."""
        self.budget_slack = Gauge("harmony_tuner_budget_slack_bytes",
                                  "Memory budget left by the configuration in force.", registry=r)
        self.miss = Gauge("harmony_tuner_buffer_miss_probability",
                          "Buffer miss probability of the last measured point.", registry=r)
        self.shared_buffers = Gauge("harmony_tuner_shared_buffers_bytes",
                                    "shared_buffers in force.", registry=r)
        self.miss_obs = Gauge("harmony_tuner_miss_observation_probability",
                              "Recent miss probabilities, by slot.", ["slot"], registry=r)
        self.miss_obs_size = Gauge("harmony_tuner_miss_observation_shared_buffers_bytes",
                                   "shared_buffers of each slot's observation.", ["slot"],
                                   registry=r)

    def _declare_screening(self, r: CollectorRegistry) -> None:
        """A knob screening's effects."""
        self.screen_ratio = Gauge("harmony_tuner_screening_effect_ratio",
                                  "Screening: throughput at the high end over the low end.",
                                  ["knob"], registry=r)
        self.screen_z = Gauge("harmony_tuner_screening_z",
                              "Screening: effect over its standard error.", ["knob"], registry=r)
        self.screen_cleared = Gauge("harmony_tuner_screening_cleared",
                                    "Screening: 1 when the knob's effect cleared the noise.",
                                    ["knob"], registry=r)

    def _declare_bme(self, r: CollectorRegistry) -> None:
        """The Buffer Miss Equation fit and its curve."""
        self.m_star = Gauge("harmony_tuner_bme_m_star_bytes", "Fitted M* (BME).", registry=r)
        self.m_b = Gauge("harmony_tuner_bme_m_b_bytes", "Fitted Mb (BME).", registry=r)
        self.p_star = Gauge("harmony_tuner_bme_p_star", "Fitted P* (BME).", registry=r)
        self.p_c = Gauge("harmony_tuner_bme_p_c", "Fitted Pc (BME).", registry=r)
        self.r2 = Gauge("harmony_tuner_bme_r2", "R^2 of the BME fit.", registry=r)
        self.fits = Counter("harmony_tuner_bme_fits", "BME fits made.", registry=r)
        self.curve = Gauge("harmony_tuner_bme_curve_probability",
                           "Fitted miss probability at each curve point.", ["point"], registry=r)
        self.curve_size = Gauge("harmony_tuner_bme_curve_shared_buffers_bytes",
                                "shared_buffers at each curve point.", ["point"], registry=r)

    def _declare_detectors(self, r: CollectorRegistry) -> None:
        """Workload shifts, live-mode guardrails, local minima."""
        self.shifts = Counter("harmony_tuner_workload_shifts", "Workload shifts detected.",
                              registry=r)
        self.guard_trips = Counter("harmony_tuner_guardrail_trips",
                                   "Live mode: guardrail trips (the last good configuration "
                                   "restored), by kind (latency, errors, memory).", ["kind"],
                                   registry=r)
        for kind in ("latency", "errors", "memory"):
            self.guard_trips.labels(kind)  # exported at 0 before the first trip
        self.guard_revert = Gauge("harmony_tuner_guardrail_revert_seconds",
                                  "Live mode: from the configuration taking effect to the last "
                                  "good one back in force, at the last trip.", registry=r)
        self.local_minima = Counter("harmony_tuner_local_minima", "Local minima detected.",
                                    registry=r)
        self.last_event = Gauge("harmony_tuner_last_event_time_seconds",
                                "When a detector last fired.", ["event"], registry=r)

    def _declare_final(self, r: CollectorRegistry) -> None:
        """The final comparison: the design that measured it, its observations, its interval."""
        self.final_design = Gauge("harmony_tuner_final_design_info",
                                  "1 for the design that measured the final comparison.",
                                  ["design"], registry=r)
        self.final_observations = Gauge("harmony_tuner_final_observations",
                                        "Observations behind the final interval.", ["design"],
                                        registry=r)
        for design in FINAL_DESIGNS:
            self.final_design.labels(design).set(0.0)
            self.final_observations.labels(design).set(0.0)
        self.final_ratio = Gauge("harmony_tuner_final_ratio",
                                 "Recommended (else best) candidate over the original.",
                                 registry=r)
        self.final_low = Gauge("harmony_tuner_final_ratio_low",
                               "The final interval's lower end.", registry=r)
        self.final_high = Gauge("harmony_tuner_final_ratio_high",
                                "The final interval's upper end (0 while unbounded).",
                                registry=r)
        self.final_half_width = Gauge("harmony_tuner_final_interval_half_width_ratio",
                                      "Half the final interval's width.", registry=r)
