"""The report's opening paragraph: what the run concluded, in words, with the same numbers
(to the printed digit) as the tuner's printed result and ``summary.json``."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from harmony_report.inputs import LABEL_NAMES, Comparison, Interval, RunSummary


def number(value: float) -> str:
    """A measured value as the tuner prints it: one decimal, three significant digits below
    10 (live mode's relative speed is near 1)."""
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def percent(fraction: float) -> str:
    """``+37.5%``: a gain as the tuner prints it."""
    return f"{100 * fraction:+.1f}%"


def label_name(label: str) -> str:
    """How the tuner prints a final-round label (``best`` is ``tuned``)."""
    return LABEL_NAMES.get(label, f"tuned ({label})" if label.startswith("candidate")
                           or label == "screened" else label)


def interval_text(iv: Interval, level: float) -> str:
    """``+37.5% (95 % CI +22.8% to +54.0%)``: an interval of a ratio as gains; an
    anytime-valid one says so."""
    kind = "anytime-valid CI" if iv.method == "anytime" else "CI"
    pct = f"{100 * level:g}"
    if not iv.bounded:
        return f"{percent(iv.ratio - 1.0)} ({pct} % {kind} unbounded yet)"
    return (f"{percent(iv.ratio - 1.0)} ({pct} % {kind} {percent(iv.low - 1.0)} to "
            f"{percent(iv.high - 1.0)})")


def throughput_line(summary: RunSummary) -> str | None:
    """The tuner's printed ``default -> best`` line: the final rounds' means and the
    improvement with its interval, exactly as ``harmony tune`` prints them."""
    if summary.default_value is None or summary.best_value is None:
        return None
    ci = summary.improvement_ci
    shown = summary.winner_interval()
    kind = "anytime-valid CI" if (shown is not None and shown.method == "anytime") \
        or summary.race_method == "anytime" else "CI"
    return (f"throughput, default vs best interleaved over {len(summary.rounds)} round(s): "
            f"{number(summary.default_value)} -> {number(summary.best_value)} {summary.unit} "
            f"({percent(summary.improvement or 0.0)}"
            + (f", 95 % {kind} {percent(ci[0])} to {percent(ci[1])}" if ci else "") + ")")


def _per_transaction(summary: RunSummary) -> str:
    decision = summary.decision or {}
    transactions = sum(decision.get("transactions") or [])
    return (f"in one per-transaction run ({transactions:,} transactions in "
            f"{decision.get('rounds')} time slices, each transaction drawing one "
            f"configuration at random)")


def _split(summary: RunSummary) -> str:
    decision = summary.decision or {}
    transactions = sum(decision.get("transactions") or [])
    return (f"in two parts: the session-settable knobs in one run drawing a configuration "
            f"per transaction ({transactions:,} transactions) at the original's "
            f"restart-time settings, then the restart-time knobs over "
            f"{decision.get('rounds')} interleaved rounds in whole-server windows on top "
            f"of the part chosen")


def _switchback(summary: RunSummary) -> str:
    decision = summary.decision or {}
    return (f"by switchback over {decision.get('rounds')} blocks (one slice of each "
            f"configuration per block, the whole server switched by reload)")


def _duet(summary: RunSummary) -> str:
    decision = summary.decision or {}
    # the second cluster: a clone the run made, or the user's twin (summaries before
    # ``second`` was recorded raced on a clone)
    second = ("the twin named in database.twin" if decision.get("second") == "twin"
              else "a clone of it")
    return (f"by duet over {decision.get('rounds')} batches (the server and {second} "
            f"running the two configurations at the same seconds, roles swapped between "
            f"segments)")


def _windows(summary: RunSummary) -> str:
    return f"over {len(summary.rounds)} interleaved rounds in whole-server windows"


#: how each design summary.json names (``decision.design``) measured the race, in words; a
#: design this report does not know is said by its name
MEASURED_BY: Mapping[str, Callable[[RunSummary], str]] = {
    "per-transaction": _per_transaction, "split": _split, "switchback": _switchback,
    "duet": _duet, "windows": _windows}


def measured_by(summary: RunSummary) -> str:
    """How the final comparison was measured, with its observations: the design summary.json
    records (``decision.design``, a key of :data:`MEASURED_BY`; windows when absent)."""
    decision = summary.decision or {}
    design = str(decision.get("design") or "windows")
    words = MEASURED_BY.get(design)
    if words is None:
        return f"by the {design} design over {decision.get('rounds')} observations"
    return words(summary)


def in_words(summary: RunSummary) -> str | None:
    """The conclusion in plain words, with the interval it rests on and the design that
    measured it."""
    how = measured_by(summary)
    reference = label_name(summary.reference)
    winner_iv = summary.winner_interval()
    if summary.winner is not None and winner_iv is not None:
        text = (f"In words: {label_name(summary.winner)} measured "
                f"{interval_text(winner_iv, summary.level)} against the {reference} {how}")
        m = summary.candidates_counted
        return text + (f", an interval simultaneous over the {m} candidates it was picked "
                       "from, so it is recommended." if m > 1 else ", so it is recommended.")
    if summary.decision is not None:
        m = len(summary.intervals())
        return (f"In words: none of the {m} configurations raced measured clearly better than "
                f"the {reference} {how}, so the original configuration is kept.")
    return None


def verdict_sentences(summary: RunSummary | None, comparison: Comparison | None) -> list[str]:
    """The verdict as sentences of one paragraph: the decision's own lines (the ones the
    tuner printed), the throughput line, then the conclusion in plain words; without a run
    summary, what is known."""
    if summary is None:
        if comparison is not None and "default" in comparison.values:
            tuned = comparison.values.get("tuned")
            text = f"Default {number(comparison.values['default'])} {comparison.unit}"
            if tuned is not None:
                text += (f", tuned {number(tuned)} {comparison.unit} "
                         f"({percent(comparison.gain('tuned') or 0.0)} of the means)")
            return [text + ". No paired interval was recorded: pass the run's summary.json "
                           "(--summary) for the decision and its interval."]
        return ["No decision was recorded for this session: the report shows its search "
                "only (pass a tuning run's summary.json with --summary for the decision)."]
    lines = [line.strip() for line in (summary.decision or {}).get("text") or []]
    out = [f"{line[0].upper()}{line[1:]}." for line in lines if line]
    if not lines and summary.rounds:
        out.append("No decision: fewer than 2 final rounds were measured, so there is no "
                   "interval; the original configuration is kept.")
    throughput = throughput_line(summary)
    if throughput is not None:
        out.append(throughput[0].upper() + throughput[1:] + ".")
    words = in_words(summary)
    if words is not None:
        out.append(words)
    trips = (summary.guardrails or {}).get("trips")
    if isinstance(trips, int):
        out.append(f"Live mode: the guardrails tripped {trips} time(s)"
                   + ("; each trip reverted to the last good configuration." if trips else "."))
    return out
