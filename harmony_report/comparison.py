"""The comparison chart: every label of the final rounds against the default, with the
interval the decision used (the winner's simultaneous one), in the objective's own unit.

Left: each label's mean over the final rounds in the objective's unit (the numbers the tuner
prints). Right: each label's paired ratio to the reference with its interval, written as
gains the way the tuner prints them; the winner's bar is the simultaneous interval its
recommendation rests on.
"""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from harmony_report.draw import BEST, POINTS, REFERENCE, WIN, png
from harmony_report.inputs import COMPARISON_LABELS, Comparison, Interval, RunSummary
from harmony_report.verdict import interval_text, label_name, number, percent


def raced_labels(summary: RunSummary) -> list[str]:
    """The reference, then every label the decision judged, in its order."""
    return [summary.reference, *summary.intervals()]


def comparison_png(summary: RunSummary) -> bytes:
    """Means in the unit (left) and ratios with their intervals (right), one row a label."""
    labels = raced_labels(summary)
    intervals = summary.intervals()
    winner = summary.winner
    fig = Figure(figsize=(10, 0.65 * len(labels) + 1.9), dpi=100, layout="constrained")
    left, right = fig.subplots(1, 2, sharey=True, width_ratios=(2, 3))
    rows = list(range(len(labels)))[::-1]  # the reference on top
    names = [label_name(label) + (" (recommended)" if label == winner else "")
             for label in labels]
    means = [summary.mean(label) or 0.0 for label in labels]
    colors = [REFERENCE if label == summary.reference else WIN if label == winner else BEST
              for label in labels]
    left.barh(rows, means, color=colors, alpha=0.8)
    for y, value in zip(rows, means, strict=True):
        left.annotate(f" {number(value)}", (value, y), va="center", fontsize=8)
    left.set_yticks(rows, names)
    left.set_xlabel(f"mean over {len(summary.rounds)} final rounds ({summary.unit})")
    left.set_xlim(0, max(means) * 1.3 if means and max(means) > 0 else 1)
    left.grid(True, axis="x", alpha=0.3)
    right.axvline(1.0, color=REFERENCE, linewidth=1)
    shown = [1.0]
    for y, label in zip(rows, labels, strict=True):
        if label == summary.reference:
            right.annotate("the reference (1×)", (1.0, y), xytext=(0, 7),
                           textcoords="offset points", ha="center", va="bottom", fontsize=8)
            continue
        iv = summary.winner_interval() if label == winner else intervals.get(label)
        if iv is None:
            continue
        low, high = _drawn(iv)
        shown += [low, high, iv.ratio]
        right.errorbar([iv.ratio], [y], xerr=[[iv.ratio - low], [high - iv.ratio]], fmt="o",
                       color=WIN if label == winner else BEST, capsize=4,
                       linewidth=2.5 if label == winner else 1.5)
        text = interval_text(iv, summary.level)
        if label == winner and summary.candidates_counted > 1:
            text += f", simultaneous over {summary.candidates_counted}"
        # above its bar, centred: long labels stay inside the panel
        right.annotate(text, (iv.ratio, y), xytext=(0, 7), textcoords="offset points",
                       ha="center", va="bottom", fontsize=8)
    span = max(shown) - min(shown)
    right.set_xlim(min(shown) - 0.3 * span - 0.02, max(shown) + 0.3 * span + 0.02)
    right.set_ylim(-0.6, len(labels) - 0.2)
    right.set_xlabel(f"ratio to {label_name(summary.reference)}, paired by round "
                     f"({_method(summary)})")
    right.grid(True, axis="x", alpha=0.3)
    verdict = (f"recommended: {label_name(winner)}" if winner
               else f"kept the original ({label_name(summary.reference)})")
    fig.suptitle(f"final rounds: {verdict}")
    return png(fig)


def _method(summary: RunSummary) -> str:
    methods = {iv.method for iv in summary.intervals().values() if iv.method}
    kind = "anytime-valid CI" if methods == {"anytime"} else "CI"
    return f"{100 * summary.level:g} % {kind}"


def _drawn(iv: Interval) -> tuple[float, float]:
    """The interval's ends as drawn: an unbounded end is drawn at twice the ratio (and said
    so in its label)."""
    low = iv.low if iv.low > 0 else iv.ratio / 2
    high = iv.high if math.isfinite(iv.high) else iv.ratio * 2
    return low, high


def means_only_png(comparison: Comparison) -> bytes:
    """Without a run summary: the recorded means only, and the title says no interval was
    recorded (a reader must not take a difference of means for a decision)."""
    labels = [k for k in COMPARISON_LABELS if k in comparison.values] + sorted(
        k for k in comparison.values if k not in COMPARISON_LABELS)
    values = [comparison.values[k] for k in labels]
    fig = Figure(figsize=(6, 3.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    colors = {"default": REFERENCE, "recommended": "#ff7f0e", "tuned": WIN}
    bars = ax.bar(labels, values, color=[colors.get(k, POINTS) for k in labels])
    for bar, label in zip(bars, labels, strict=True):
        gain = comparison.gain(label)
        text = number(bar.get_height()) + (f"\n{percent(gain)}" if gain is not None and
                                           label != "default" else "")
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom", fontsize=9)
    ax.set_ylabel(comparison.unit)
    ax.set_ylim(0, max(values) * 1.25 if values and max(values) > 0 else 1)
    ax.set_title("means only: no paired interval recorded (pass summary.json)", fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)
    return png(fig)
