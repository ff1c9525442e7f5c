"""The report page's sections, each an HTML fragment drawn from the report's inputs and
figures, and empty where it does not apply: the session, the comparison, the race, the tuning
curve, the screening, the BME fit and probes, the guardrail trips, the replicas, the trials."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from datetime import UTC, datetime

from harmony_core.priordata import PriorSession
from harmony_report.comparison import raced_labels
from harmony_report.curve import drift, paired
from harmony_report.draw import ReportFigures
from harmony_report.inputs import (
    ReportInputs,
    RunSummary,
    evaluations,
    shared_buffers_throughput,
    shown_status,
)
from harmony_report.verdict import interval_text, label_name, number

#: trials listed in the HTML table at most (the newest are kept)
MAX_TABLE_ROWS = 500


def session_table(prior: PriorSession, run: RunSummary | None) -> str:
    e = html.escape
    evals = evaluations(prior)
    measured = [ev for ev in evals if ev.value is not None]
    pick = max if prior.maximize else min
    # every value in ``measured`` is a number; max or min is chosen at run time
    top = pick(measured, key=lambda ev: ev.value) if measured else None  # type: ignore[arg-type, return-value]
    objective = prior.definition.get("objective", {})
    counts: dict[str, int] = {}
    for t in prior.trials:
        counts[t.status] = counts.get(t.status, 0) + 1
    ended = max((t.reported_at for t in prior.trials if t.reported_at is not None), default=None)
    strategy = prior.definition.get("strategy", {})
    strategy_name = strategy.get("name") if isinstance(strategy, Mapping) else strategy
    rows = [
        ("session", prior.name),
        ("status", shown_status(prior)),
        ("objective", f"{objective.get('name', 'value')} ({objective.get('goal', 'minimize')})"),
        *([("unit", f"{run.unit} (the run's measurements and decision)")] if run else []),
        ("strategy", str(strategy_name)),
        ("plugins", ", ".join(p.get("name", "?") for p in prior.definition.get("plugins", []))
         or "none"),
        ("started", _when(prior.created)),
        ("duration", _duration(prior.created, ended)),
        ("trials", ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"),
        ("evaluations", f"{len(evals)} points measured"
         + (f", {sum(v.value is None for v in evals)} failed"
            if any(v.value is None for v in evals) else "")),
        ("best value", f"{top.value:.6g} (as the session's strategy saw it)"
         if top is not None else "none yet"),
        ("best point", ", ".join(f"{k} = {v}" for k, v in top.point.items())
         if top is not None else "-"),
    ]
    summary = "\n".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in rows)
    params = "\n".join(
        "<tr>" + "".join(f"<td>{e(str(p.get(k, '')))}</td>" for k in
                         ("name", "type", "min", "max", "step", "unit"))
        + f"<td>{e(', '.join(map(str, p.get('values', []))))}</td></tr>"
        for p in prior.definition.get("parameters", []))
    hosts = "\n".join(
        f"<tr><td>{e(h.client_id)}</td><td>{e(h.hostname or '')}</td>"
        f"<td>{e(str(h.cpu_count or ''))}</td><td>{e(_gib(h.ram_bytes))}</td>"
        f"<td>{e(h.os or '')}</td><td>{e(_when(h.joined))}</td></tr>" for h in prior.hosts)
    return (f"<h2>Session</h2><table>{summary}</table>\n<h2>Parameters</h2>\n"
            "<table><tr><th>name</th><th>type</th><th>min</th><th>max</th><th>step</th>"
            f"<th>unit</th><th>values</th></tr>{params}</table>\n<h2>Hosts</h2>\n"
            "<table><tr><th>client</th><th>hostname</th><th>CPUs</th><th>RAM</th><th>OS</th>"
            f"<th>joined</th></tr>{hosts}</table>")


def comparison_section(inputs: ReportInputs, figures: ReportFigures) -> str:
    e = html.escape
    summary, comparison = inputs.summary, inputs.comparison
    title = "Default vs the candidates: the final rounds"
    if summary is not None and summary.intervals():
        intervals = summary.intervals()
        winner_iv = summary.winner_interval()
        rows = []
        for label in raced_labels(summary):
            mean = summary.mean(label)
            iv = winner_iv if label == summary.winner else intervals.get(label)
            shown = "the reference" if label == summary.reference else (
                interval_text(iv, summary.level) if iv is not None else "no interval")
            if label == summary.winner and summary.candidates_counted > 1:
                shown += f", simultaneous over {summary.candidates_counted} candidates"
            rows.append(f"<tr><th>{e(label_name(label))}</th><td>"
                        f"{e(number(mean)) if mean is not None else '-'} {e(summary.unit)}</td>"
                        f"<td>{e(shown)}</td></tr>")
        caption = (f"Each label measured once per round, interleaved, over "
                   f"{len(summary.rounds)} rounds. Left: the means in {summary.unit}. Right: "
                   f"the ratio to the {summary.reference} paired by round with its interval, "
                   "as gains; the recommended candidate's interval is the simultaneous one "
                   "its recommendation rests on.")
        return (figure(figures, "comparison.png", title, caption)
                + "<table><tr><th>label</th><th>mean</th><th>vs the reference</th></tr>"
                + "".join(rows) + "</table>")
    if comparison is not None:
        table = "".join(
            f"<tr><th>{e(k)}</th><td>{e(number(v))} {e(comparison.unit)}</td>"
            f"<td>{e(_pct(comparison.gain(k)) if k != 'default' else '')}</td></tr>"
            for k, v in comparison.values.items())
        return (figure(figures, "comparison.png", title,
                       "Means only, gains over the default's mean: no paired interval was "
                       "recorded, so no difference here is a decision (pass the run's "
                       "summary.json with --summary).") + f"<table>{table}</table>")
    return (f"<h2>{e(title)}</h2><p class=note>No comparison was recorded for this session "
            "(session metadata <code>comparison</code>, or the run's <code>--summary "
            "summary.json</code>).</p>")


def race_section(summary: RunSummary | None, figures: ReportFigures) -> str:
    """The race chart with who left it and why; without the rounds traced in summary.json
    (a tuner before them), the drops and the unstable candidates alone."""
    if summary is None or summary.decision is None:
        return ""
    e = html.escape
    rows = "".join(
        f"<tr><th>{e(label_name(label))}</th><td>after round {after}</td>"
        f"<td>{e(why or 'no reason recorded')}</td></tr>"
        for label, (after, why) in summary.dropped.items())
    rows += "".join(f"<tr><th>{e(label_name(label))}</th><td>unstable, not recommended</td>"
                    f"<td>{e(why)}</td></tr>"
                    for label, why in summary.unstable_labels().items())
    verdict = (f"{label_name(summary.winner)} recommended" if summary.winner
               else f"kept the original ({label_name(summary.reference)})")
    unit = summary.race_unit
    caption = (f"Each label's ratio to the {summary.reference} over the {unit}s so far, with "
               f"its {100 * summary.level:g} % interval narrowing {unit} by {unit}; a red cross "
               f"where a candidate left the race. Result: {verdict}."
               + (f" The race stopped: {summary.stopped}." if summary.stopped else "")
               + (f" The bands: {summary.race_note}." if summary.race_note else ""))
    table = ("<table><tr><th>candidate</th><th>left the race</th><th>why</th></tr>"
             f"{rows}</table>") if rows else "<p class=note>No candidate was dropped.</p>"
    if "race.png" not in figures.images:
        return ("<h2>The race</h2><p class=note>The race's rounds were not traced in "
                "summary.json; the verdict above gives its result.</p>" + table)
    return figure(figures, "race.png", "The race", caption) + table


def curve_section(inputs: ReportInputs, figures: ReportFigures) -> str:
    summary = inputs.summary
    if summary is None or not summary.measurements:
        return figure(figures, "tuning_curve.png", "Tuning curve",
                      "Every evaluation of this session as its strategy saw it (grey; light "
                      "grey: its samples when a point is measured several times), the best "
                      "so far (blue), failed evaluations (red x). With the run's summary.json "
                      "(--summary) the curve is drawn as paired ratios instead.")
    spread = drift(summary)
    if paired(summary):
        caption = ("One unit throughout: each search evaluation's ratio to its session's "
                   "reference, measured just before and after it (the configuration in force "
                   "when the session started), the best so far per session (steps), rings "
                   "round the evaluations whose configuration went on to the race; at the "
                   f"right, the final rounds' ratios to the {summary.reference} with their "
                   "intervals (the recommended one's simultaneous). Below, the reference's "
                   f"own measurements in {summary.unit}: the drift the ratios cancel")
        caption += f" (max/min {spread:.2f}×)." if spread is not None else "."
    else:
        caption = (f"Measured values in {summary.unit} (not paired: measure.paired is off, so "
                   "the machine's drift is in them); at the right, the final rounds' means.")
    return figure(figures, "tuning_curve.png", "Tuning curve", caption)


#: how each design the screening records (``measured``) measured it, in words
SCREENED_BY = {
    "per-transaction": "the design's rows as the arms of one randomized per-transaction run "
                       "({transactions:,} transactions)",
    "windows": "one throughput window per design run, the default between them"}


def screening_section(inputs: ReportInputs, figures: ReportFigures) -> str:
    screening = inputs.screening
    if screening is None:
        return ""
    e = html.escape
    table = "".join(
        f"<tr><th>{e(str(x['knob']))}</th><td>{float(x['ratio']):.3f}×</td>"
        f"<td>{'searched' if x['cleared'] else 'held'}</td><td>{e(str(x['reason']))}</td>"
        f"</tr>" for x in screening["effects"])
    transactions = int(screening.get("transactions") or 0)
    measured = SCREENED_BY.get(str(screening.get("measured") or "windows"),
                               SCREENED_BY["windows"]).format(transactions=transactions)
    return figure(figures, "screening.png", "Knob screening",
                  "Each knob's effect over the noise before the search; only the knobs whose "
                  f"effect cleared it were searched. Measured: {e(measured)}.") \
        + f"<table>{table}</table>"


def bme_section(inputs: ReportInputs, figures: ReportFigures) -> str:
    bme, prior = inputs.bme, inputs.prior
    out = ""
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
        out += figure(figures, "bme.png", "Buffer miss equation", caption)
    probed = _probe_rows(prior)
    if probed:
        out += ("<h2>BME probes</h2><table><tr><th>pass</th><th>probes (size: miss "
                "probability)</th><th>cost</th><th>decision</th></tr>" + probed + "</table>")
    # with a run's summary and no fit, the run searched no buffer size (e.g. live mode)
    if bme is None and not probed and inputs.summary is None:
        out += ("<h2>Buffer miss equation</h2><p class=note>No BME fit was recorded for this "
                "session (session metadata <code>bme</code> or <code>--bme FILE.json</code>)."
                "</p>")
    return out


def guardrail_section(summary: RunSummary | None) -> str:
    """Live mode: every guardrail trip, what it reverted and how fast."""
    guard = summary.guardrails if summary is not None else None
    if guard is None:
        return ""
    e = html.escape
    events = [t for t in guard.get("events") or [] if isinstance(t, Mapping)]
    rows = "".join(
        f"<tr><td>{e(str(t.get('kind', '')))}</td><td>{e(str(t.get('reason', '')))}</td>"
        f"<td>{e(_settings(t.get('settings')))}</td><td>{e(_settings(t.get('restored')))}</td>"
        f"<td>{e(_seconds(t.get('detected_after_s')))}</td>"
        f"<td>{e(_seconds(t.get('revert_s')))}</td>"
        f"<td>{e(str(t.get('failure') or ''))}</td></tr>" for t in events)
    head = (f"<h2>Guardrails (live mode)</h2><p>{len(events)} trip(s)"
            + (f": {e(', '.join(f'{k} {n}' for k, n in (guard.get('by_kind') or {}).items()))}"
               if events else "; no configuration was reverted") + ".</p>")
    if not rows:
        return head
    return (head + "<table><tr><th>kind</th><th>reason</th><th>settings</th><th>restored</th>"
            "<th>detected after</th><th>reverted in</th><th>revert failure</th></tr>"
            f"{rows}</table>")


def replica_section(summary: RunSummary | None) -> str:
    """A run over several replicas: which replica measured what."""
    if summary is None:
        return ""
    counts: dict[str, dict[str, int]] = {}
    for m in summary.measurements:
        replica = m.get("replica")
        if replica is None:
            continue
        session = str(m.get("session", "?"))
        kind = "final rounds" if session.startswith("final") else session
        per = counts.setdefault(str(replica), {})
        per[kind] = per.get(kind, 0) + 1
    if not counts:
        return ""
    e = html.escape
    kinds = list(dict.fromkeys(k for per in counts.values() for k in per))
    rows = "".join(f"<tr><th>{e(r)}</th>" + "".join(f"<td>{per.get(k, 0)}</td>" for k in kinds)
                   + "</tr>" for r, per in counts.items())
    return ("<h2>Replicas</h2><p class=note>Measurements per replica and session; each final "
            "round is measured whole on one replica, so its ratios are paired on one "
            "machine.</p><table><tr><th>replica</th>"
            + "".join(f"<th>{e(k)}</th>" for k in kinds) + f"</tr>{rows}</table>")


def trials_section(prior: PriorSession) -> str:
    e = html.escape
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
    return (f"<h2>Trials</h2>{more}<table><tr><th>trial</th><th>candidate</th><th>status</th>"
            "<th>value / failure</th><th>point</th><th>client</th><th>reported</th></tr>"
            f"{''.join(trial_rows)}</table>")


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
def figure(figures: ReportFigures, name: str, title: str, caption: str) -> str:
    data = base64.b64encode(figures.images[name]).decode("ascii")
    return (f"<h2>{html.escape(title)}</h2><img alt=\"{html.escape(title)}\" "
            f"src=\"data:image/png;base64,{data}\"><p class=note>{html.escape(caption)}</p>")


def _settings(settings: object) -> str:
    if not isinstance(settings, Mapping):
        return ""
    return ", ".join(f"{k} = {v}" for k, v in settings.items())


def _seconds(value: object) -> str:
    return f"{float(value):.2f} s" if isinstance(value, int | float) else ""


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
    return "" if g is None else f"{100 * g:+.1f}%"

