"""The knob screening chart: each screened knob's effect with its noise band; the searched
knobs in colour, the held ones grey."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from matplotlib.figure import Figure

from harmony_report.draw import BEST, png


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
    colors = [BEST if e["cleared"] else "#bdbdbd" for e in effects]
    ax.barh(names, [r - 1.0 for r in ratios], left=1.0, color=colors, xerr=errors,
            error_kw={"ecolor": "#555555", "capsize": 3})
    ax.axvline(1.0, color="#333333", linewidth=0.8)
    ax.set_xlabel("throughput at the high end / at the low end")
    ax.set_title(f"knob screening ({screening.get('design', '?')}, "
                 f"{screening.get('evaluations', '?')} measurements): coloured = searched")
    ax.grid(True, axis="x", alpha=0.3)
    return png(fig)
