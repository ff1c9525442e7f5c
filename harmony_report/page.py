"""The report page: one self-contained HTML file (PNGs embedded as data: URIs) plus the PNG
files, opening with the verdict in words.

Sections, each where it applies: the verdict; the comparison with every label's interval
(the winner's simultaneous one); the race round by round; the tuning curve in one declared
unit with the reference's drift; the knob trajectories; the screening; the BME fit and
probes; the guardrail trips (live mode); the replicas; the session's trials.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from harmony_base.jsontypes import JSON
from harmony_base.version import __version__
from harmony_core.priordata import PriorSession
from harmony_report import sections
from harmony_report.bme import bme_png
from harmony_report.comparison import comparison_png, means_only_png
from harmony_report.curve import run_curve_png, session_curve_png
from harmony_report.draw import ReportFigures
from harmony_report.inputs import (
    Comparison,
    ReportInputs,
    bme_from_metadata,
    comparison_from_metadata,
    is_run_summary,
    screening_from_metadata,
    shared_buffers_throughput,
    summary_from_json,
)
from harmony_report.knobs import knob_trajectories_png
from harmony_report.race import race_png
from harmony_report.screening import screening_png
from harmony_report.verdict import verdict_sentences

logger = logging.getLogger(__name__)


def render_figures(inputs: ReportInputs) -> ReportFigures:
    """Every PNG the report has, by file name."""
    figures = ReportFigures()
    summary, prior = inputs.summary, inputs.prior
    if summary is not None and summary.intervals():
        figures.images["comparison.png"] = comparison_png(summary)
    elif inputs.comparison is not None:
        figures.images["comparison.png"] = means_only_png(inputs.comparison)
    if summary is not None and any(summary.trajectory.values()):
        figures.images["race.png"] = race_png(summary)
    if summary is not None and summary.measurements:
        figures.images["tuning_curve.png"] = run_curve_png(summary)
    else:
        figures.images["tuning_curve.png"] = session_curve_png(prior)
    figures.images["knobs.png"] = knob_trajectories_png(prior)
    if inputs.screening is not None:
        figures.images["screening.png"] = screening_png(inputs.screening)
    if inputs.bme is not None:
        unit = summary.unit if summary is not None else "throughput"
        figures.images["bme.png"] = bme_png(inputs.bme, shared_buffers_throughput(prior), unit)
    return figures


def render_html(inputs: ReportInputs, figures: ReportFigures) -> str:
    """The self-contained page: verdict, figures (as data: URIs), tables, trials."""
    e = html.escape
    prior, summary = inputs.prior, inputs.summary
    verdict = " ".join(e(sentence) for sentence in verdict_sentences(summary, inputs.comparison))
    parts = [sections.comparison_section(inputs, figures),
             sections.race_section(summary, figures), sections.curve_section(inputs, figures),
             sections.figure(figures, "knobs.png", "Knob trajectories",
                             f"The value of each parameter of session {prior.name} at each "
                             "evaluation, within its range (grey lines)."),
             sections.screening_section(inputs, figures), sections.bme_section(inputs, figures),
             sections.guardrail_section(summary), sections.replica_section(summary)]
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Harmony report: {e(prior.name)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 62em; color: #222; }}
h1 {{ font-size: 1.6em; }} h2 {{ font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid
#ddd; }} table {{ border-collapse: collapse; margin: 0.5em 0; }}
th, td {{ text-align: left; padding: 0.2em 0.8em; border-bottom: 1px solid #eee;
font-size: 0.92em; vertical-align: top; }} th {{ color: #555; font-weight: 600; }}
img {{ max-width: 100%; border: 1px solid #eee; }} .note {{ color: #666; font-size: 0.9em; }}
#verdict {{ background: #f6f8fa; border-left: 4px solid #2ca02c; padding: 0.6em 1em; }}
</style></head><body>
<h1>Harmony report: {e(prior.name)}</h1>
<section><h2>Verdict</h2><p id=verdict>{verdict}</p></section>
{sections.session_table(prior, summary)}
{"".join(part for part in parts if part)}
{sections.trials_section(prior)}
<p class=note>Generated {generated} by harmony {e(__version__)}.</p>
</body></html>
"""


def write_report(prior: PriorSession, out_dir: str | Path, *,
                 comparison: Mapping[str, JSON] | Comparison | None = None,
                 bme: Mapping[str, JSON] | None = None,
                 summary: Mapping[str, JSON] | None = None) -> Path:
    """Write ``report.html`` and the PNGs into ``out_dir``; returns the HTML file's path.

    ``summary``: a ``harmony tune`` summary.json (parsed), whose decision, race and
    measurements the report draws; a summary passed as ``comparison`` counts as one too.
    ``comparison``, ``bme`` and the screening default to the summary's, then to the session
    metadata's ``comparison``, ``bme`` and ``screening``.
    """
    metadata = prior.definition.get("metadata", {}) or {}
    if summary is None and is_run_summary(comparison):
        # is_run_summary checked it is a summary.json mapping, not a Comparison
        summary, comparison = comparison, None  # type: ignore[assignment]
    run = summary_from_json(summary) if summary is not None else None
    if not isinstance(comparison, Comparison):
        comparison = comparison_from_metadata(
            comparison if comparison is not None else metadata.get("comparison"),
            source="comparison" if comparison is not None else "session metadata comparison")
    if comparison is None and run is not None:
        comparison = run.comparison
    fit_source = bme if bme is not None else metadata.get("bme") or (
        run.bme if run is not None else None)
    fit = bme_from_metadata(fit_source, source="bme" if bme is not None
                            else "session metadata bme")
    screening = screening_from_metadata(prior) or (run.screening if run is not None else None)
    inputs = ReportInputs(prior, run, comparison, fit, screening)
    figures = render_figures(inputs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in figures.images.items():
        (out / name).write_bytes(data)
    page = out / "report.html"
    page.write_text(render_html(inputs, figures), encoding="utf-8")
    logger.info("wrote the report of session %s to %s (%d figures)", prior.name, page,
                len(figures.images))
    return page
