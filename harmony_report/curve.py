"""The tuning curve in one declared unit, with the reference's own drift beside it.

With a run's summary, every search evaluation is drawn as its paired ratio to its session's
reference (the configuration in force when the session started, measured just before and
after it), the best so far per session, and at the right the race's result on the same
scale: each final label's ratio to the default with its interval. The panel below draws the
reference's own measurements in the objective's unit: the machine's drift the ratios cancel.
Without pairing (``measure.paired: false``) the values are drawn in the objective's unit.
Without a summary, a session's values are drawn as its strategy saw them, and say so.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from matplotlib.figure import Figure

from harmony_core.priordata import PriorSession
from harmony_report.draw import BEST, CYCLE, FAIL, POINTS, REFERENCE, WIN, png
from harmony_report.inputs import RunSummary, evaluations
from harmony_report.verdict import label_name


def search_measurements(summary: RunSummary) -> list[dict[str, Any]]:
    """The search's measurements (screening and sessions), not the final rounds'."""
    return [m for m in summary.measurements if not str(m.get("session", "")).startswith("final")]


def paired(summary: RunSummary) -> bool:
    """Whether the search measured paired blocks (every successful evaluation has a ratio)."""
    done = [m for m in search_measurements(summary) if m.get("value") is not None
            and m.get("session") != "screening"]
    return bool(done) and all(m.get("ratio") is not None for m in done)


def run_curve_png(summary: RunSummary) -> bytes:
    """Ratios (or values) per evaluation, best so far per session, the race's result at the
    right; the reference's measurements below."""
    ms = search_measurements(summary)
    ratio = paired(summary)
    fig = Figure(figsize=(9, 6), dpi=100, layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    sessions = list(dict.fromkeys(str(m.get("session")) for m in ms))
    for i, session in enumerate(sessions):
        color = CYCLE[i % len(CYCLE)]
        xs, ys = [], []
        for x, m in enumerate(ms, 1):
            y = m.get("ratio") if ratio else m.get("value")
            if m.get("session") == session and y is not None:
                xs.append(x)
                ys.append(float(y))
        if not xs:
            continue
        unpaired = ratio and session == "screening"
        top.plot(xs, ys, "o", color=color, markersize=5, alpha=0.5 if unpaired else 1.0,
                 label=session)
        best = [max(ys[: k + 1]) for k in range(len(ys))]
        top.step(xs, best, where="post", color=color, linewidth=1.5, alpha=0.8)
    failed = [x for x, m in enumerate(ms, 1) if m.get("value") is None]
    if failed:
        top.plot(failed, [1.0 if ratio else 0.0] * len(failed), "x", color=FAIL,
                 label=f"failed ({len(failed)})")
    _mark_raced(top, summary, ms, ratio)
    end = len(ms) + 1
    _race_column(top, summary, end, ratio)
    if ratio:
        top.axhline(1.0, color=REFERENCE, linewidth=0.8)
        top.set_ylabel("ratio to the reference\n(paired blocks)")
    else:
        top.set_ylabel(summary.unit)
    top.set_title("tuning curve: " + ("each evaluation's ratio to its session's reference; "
                                      "at the right the final rounds' ratios to the default"
                                      if ratio else f"measured values ({summary.unit}), "
                                                    "not paired"), fontsize=10)
    top.grid(True, alpha=0.3)
    top.legend(loc="best", fontsize=8)
    # the reference's own level: what a raw value would have mixed into the comparison
    rx, ry = [], []
    for x, m in enumerate(ms, 1):
        for v in m.get("reference") or []:
            rx.append(x)
            ry.append(float(v))
    if rx:
        bottom.plot(rx, ry, ".", color=REFERENCE, label="reference, around each block")
    defaults = [v for row in summary.rounds if (v := row.get(summary.reference)) is not None]
    if defaults:
        bottom.plot([end] * len(defaults), defaults, "s", color=REFERENCE, alpha=0.6,
                    markersize=4, label=f"{summary.reference}, each final round")
    bottom.set_ylabel(f"reference ({summary.unit})")
    bottom.set_xlabel("evaluation (final rounds at the right)")
    bottom.grid(True, alpha=0.3)
    if rx or defaults:
        bottom.legend(loc="best", fontsize=8)
    bottom.set_ylim(bottom=0)
    return png(fig)


def raced_evaluations(summary: RunSummary) -> dict[str, list[int]]:
    """Final label -> the search evaluations (1-based, in :func:`search_measurements`) that
    measured its configuration: where the race's candidates came from."""
    ms = search_measurements(summary)
    out: dict[str, list[int]] = {}
    for m in summary.measurements:
        label = str(m.get("session", "")).removeprefix("final-")
        settings = m.get("in_force") or {}
        if not str(m.get("session", "")).startswith("final-") or label == summary.reference \
                or label in out or not settings:
            continue
        out[label] = [x for x, s in enumerate(ms, 1)
                      if all((s.get("in_force") or {}).get(k) == v for k, v in settings.items())]
    return {label: xs for label, xs in out.items() if xs}


def _mark_raced(ax: Any, summary: RunSummary, ms: list[dict[str, Any]], ratio: bool) -> None:
    """Ring the search evaluations whose configuration went on to the race."""
    for label, xs in raced_evaluations(summary).items():
        ys = [ms[x - 1].get("ratio" if ratio else "value") for x in xs]
        shown = [(x, float(y)) for x, y in zip(xs, ys, strict=True) if y is not None]
        if shown:
            ax.plot([x for x, _ in shown], [y for _, y in shown], "o", markersize=11,
                    markerfacecolor="none",
                    markeredgecolor=WIN if label == summary.winner else "#333333",
                    label=f"raced as {label_name(label)}")


def _race_column(ax: Any, summary: RunSummary, x: int, ratio: bool) -> None:
    """The race's result at ``x``: each label's ratio to the default and interval (the
    winner's simultaneous one), or its mean when unpaired."""
    intervals = summary.intervals()
    winner_iv = summary.winner_interval()
    for i, label in enumerate(intervals):
        iv = winner_iv if label == summary.winner and winner_iv is not None else intervals[label]
        offset = x + 0.25 * i
        color = WIN if label == summary.winner else POINTS
        if ratio:
            low = iv.low if iv.low > 0 else iv.ratio / 2
            high = iv.high if math.isfinite(iv.high) else iv.ratio * 2
            ax.errorbar([offset], [iv.ratio], yerr=[[iv.ratio - low], [high - iv.ratio]],
                        fmt="D", color=color, capsize=3,
                        label=f"final: {label_name(label)} / {summary.reference}")
        else:
            mean = summary.mean(label)
            if mean is not None:
                ax.plot([offset], [mean], "D", color=color,
                        label=f"final: {label_name(label)} (mean)")


def session_curve_png(prior: PriorSession) -> bytes:
    """Every evaluation's aggregate and samples as the session's strategy saw them, the best
    so far, failures along the bottom."""
    evals = evaluations(prior)
    fig = Figure(figsize=(8, 4), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    sx = [i + 1 for i, ev in enumerate(evals) for _ in ev.samples if len(ev.samples) > 1]
    sy = [y for ev in evals for y in ev.samples if len(ev.samples) > 1]
    if sx:
        ax.plot(sx, sy, ".", color="#c7c7c7", markersize=4, label="samples")
    xs = [i + 1 for i, ev in enumerate(evals) if ev.value is not None]
    ys = [float(ev.value) for ev in evals if ev.value is not None]
    ax.plot(xs, ys, "o", color=POINTS, markersize=5, label="evaluation")
    pick = max if prior.maximize else min
    best = [pick(ys[: k + 1]) for k in range(len(ys))]
    if xs:
        ax.step(xs, best, where="post", color=BEST, linewidth=2, label="best so far")
    failed = [i + 1 for i, ev in enumerate(evals) if ev.value is None]
    if failed:
        low = min(ys) if ys else 0.0
        ax.plot(failed, [low] * len(failed), "x", color=FAIL, label=f"failed ({len(failed)})")
    objective = prior.definition.get("objective", {})
    ax.set_xlabel("evaluation")
    ax.set_ylabel(f"{objective.get('name', 'value')} (as the strategy saw it)")
    ax.set_title(f"{prior.name}: tuning curve ({objective.get('goal', 'minimize')})")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    return png(fig)


def drift(summary: RunSummary) -> float | None:
    """The reference's spread over the search (max/min of its measurements), or None."""
    values = [float(v) for m in search_measurements(summary) for v in m.get("reference") or []]
    if len(values) < 2 or min(values) <= 0:
        return None
    return max(values) / min(values) if statistics.fmean(values) > 0 else None
