"""A session's report: one self-contained HTML page (PNGs embedded) plus the PNG files.

It shows the tuning curve (performance per evaluation and best-so-far), the knob
trajectories, the default vs recommended vs tuned comparison when known, and the Buffer
Miss Equation fit when known. The comparison and the fit come from the session metadata
(``metadata["comparison"]``, ``metadata["bme"]``) or are passed in (see :func:`write_report`).
Figures are drawn with matplotlib's object API on the Agg canvas (no pyplot, no display).
"""

from __future__ import annotations

import base64
import html
import io
import logging
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bme.equation import PARAM_KEYS, BMEParams, miss_probability
from harmony import __version__
from harmony.base.errors import ConfigError
from harmony.base.trial import TrialRecord
from harmony.core.priordata import PriorSession

__all__ = ["Comparison", "Evaluation", "ReportFigures", "bme_from_metadata",
           "comparison_from_metadata", "evaluations", "render_html", "shown_status",
           "write_report"]

logger = logging.getLogger(__name__)

#: the comparison's rows, in the order they are drawn
COMPARISON_LABELS = ("default", "recommended", "tuned")
#: trials listed in the HTML table at most (the newest are kept)
MAX_TABLE_ROWS = 500

_BEST = "#1f77b4"
_POINTS = "#7f7f7f"
_FAIL = "#d62728"


@dataclass(frozen=True)
class Comparison:
    """Throughput of named configurations (default, recommended, tuned), same protocol."""

    values: dict[str, float]
    unit: str = "qpm"

    def gain(self, label: str, over: str = "default") -> float | None:
        """Relative gain of ``label`` over ``over`` (0.5 = +50 %)."""
        a, b = self.values.get(label), self.values.get(over)
        if a is None or not b:
            return None
        return a / b - 1.0


@dataclass
class ReportFigures:
    """The PNGs of one report, by file name (bytes)."""

    images: dict[str, bytes] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------
# inputs


def comparison_from_metadata(data: Any, *, source: str = "comparison") -> Comparison | None:
    """A comparison from ``{"default": 1200, "tuned": {"value": 4800}, "unit": "qpm"}`` or
    from a ``harmony tune`` summary.json (``default_qpm``, ``best_qpm``)."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected an object like {{'default': 1200.0, 'tuned': "
                          f"4800.0}}, got {type(data).__name__}")
    if "best_qpm" in data or "default_qpm" in data:
        # a ``harmony tune`` summary.json: default vs best measured interleaved
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


def bme_from_metadata(data: Any, *, source: str = "bme") -> dict[str, Any] | None:
    """The BME fit: p_star, p_c, m_b, m_star (bytes) and optional r2 and points [[M, P], ...]."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected an object with p_star, p_c, m_b, m_star")
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


#: byte multipliers of the memory units a session parameter may carry
_BYTE_UNITS = {"B": 1, "kB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


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
class Evaluation:
    """One measured point: its samples (one per trial) and their aggregate, or its failure."""

    candidate: int
    point: dict[str, Any]
    samples: tuple[float, ...]
    value: float | None
    failure: str | None


#: statuses of a session that has ended: its search converged, it was closed, or the run
#: that drove it ended (``finished``, written by the tuner's export at the end of a run)
ENDED_STATUSES = ("converged", "closed", "finished")


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


# ---------------------------------------------------------------------------------------
# figures


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)
    return buf.getvalue()


def tuning_curve_png(prior: PriorSession) -> bytes:
    """Every evaluation's aggregate and samples, the best so far, failures along the bottom."""
    evals = evaluations(prior)
    fig = Figure(figsize=(8, 4), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    sx = [i + 1 for i, ev in enumerate(evals) for _ in ev.samples if len(ev.samples) > 1]
    sy = [y for ev in evals for y in ev.samples if len(ev.samples) > 1]
    if sx:
        ax.plot(sx, sy, ".", color="#c7c7c7", markersize=4, label="samples")
    xs = [i + 1 for i, ev in enumerate(evals) if ev.value is not None]
    ys = [float(ev.value) for ev in evals if ev.value is not None]  # type: ignore[arg-type]
    ax.plot(xs, ys, "o", color=_POINTS, markersize=5, label="evaluation")
    best: list[float] = []
    for y in ys:
        best.append(y if not best else (max(best[-1], y) if prior.maximize else min(best[-1], y)))
    if xs:
        ax.step(xs, best, where="post", color=_BEST, linewidth=2, label="best so far")
    failed = [i + 1 for i, ev in enumerate(evals) if ev.value is None]
    if failed:
        low = min(ys) if ys else 0.0
        ax.plot(failed, [low] * len(failed), "x", color=_FAIL, label=f"failed ({len(failed)})")
    objective = prior.definition.get("objective", {})
    ax.set_xlabel("evaluation")
    ax.set_ylabel(str(objective.get("name", "value")))
    ax.set_title(f"{prior.name}: tuning curve ({objective.get('goal', 'minimize')})")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    return _png(fig)


def knob_trajectories_png(prior: PriorSession) -> bytes:
    """Each parameter's value per evaluation (failed points marked)."""
    evals = evaluations(prior)
    params = prior.definition.get("parameters", [])
    n = max(len(params), 1)
    fig = Figure(figsize=(8, 1.9 * n + 0.6), dpi=100, layout="constrained")
    axes = fig.subplots(n, 1, sharex=True, squeeze=False)[:, 0]
    for ax, p in zip(axes, params, strict=False):
        name = p["name"]
        values = p.get("values")
        xs: list[int] = []
        fx: list[int] = []
        ys: list[float] = []
        fy: list[float] = []
        for i, ev in enumerate(evals):
            v = ev.point.get(name)
            if v is None:
                continue
            y = values.index(v) if values and v in values else float(v)
            (xs if ev.value is not None else fx).append(i + 1)
            (ys if ev.value is not None else fy).append(y)
        ax.plot(xs, ys, ".-", color=_BEST, linewidth=1, markersize=5)
        if fx:
            ax.plot(fx, fy, "x", color=_FAIL)
        if values:
            ax.set_yticks(range(len(values)), [str(v) for v in values])
        unit = f" ({p['unit']})" if p.get("unit") else ""
        ax.set_ylabel(f"{name}{unit}", fontsize=9)
        if "min" in p and "max" in p:
            ax.axhline(p["min"], color="#cccccc", linewidth=0.8)
            ax.axhline(p["max"], color="#cccccc", linewidth=0.8)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("evaluation")
    fig.suptitle(f"{prior.name}: knob trajectories")
    return _png(fig)


def comparison_png(comparison: Comparison) -> bytes:
    """Bars for default, recommended and tuned (and any other label), gains over default."""
    labels = [k for k in COMPARISON_LABELS if k in comparison.values] + sorted(
        k for k in comparison.values if k not in COMPARISON_LABELS)
    values = [comparison.values[k] for k in labels]
    fig = Figure(figsize=(6, 3.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    colors = {"default": "#9e9e9e", "recommended": "#ff7f0e", "tuned": "#2ca02c"}
    bars = ax.bar(labels, values, color=[colors.get(k, _BEST) for k in labels])
    for bar, label in zip(bars, labels, strict=True):
        gain = comparison.gain(label)
        text = f"{bar.get_height():.4g}" + (f"\n{gain:+.0%}" if gain is not None and
                                            label != "default" else "")
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=9)
    ax.set_ylabel(comparison.unit)
    ax.set_ylim(0, max(values) * 1.25 if values and max(values) > 0 else 1)
    ax.set_title("default vs recommended vs tuned")
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)


def bme_png(fit: Mapping[str, Any],
            throughput: Sequence[tuple[float, float]] = ()) -> bytes:
    """Measured miss probabilities (the probes) against buffer size, the fitted curve, M*,
    and beside them (right axis) the throughput evaluations at their shared_buffers."""
    params = fit["params"]
    points: Sequence[tuple[float, float]] = fit["points"]
    high = max([params.m_star * 1.5] + [m * 1.1 for m, _ in points]
               + [m * 1.1 for m, _ in throughput])
    low = max(1.0, -params.m_b + 1.0)
    sizes = np.linspace(low, high, 300)
    mib = 1024.0 * 1024.0
    fig = Figure(figsize=(7, 4), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.plot(sizes / mib, np.minimum(miss_probability(params, sizes), 1.0), color=_BEST,
            label="BME fit" + (f" (R² {fit['r2']:.3f})" if fit.get("r2") is not None else ""))
    if points:
        ax.plot([m / mib for m, _ in points], [p for _, p in points], "o", color="#ff7f0e",
                label="probes" if fit.get("decision") else "measured")
    ax.axvline(params.m_star / mib, color="#2ca02c", linestyle="--",
               label=f"M* = {params.m_star / mib:.0f} MiB")
    ax.set_xlabel("shared_buffers (MiB)")
    ax.set_ylabel("miss probability")
    title = "buffer miss equation"
    if fit.get("decision"):
        title += f": {fit['decision']}"
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if throughput:
        right = ax.twinx()
        right.plot([m / mib for m, _ in throughput], [v for _, v in throughput], "s",
                   color="#7f7f7f", alpha=0.7, label="throughput evaluations")
        right.set_ylabel("throughput")
        right.set_ylim(bottom=0)
        more_h, more_l = right.get_legend_handles_labels()
        handles, labels = handles + more_h, labels + more_l
    ax.legend(handles, labels, loc="center right")
    return _png(fig)


def screening_from_metadata(prior: PriorSession) -> dict[str, Any] | None:
    """The knob screening's ranking in the session metadata (``metadata["screening"]``:
    ``effects`` of knob, ratio, se, cleared), or None when the session has none."""
    data = (prior.definition.get("metadata", {}) or {}).get("screening")
    if not isinstance(data, Mapping) or not isinstance(data.get("effects"), list):
        return None
    return dict(data)


def screening_png(screening: Mapping[str, Any]) -> bytes:
    """One bar per screened knob: its effect (throughput at the high end over the low end),
    with its ± threshold·se band; searched knobs in colour, held ones grey."""
    effects = list(screening["effects"])[::-1]  # largest effect on top
    fig = Figure(figsize=(7, 0.5 * len(effects) + 1.5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    names = [str(e["knob"]) for e in effects]
    ratios = [float(e["ratio"]) for e in effects]
    threshold = float(screening.get("threshold") or screening.get("z") or 2.0)
    errors = [threshold * float(e["se"]) * r for e, r in zip(effects, ratios, strict=True)]
    colors = [_BEST if e["cleared"] else "#bdbdbd" for e in effects]
    ax.barh(names, [r - 1.0 for r in ratios], left=1.0, color=colors, xerr=errors,
            error_kw={"ecolor": "#555555", "capsize": 3})
    ax.axvline(1.0, color="#333333", linewidth=0.8)
    ax.set_xlabel("throughput at the high end / at the low end")
    ax.set_title(f"knob screening ({screening.get('design', '?')}, "
                 f"{screening.get('evaluations', '?')} measurements): coloured = searched")
    ax.grid(True, axis="x", alpha=0.3)
    return _png(fig)


# ---------------------------------------------------------------------------------------
# page


def render_figures(prior: PriorSession, comparison: Comparison | None,
                   bme: Mapping[str, Any] | None) -> ReportFigures:
    """Every PNG the report has, by file name."""
    figures = ReportFigures()
    figures.images["tuning_curve.png"] = tuning_curve_png(prior)
    figures.images["knobs.png"] = knob_trajectories_png(prior)
    if comparison is not None:
        figures.images["comparison.png"] = comparison_png(comparison)
    if bme is not None:
        figures.images["bme.png"] = bme_png(bme, shared_buffers_throughput(prior))
    screening = screening_from_metadata(prior)
    if screening is not None:
        figures.images["screening.png"] = screening_png(screening)
    return figures


def render_html(prior: PriorSession, figures: ReportFigures, comparison: Comparison | None,
                bme: Mapping[str, Any] | None) -> str:
    """The self-contained page: summary, figures (as data: URIs), comparison, trials."""
    e = html.escape
    evals = evaluations(prior)
    measured = [ev for ev in evals if ev.value is not None]
    pick = max if prior.maximize else min
    top = pick(measured, key=lambda ev: ev.value) if measured else None  # type: ignore[arg-type, return-value]
    best = (top.point, float(top.value)) if top is not None else None  # type: ignore[arg-type]
    objective = prior.definition.get("objective", {})
    counts: dict[str, int] = {}
    for t in prior.trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    ended = max((t.reported_at for t in prior.trials if t.reported_at is not None), default=None)
    strategy = prior.definition.get("strategy", {})
    strategy_name = strategy.get("name") if isinstance(strategy, Mapping) else strategy
    rows = [
        ("session", e(prior.name)),
        ("status", e(shown_status(prior))),
        ("objective", e(f"{objective.get('name', 'value')} ({objective.get('goal', 'minimize')})")),
        ("strategy", e(str(strategy_name))),
        ("plugins", e(", ".join(p.get("name", "?") for p in prior.definition.get("plugins", []))
                      or "none")),
        ("started", e(_when(prior.created))),
        ("duration", e(_duration(prior.created, ended))),
        ("trials", e(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none")),
        ("evaluations", e(f"{len(evals)} points measured"
                          + (f", {sum(v.value is None for v in evals)} failed"
                             if any(v.value is None for v in evals) else ""))),
        ("best value", e(f"{best[1]:.6g}" if best else "none yet")),
        ("best point", e(", ".join(f"{k} = {v}" for k, v in best[0].items()) if best else "-")),
    ]
    summary = "\n".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    params = "\n".join(
        "<tr>" + "".join(f"<td>{e(str(p.get(k, '')))}</td>" for k in
                         ("name", "type", "min", "max", "step", "unit"))
        + f"<td>{e(', '.join(map(str, p.get('values', []))))}</td></tr>"
        for p in prior.definition.get("parameters", []))
    hosts = "\n".join(
        f"<tr><td>{e(h.client_id)}</td><td>{e(h.hostname or '')}</td>"
        f"<td>{e(str(h.cpu_count or ''))}</td><td>{e(_gib(h.ram_bytes))}</td>"
        f"<td>{e(h.os or '')}</td><td>{e(_when(h.joined))}</td></tr>" for h in prior.hosts)
    sections = [_figure(figures, "tuning_curve.png", "Tuning curve",
                        "Every evaluation's performance (grey; light grey: its samples when "
                        "a point is measured several times), the best so far (blue), failed "
                        "evaluations (red x).")]
    sections.append(_figure(figures, "knobs.png", "Knob trajectories",
                            "The value of each parameter at each evaluation, within its range "
                            "(grey lines)."))
    if comparison is not None:
        table = "".join(
            f"<tr><th>{e(k)}</th><td>{v:.6g} {e(comparison.unit)}</td>"
            f"<td>{e(_pct(comparison.gain(k)) if k != 'default' else '')}</td></tr>"
            for k, v in comparison.values.items())
        sections.append(_figure(figures, "comparison.png", "Default vs recommended vs tuned",
                                "Measured with the same protocol; percentages are gains over "
                                "the default.") + f"<table>{table}</table>")
    else:
        sections.append("<h2>Default vs recommended vs tuned</h2><p class=note>No comparison "
                        "was recorded for this session (session metadata <code>comparison</code>"
                        " or <code>--comparison FILE.json</code>).</p>")
    if bme is not None:
        p = bme["params"]
        caption = (f"Fitted P* = {p.p_star:.4g}, Pc = {p.p_c:.4g}, Mb = {_mib(p.m_b)}, "
                   f"M* = {_mib(p.m_star)}.")
        if bme.get("decision"):
            cost = bme.get("probe_cost_s")
            caption += (f" Probes ({len(bme['points'])}"
                        + (f", {float(cost):.1f} s" if isinstance(cost, int | float) else "")
                        + f"): {bme['decision']}: {bme['reason']}")
        if shared_buffers_throughput(prior):
            caption += " Grey squares (right axis): this session's throughput evaluations."
        sections.append(_figure(figures, "bme.png", "Buffer miss equation", caption))
    probed = _probe_rows(prior)
    if probed:
        sections.append("<h2>BME probes</h2><table><tr><th>pass</th><th>probes (size: "
                        "miss probability)</th><th>cost</th><th>decision</th></tr>"
                        + probed + "</table>")
    if bme is None and not probed:
        sections.append("<h2>Buffer miss equation</h2><p class=note>No BME fit was recorded for "
                        "this session (session metadata <code>bme</code> or <code>--bme "
                        "FILE.json</code>).</p>")
    screening = screening_from_metadata(prior)
    if screening is not None:
        table = "".join(
            f"<tr><th>{e(str(x['knob']))}</th><td>{float(x['ratio']):.3f}×</td>"
            f"<td>{'searched' if x['cleared'] else 'held'}</td><td>{e(str(x['reason']))}</td>"
            f"</tr>" for x in screening["effects"])
        sections.append(_figure(figures, "screening.png", "Knob screening",
                                "Each knob's effect over the noise before the search; only "
                                "the knobs whose effect cleared it were searched.")
                        + f"<table>{table}</table>")
    trial_rows = []
    shown = prior.trials[-MAX_TABLE_ROWS:]
    for t in shown:
        point = ", ".join(f"{k}={v}" for k, v in t.point.items())
        outcome = f"{t.value:.6g}" if t.value is not None else e(t.failure or "")
        trial_rows.append(f"<tr><td>{t.id}</td><td>{t.candidate}</td><td>{e(t.status)}</td>"
                          f"<td>{outcome}</td><td>{e(point)}</td><td>{e(t.client or '')}</td>"
                          f"<td>{e(_when(t.reported_at))}</td></tr>")
    more = (f"<p class=note>Showing the last {len(shown)} of {len(prior.trials)} trials.</p>"
            if len(shown) < len(prior.trials) else "")
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Harmony report: {e(prior.name)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 60em; color: #222; }}
h1 {{ font-size: 1.6em; }} h2 {{ font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid
#ddd; }} table {{ border-collapse: collapse; margin: 0.5em 0; }}
th, td {{ text-align: left; padding: 0.2em 0.8em; border-bottom: 1px solid #eee;
font-size: 0.92em; vertical-align: top; }} th {{ color: #555; font-weight: 600; }}
img {{ max-width: 100%; border: 1px solid #eee; }} .note {{ color: #666; font-size: 0.9em; }}
</style></head><body>
<h1>Harmony report: {e(prior.name)}</h1>
<table>{summary}</table>
<h2>Parameters</h2>
<table><tr><th>name</th><th>type</th><th>min</th><th>max</th><th>step</th><th>unit</th>
<th>values</th></tr>{params}</table>
<h2>Hosts</h2>
<table><tr><th>client</th><th>hostname</th><th>CPUs</th><th>RAM</th><th>OS</th><th>joined</th>
</tr>{hosts}</table>
{"".join(sections)}
<h2>Trials</h2>{more}
<table><tr><th>trial</th><th>candidate</th><th>status</th><th>value / failure</th><th>point</th>
<th>client</th><th>reported</th></tr>{"".join(trial_rows)}</table>
<p class=note>Generated {generated} by harmony {e(__version__)}.</p>
</body></html>
"""


def write_report(prior: PriorSession, out_dir: str | Path, *,
                 comparison: Mapping[str, Any] | Comparison | None = None,
                 bme: Mapping[str, Any] | None = None) -> Path:
    """Write ``report.html`` and the PNGs into ``out_dir``; returns the HTML file's path.

    ``comparison`` and ``bme`` default to the session metadata's ``comparison`` and ``bme``.
    """
    metadata = prior.definition.get("metadata", {}) or {}
    if not isinstance(comparison, Comparison):
        comparison = comparison_from_metadata(
            comparison if comparison is not None else metadata.get("comparison"),
            source="comparison" if comparison is not None else "session metadata comparison")
    fit = bme_from_metadata(bme if bme is not None else metadata.get("bme"),
                            source="bme" if bme is not None else "session metadata bme")
    figures = render_figures(prior, comparison, fit)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in figures.images.items():
        (out / name).write_bytes(data)
    page = out / "report.html"
    page.write_text(render_html(prior, figures, comparison, fit), encoding="utf-8")
    logger.info("wrote the report of session %s to %s (%d figures)", prior.name, page,
                len(figures.images))
    return page


def _probe_rows(prior: PriorSession) -> str:
    """Table rows of the tuner's probe decisions (session metadata ``bme_probes``)."""
    items = (prior.definition.get("metadata", {}) or {}).get("bme_probes")
    if not isinstance(items, list):
        return ""
    e = html.escape
    rows = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        shown = ", ".join(f"{_mib(float(p['size']))}: {float(p['miss']):.3f}"
                          for p in item.get("probes", []) or []
                          if isinstance(p, Mapping) and p.get("miss") is not None)
        cost = item.get("probe_cost_s")
        rows.append(f"<tr><td>{e(str(item.get('pass', '')))}</td><td>{e(shown)}</td>"
                    f"<td>{e(f'{float(cost):.1f} s' if isinstance(cost, int | float) else '')}"
                    f"</td><td>{e(str(item.get('decision', '')))}: "
                    f"{e(str(item.get('reason', '')))}</td></tr>")
    return "".join(rows)


# -- formatting helpers ----------------------------------------------------------------------
def _figure(figures: ReportFigures, name: str, title: str, caption: str) -> str:
    data = base64.b64encode(figures.images[name]).decode("ascii")
    return (f"<h2>{html.escape(title)}</h2><img alt=\"{html.escape(title)}\" "
            f"src=\"data:image/png;base64,{data}\"><p class=note>{html.escape(caption)}</p>")


def _when(t: float | None) -> str:
    return "" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(start: float | None, end: float | None) -> str:
    if start is None or end is None or end < start:
        return "-"
    seconds = int(end - start)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s"


def _gib(n: int | None) -> str:
    return "" if n is None else f"{n / 1024**3:.1f} GiB"


def _mib(n: float) -> str:
    return f"{n / 1024**2:.1f} MiB"


def _pct(g: float | None) -> str:
    return "" if g is None else f"{g:+.0%}"
