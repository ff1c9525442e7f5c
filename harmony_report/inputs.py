"""What a report reads: a session (prior data), and a tuning run's ``summary.json`` when there
is one; each input checked here, with an error that names the key.

A session's values are what its strategy saw; a run's summary carries the decision the
tuner printed (the verdict, every label's paired interval), the race round by round and
every measurement's paired ratio (:mod:`tuner_client.phases.report_inputs` writes those).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bme.equation import PARAM_KEYS, BMEParams
from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSONObject
from harmony_base.trial import TrialRecord
from harmony_core.priordata import PriorSession

#: the comparison's rows, in the order they are drawn
COMPARISON_LABELS = ("default", "recommended", "tuned")
#: labels of the final rounds as the tuner prints them
LABEL_NAMES = {"default": "default", "pgtune": "PGTune rules", "best": "tuned",
               "recommended": "BME recommendation"}
#: statuses of a session that has ended: its search converged, it was closed, or the run
#: that drove it ended (``finished``, written by the tuner's export at the end of a run)
ENDED_STATUSES = ("converged", "closed", "finished")
#: byte multipliers of the memory units a session parameter may carry
_BYTE_UNITS = {"B": 1, "kB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


@dataclass(frozen=True)
class Comparison:
    """Mean measured value of named configurations (default, recommended, tuned, ...) over
    the same final rounds, in ``unit``."""

    values: dict[str, float]
    unit: str = "qpm"

    def gain(self, label: str, over: str = "default") -> float | None:
        """Relative gain of ``label``'s mean over ``over``'s (0.5 = +50 %)."""
        a, b = self.values.get(label), self.values.get(over)
        if a is None or not b:
            return None
        return a / b - 1.0


@dataclass(frozen=True)
class Interval:
    """A label's ratio to the reference with its confidence interval, as the decision
    recorded it (``high`` may be infinite: an anytime-valid interval still unbounded)."""

    ratio: float
    low: float
    high: float
    n: int | None = None
    method: str | None = None

    @property
    def bounded(self) -> bool:
        return self.low > 0.0 and math.isfinite(self.high)


@dataclass(frozen=True)
class RaceStep:
    """One label's ratio and interval after ``round`` rounds of the race."""

    round: int
    interval: Interval


@dataclass
class RunSummary:
    """The parts of a tuning run's ``summary.json`` a report shows."""

    decision: dict[str, Any] | None = None
    improvement: float | None = None
    improvement_ci: tuple[float, float] | None = None
    default_value: float | None = None
    best_value: float | None = None
    rounds: list[dict[str, float | None]] = field(default_factory=list)
    decisions: list[str] = field(default_factory=list)
    unit: str = "queries/min"
    #: the race: label -> its steps; dropped label -> (after round, why); why it stopped
    trajectory: dict[str, list[RaceStep]] = field(default_factory=dict)
    dropped: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    stopped: str | None = None
    race_method: str | None = None
    #: what a step of the race is (``round``, ``block``, ``slice``) and how to read its bands
    race_unit: str = "round"
    race_note: str | None = None
    measurements: list[dict[str, Any]] = field(default_factory=list)
    screening: JSONObject | None = None
    bme: JSONObject | None = None
    guardrails: dict[str, Any] | None = None
    comparison: Comparison | None = None

    @property
    def winner(self) -> str | None:
        return (self.decision or {}).get("winner")

    @property
    def reference(self) -> str:
        return str((self.decision or {}).get("reference") or "default")

    def intervals(self) -> dict[str, Interval]:
        """Every label's plain interval against the reference, as the decision recorded it."""
        out = {}
        for label, raw in ((self.decision or {}).get("intervals") or {}).items():
            if raw is not None:
                out[str(label)] = _interval(raw, f"summary.json decision.intervals.{label}")
        return out

    def winner_interval(self) -> Interval | None:
        """The winner's interval the recommendation rests on (simultaneous over the
        candidates), from ``improvement``/``improvement_ci``; None when the original is kept."""
        if self.winner is None or self.improvement is None or self.improvement_ci is None:
            return None
        plain = self.intervals().get(self.winner)
        return Interval(1.0 + self.improvement, 1.0 + self.improvement_ci[0],
                        1.0 + self.improvement_ci[1], plain.n if plain else None,
                        plain.method if plain else None)

    def unstable_labels(self) -> dict[str, str]:
        """Candidates the decision found unstable, with why."""
        return {str(k): str(v) for k, v in ((self.decision or {}).get("unstable") or {}).items()}

    @property
    def level(self) -> float:
        return float((self.decision or {}).get("level") or 0.95)

    @property
    def candidates_counted(self) -> int:
        """m of the Bonferroni correction: the level each candidate was judged at."""
        level = (self.decision or {}).get("decision_level")
        if not isinstance(level, int | float) or level >= 1.0:
            return 1
        return max(1, round((1.0 - self.level) / (1.0 - float(level))))

    def mean(self, label: str) -> float | None:
        """A label's mean value over the final rounds (as the tuner prints it)."""
        values = [v for row in self.rounds if (v := row.get(label)) is not None]
        return statistics.fmean(values) if values else None


def summary_from_json(data: object, *, source: str = "summary.json") -> RunSummary:
    """A :class:`RunSummary` from a ``harmony tune`` summary (parsed JSON)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected the object harmony tune writes, got "
                          f"{type(data).__name__}")
    decision = data.get("decision")
    if decision is not None and not isinstance(decision, Mapping):
        raise ConfigError(f"{source}: decision must be an object, got {decision!r}")
    ci = data.get("improvement_ci")
    if ci is not None and not (isinstance(ci, Sequence) and len(ci) == 2):
        raise ConfigError(f"{source}: improvement_ci must be [low, high], got {ci!r}")
    rounds = data.get("ab_rounds") or []
    if not isinstance(rounds, list) or not all(isinstance(r, Mapping) for r in rounds):
        raise ConfigError(f"{source}: ab_rounds must be a list of {{label: value}} objects")
    summary = RunSummary(
        decision=dict(decision) if decision else None,
        improvement=_number(data.get("improvement"), f"{source}: improvement"),
        improvement_ci=(float(ci[0]), float(ci[1])) if ci is not None else None,
        default_value=_number(data.get("default_qpm"), f"{source}: default_qpm"),
        best_value=_number(data.get("best_qpm"), f"{source}: best_qpm"),
        rounds=[{str(k): (None if v is None else float(v)) for k, v in r.items()}
                for r in rounds],
        decisions=[str(d) for d in data.get("decisions") or []],
        unit=str(data.get("unit") or (data.get("comparison") or {}).get("unit")
                 or "queries/min"),
        measurements=[dict(m) for m in data.get("measurements") or []
                      if isinstance(m, Mapping)],
        screening=dict(data["screening"]) if isinstance(data.get("screening"), Mapping)
        else None,
        bme=dict(data["bme"]) if isinstance(data.get("bme"), Mapping) else None,
        guardrails=dict(data["guardrails"]) if isinstance(data.get("guardrails"), Mapping)
        else None,
        comparison=comparison_from_metadata(data, source=source))
    race = data.get("race")
    if isinstance(race, Mapping):
        for label, steps in (race.get("trajectory") or {}).items():
            summary.trajectory[str(label)] = [
                RaceStep(int(s["round"]), _interval(s, f"{source}: race.trajectory.{label}",
                                                    race.get("method")))
                for s in steps]
        for label, why in (race.get("dropped") or {}).items():
            summary.dropped[str(label)] = (int(why["after"]), why.get("reason"))
        summary.stopped = race.get("stopped")
        summary.race_method = race.get("method")
        summary.race_unit = str(race.get("unit") or "round")
        note = race.get("note")
        summary.race_note = str(note) if note else None
    return summary


def is_run_summary(data: object) -> bool:
    """Whether parsed JSON is a ``harmony tune`` summary (not a bare comparison)."""
    return isinstance(data, Mapping) and ("decision" in data or "ab_rounds" in data)


def _number(raw: object, where: str) -> float | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ConfigError(f"{where} must be a number, got {raw!r}")
    return float(raw)


def _interval(raw: object, where: str, method: object = None) -> Interval:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected {{ratio, low, high}}, got {raw!r}")
    try:
        # an anytime-valid sequence still unbounded above is written with high null
        ratio, low = float(raw["ratio"]), float(raw["low"])
        high = math.inf if raw["high"] is None else float(raw["high"])
    except (KeyError, TypeError, ValueError):
        raise ConfigError(f"{where}: expected numbers ratio, low and high, got {raw!r}") \
            from None
    n = raw.get("n")
    shown = raw.get("method") or method
    return Interval(ratio, low, high, int(n) if isinstance(n, int | float) else None,
                    str(shown) if shown else None)


def comparison_from_metadata(data: object, *, source: str = "comparison") -> Comparison | None:
    """A comparison from ``{"default": 1200, "tuned": {"value": 4800}, "unit": "qpm"}`` or
    from a ``harmony tune`` summary.json (``comparison``, else ``default_qpm``/``best_qpm``)."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected an object like {{'default': 1200.0, 'tuned': "
                          f"4800.0}}, got {type(data).__name__}")
    if "best_qpm" in data or "default_qpm" in data:
        # a ``harmony tune`` summary.json: its comparison (every label's mean over the final
        # rounds, and the unit), else default vs best measured interleaved
        if isinstance(data.get("comparison"), Mapping):
            return comparison_from_metadata(data["comparison"], source=f"{source} comparison")
        data = {label: data[key] for label, key in (("default", "default_qpm"),
                                                    ("recommended", "recommended_qpm"),
                                                    ("tuned", "best_qpm"))
                if data.get(key) is not None}
    values: dict[str, float] = {}
    for key, raw in data.items():
        if key == "unit":
            continue
        number = raw.get("value") if isinstance(raw, Mapping) else raw
        if isinstance(number, bool) or not isinstance(number, int | float) \
                or not math.isfinite(number):
            raise ConfigError(f"{source}: {key} must be a finite number (or {{'value': n}}), "
                              f"got {raw!r}")
        values[str(key)] = float(number)
    if not values:
        return None
    return Comparison(values, str(data.get("unit", "qpm")))


def bme_from_metadata(data: object, *, source: str = "bme") -> dict[str, object] | None:
    """The BME fit: p_star, p_c, m_b, m_star (bytes) and optional r2 and points [[M, P], ...]."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected an object with p_star, p_c, m_b, m_star")
    if data.get("decision") and all(data.get(k) is None for k in PARAM_KEYS):
        return None  # the probes decided without a fit (a flat curve): nothing to draw
    params = BMEParams.from_dict({k: data.get(k) for k in PARAM_KEYS}, source=source)
    points = []
    for item in data.get("points", []) or []:
        try:
            m, p = float(item[0]), float(item[1])
        except (TypeError, ValueError, IndexError):
            raise ConfigError(f"{source}: points must be [size, miss probability] pairs, got "
                              f"{item!r}") from None
        points.append((m, p))
    r2 = data.get("r2")
    return {"params": params, "points": sorted(points),
            "r2": float(r2) if isinstance(r2, int | float) else None,
            # from the tuner's BME probes: the decision and why (absent for a plain fit)
            "decision": str(data["decision"]) if data.get("decision") else None,
            "reason": str(data.get("reason") or ""),
            "probe_cost_s": data.get("probe_cost_s")}


def screening_from_metadata(prior: PriorSession) -> JSONObject | None:
    """The knob screening's ranking in the session metadata (``metadata["screening"]``:
    ``effects`` of knob, ratio, se, cleared), or None when the session has none."""
    data = (prior.definition.get("metadata", {}) or {}).get("screening")
    if not isinstance(data, Mapping) or not isinstance(data.get("effects"), list):
        return None
    return dict(data)


@dataclass(frozen=True)
class Evaluation:
    """One measured point: its samples (one per trial) and their aggregate, or its failure."""

    candidate: int
    point: dict[str, Any]
    samples: tuple[float, ...]
    value: float | None
    failure: str | None


def shown_status(prior: PriorSession) -> str:
    """The status the report shows: ``finished (why)`` for a session that has ended, else
    the recorded one (``running``, ``paused``, ``imported``, ...).

    A session still marked running or live has ended too when every client that joined it
    has left and no trial is out on lease: nobody is measuring for it any more.
    """
    if prior.status in ENDED_STATUSES:
        return "finished" if prior.status == "finished" else f"finished ({prior.status})"
    if prior.status in ("running", "live") and prior.hosts \
            and all(h.left is not None for h in prior.hosts) \
            and not any(t.status == "leased" for t in prior.trials):
        return "finished (every client left)"
    return prior.status


def evaluations(prior: PriorSession) -> list[Evaluation]:
    """Finished trials grouped by candidate (the ``agg`` plugin's samples of one point), in
    the order their last result arrived; the value aggregates the samples like the session."""
    how = "best"
    for plugin in prior.definition.get("plugins", []):
        if plugin.get("name") == "agg":
            how = str((plugin.get("options") or {}).get("how", "best"))
    finished = [t for t in prior.trials if t.status in ("done", "failed")]
    finished.sort(key=lambda t: (t.reported_at if t.reported_at is not None else math.inf, t.id))
    groups: dict[int, list[TrialRecord]] = {}
    last: dict[int, int] = {}  # candidate -> index of its last result
    for i, t in enumerate(finished):
        groups.setdefault(t.candidate, []).append(t)
        last[t.candidate] = i
    out = []
    for candidate in sorted(groups, key=lambda c: last[c]):
        trials = groups[candidate]
        samples = tuple(float(t.value) for t in trials if t.value is not None)
        failure = None if samples else next((t.failure for t in reversed(trials)
                                             if t.failure), "failed")
        value = _aggregate(samples, how, prior.maximize) if samples else None
        out.append(Evaluation(candidate, dict(trials[0].point), samples, value, failure))
    return out


def _aggregate(samples: Sequence[float], how: str, maximize: bool) -> float:
    if how == "best":
        how = "max" if maximize else "min"
    if how == "mean":
        return statistics.fmean(samples)
    if how == "median":
        return float(statistics.median(samples))
    return float(min(samples) if how == "min" else max(samples))


def shared_buffers_throughput(prior: PriorSession) -> list[tuple[float, float]]:
    """(shared_buffers in bytes, measured value) of every evaluation of a session that
    searches shared_buffers in a memory unit; empty otherwise."""
    for param in prior.definition.get("parameters", []):
        if param.get("name") == "shared_buffers" and param.get("unit") in _BYTE_UNITS:
            scale = _BYTE_UNITS[str(param["unit"])]
            return [(float(ev.point["shared_buffers"]) * scale, float(ev.value))
                    for ev in evaluations(prior)
                    if ev.value is not None and "shared_buffers" in ev.point]
    return []


@dataclass(frozen=True)
class ReportInputs:
    """Everything a page is drawn from: the session, and what the run recorded beside it."""

    prior: PriorSession
    summary: RunSummary | None
    comparison: Comparison | None
    bme: Mapping[str, Any] | None
    screening: Mapping[str, Any] | None
