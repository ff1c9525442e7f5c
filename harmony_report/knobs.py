"""The knob trajectories: each parameter's value per evaluation of a session, within its
range, failed points marked."""

from __future__ import annotations

from matplotlib.figure import Figure

from harmony_core.priordata import PriorSession
from harmony_report.draw import BEST, FAIL, png
from harmony_report.inputs import evaluations


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
        ax.plot(xs, ys, ".-", color=BEST, linewidth=1, markersize=5)
        if fx:
            ax.plot(fx, fy, "x", color=FAIL)
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
    return png(fig)
