"""The Buffer Miss Equation chart: the probes' measured miss probabilities against buffer
size, the fitted curve and M*, with the session's throughput evaluations beside them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from bme.equation import miss_probability
from harmony_report.draw import BEST, WIN, png

MIB = 1024.0 * 1024.0


def bme_png(fit: Mapping[str, Any], throughput: Sequence[tuple[float, float]] = (),
            unit: str = "throughput") -> bytes:
    """Measured miss probabilities (the probes) against buffer size, the fitted curve, M*,
    and beside them (right axis, in ``unit``) the throughput evaluations at their
    shared_buffers."""
    params = fit["params"]
    points: Sequence[tuple[float, float]] = fit["points"]
    high = max([params.m_star * 1.5] + [m * 1.1 for m, _ in points]
               + [m * 1.1 for m, _ in throughput])
    low = max(1.0, -params.m_b + 1.0)
    sizes = np.linspace(low, high, 300)
    fig = Figure(figsize=(7, 4), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    ax.plot(sizes / MIB, np.minimum(miss_probability(params, sizes), 1.0), color=BEST,
            label="BME fit" + (f" (R² {fit['r2']:.3f})" if fit.get("r2") is not None else ""))
    if points:
        ax.plot([m / MIB for m, _ in points], [p for _, p in points], "o", color="#ff7f0e",
                label="probes" if fit.get("decision") else "measured")
    ax.axvline(params.m_star / MIB, color=WIN, linestyle="--",
               label=f"M* = {params.m_star / MIB:.0f} MiB")
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
        right.plot([m / MIB for m, _ in throughput], [v for _, v in throughput], "s",
                   color="#7f7f7f", alpha=0.7, label="throughput evaluations")
        right.set_ylabel(unit)
        right.set_ylim(bottom=0)
        more_h, more_l = right.get_legend_handles_labels()
        handles, labels = handles + more_h, labels + more_l
    ax.legend(handles, labels, loc="center right")
    return png(fig)
