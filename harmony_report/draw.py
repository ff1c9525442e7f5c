"""What every chart shares: the PNG canvas (matplotlib's object API on Agg: no pyplot, no
display) and the colours."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

BEST = "#1f77b4"
POINTS = "#7f7f7f"
FAIL = "#d62728"
WIN = "#2ca02c"
REFERENCE = "#555555"
#: one colour per label or session, in order
CYCLE = ("#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)
    return buf.getvalue()


@dataclass
class ReportFigures:
    """The PNGs of one report, by file name (bytes)."""

    images: dict[str, bytes] = field(default_factory=dict)
