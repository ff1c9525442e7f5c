"""The race as a picture: per label, its ratio to the reference after each round with its
interval narrowing, where each candidate was dropped, and the winner or "kept the original"."""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from harmony_report.draw import CYCLE, REFERENCE, WIN, png
from harmony_report.inputs import RunSummary
from harmony_report.verdict import label_name


def race_png(summary: RunSummary) -> bytes:
    """One line and band per label; a cross where a candidate left the race."""
    fig = Figure(figsize=(9, 4.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.axhline(1.0, color=REFERENCE, linewidth=1, label=label_name(summary.reference))
    finite: list[float] = [1.0]
    for i, (label, steps) in enumerate(summary.trajectory.items()):
        if not steps:
            continue
        color = WIN if label == summary.winner else CYCLE[i % len(CYCLE)]
        xs = [s.round for s in steps]
        ratios = [s.interval.ratio for s in steps]
        last = steps[-1].interval
        finite += ratios + [v for v in (last.low, last.high) if v > 0 and math.isfinite(v)]
        name = label_name(label) + (" (recommended)" if label == summary.winner else "")
        if label in summary.unstable_labels():
            name += " (unstable)"
        ax.plot(xs, ratios, "o-", color=color, linewidth=2.5 if label == summary.winner else 1.5,
                markersize=4, label=name)
        lows, highs = [s.interval.low for s in steps], [s.interval.high for s in steps]
        ax.fill_between(xs, lows, highs, color=color, alpha=0.10, linewidth=0)
        for edge in (lows, highs):
            ax.plot(xs, edge, "--", color=color, linewidth=0.8, alpha=0.7)
        if label in summary.dropped:
            after, _ = summary.dropped[label]
            ax.plot([xs[-1]], [ratios[-1]], "x", color="#d62728", markersize=11,
                    markeredgewidth=2.5)
            ax.annotate(f"dropped after {after}", (xs[-1], ratios[-1]), xytext=(5, -12),
                        textcoords="offset points", fontsize=8, color="#d62728")
    # the scale of the last rounds' intervals: the first rounds' (a t interval over 2 pairs
    # spans several-fold) run off the chart rather than flatten the rest
    low, high = min(finite), max(finite)
    pad = 0.1 * (high - low) + 0.02
    ax.set_ylim(max(0.0, low - pad), high + pad)
    unit = summary.race_unit
    final_step = max((s.round for trail in summary.trajectory.values() for s in trail), default=2)
    ax.set_xlim(1.5, final_step + 0.5)
    if final_step <= 30:
        ax.set_xticks(range(2, final_step + 1))
    ax.set_xlabel(f"after {unit}")
    ax.set_ylabel(f"ratio to {label_name(summary.reference)}, paired by {unit}")
    method = "anytime-valid confidence sequence" if summary.race_method == "anytime" \
        else f"{summary.race_method or 't'} interval"
    verdict = (f"{label_name(summary.winner)} recommended" if summary.winner
               else "kept the original")
    ax.set_title(f"the race over {final_step} {unit}s: {verdict} (bands: "
                 f"{100 * summary.level:g} % {method})", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return png(fig)
