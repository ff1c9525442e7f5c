"""A session's report: one self-contained HTML page (PNGs embedded) plus the PNG files.

It opens with the verdict in words and draws, each where it applies: the final comparison with
every interval the decision used, the race round by round, the tuning curve in one declared
unit beside the reference's drift, the knob trajectories, the screening, the Buffer Miss
Equation fit and probes, the guardrail trips and the replicas. It reads a session (prior
data) and, when there is one, the tuning run's ``summary.json``; it knows nothing of where
they came from. One module per chart; :mod:`harmony_report.page` puts the page together.
"""

from harmony_report.draw import ReportFigures
from harmony_report.inputs import (
    Comparison,
    Evaluation,
    RunSummary,
    bme_from_metadata,
    comparison_from_metadata,
    evaluations,
    shared_buffers_throughput,
    shown_status,
    summary_from_json,
)
from harmony_report.page import render_html, write_report

__all__ = ["Comparison", "Evaluation", "ReportFigures", "RunSummary", "bme_from_metadata",
           "comparison_from_metadata", "evaluations", "render_html",
           "shared_buffers_throughput", "shown_status", "summary_from_json", "write_report"]
