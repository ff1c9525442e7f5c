"""The sentences of the phases' decisions before the final race (issue 53): a skipped step,
where a search starts, a model's advice, the knobs searched or held, a setting put in force,
the online pass's watch for a shift, a candidate's rank by the ledger, the replicas. Each is
made from its record's fields here, and :func:`tuner_client.phases.decisions.render` (the
one place the log, the CLI and ``summary.json`` take a decision's words from) calls it by
kind; the race's own kinds are rendered there.

The sentences are the run's long-standing words (tests and users grep them); a record keeps
the numbers they are made of, so that a program reads them without parsing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol


class Decision(Protocol):
    """The fields of a :class:`tuner_client.phases.decisions.Decision` its sentence reads
    (a protocol: the record's module renders with this one, so this one cannot import it)."""

    @property
    def phase(self) -> str: ...
    @property
    def design(self) -> str | None: ...
    @property
    def stage(self) -> str | None: ...
    @property
    def step(self) -> str | None: ...
    @property
    def labels(self) -> tuple[str, ...]: ...
    @property
    def settings(self) -> Mapping[str, Mapping[str, str]]: ...
    @property
    def values(self) -> Mapping[str, float | str]: ...
    @property
    def series(self) -> tuple[float, ...]: ...
    @property
    def count(self) -> int | None: ...
    @property
    def seconds(self) -> float | None: ...
    @property
    def level(self) -> float | None: ...
    @property
    def followed(self) -> bool | None: ...
    @property
    def why(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def method(self) -> str | None: ...
    @property
    def text(self) -> str | None: ...


def _dict(settings: Mapping[str, object]) -> str:
    return str(dict(settings))


def _skipped(d: Decision) -> str:
    stage = f"{d.stage}: " if d.stage else ""
    return f"{d.phase}: {stage}{d.reason}"


def _start(d: Decision) -> str:
    start = d.settings.get("start", {})
    if d.step == "warm start" and d.labels:
        return (f"{d.phase}: warm start from prior session(s) {', '.join(d.labels)}: first "
                f"point {_dict(d.values)} ({d.method})")
    if d.step == "warm start":
        where = f"from {_dict(d.values)}" if d.values else "as configured"
        return (f"{d.phase}: warm start: no compatible prior session has a point in range; "
                f"starting {where}")
    if d.step == "equation":
        return (f"{d.phase}: shared_buffers from the equation ({d.why}): measuring "
                f"{start['shared_buffers']} only, no search")
    if d.step == "BME probes":
        return (f"{d.phase}: the probes replace most of the search: {d.count} evaluation(s) "
                f"from {start['shared_buffers']}, the first step "
                f"{float(d.values['init_radius']):.0%} of the window")
    return (f"{d.phase}: the design predicts the best at {_dict(start)}: the online search "
            f"starts there, and it races in the final rounds")


def _model(d: Decision) -> str:
    if d.step == "BME" and not d.followed:
        return f"{d.phase}: BME advice not used ({d.reason}); the plain search goes on"
    if d.step == "BME":
        return (f"{d.phase}: BME fitted ({d.reason}); restarting the offline search in "
                f"{d.text} from {_dict(d.values)}")
    shown = ", ".join(f"{size}: {float(miss):.3f}" for size, miss in d.values.items())
    head = f"{d.phase}: BME probes ({shown}; {d.seconds or 0.0:.1f} s)"
    if not d.followed:
        return (f"{head} not used: {d.reason}; the plain search goes on"
                + (f" ({d.count} probe(s) failed: {d.text})" if d.count else ""))
    window = d.settings["window"]
    return (f"{head}: {d.method}, {d.reason}; the offline search starts at "
            f"{d.settings['start']['shared_buffers']} in {window['low']}..{window['high']}, "
            f"leaving {window['left']} of the shared_buffers cap to the online knobs and the "
            f"OS cache")


def _knobs(d: Decision) -> str:
    if d.step == "auto":
        return f"{d.phase}: auto: {d.why} -> {', '.join(d.labels)} ({d.reason})"
    held = d.settings.get("held", {})
    if not d.labels:
        return (f"{d.phase}: no online knob's effect cleared the noise; the online search is "
                f"skipped and {_dict(held)} stay as they are")
    if not held:
        return f"{d.phase}: every online knob cleared the noise; all are searched"
    return f"{d.phase}: searching {list(d.labels)}; left as they are: {_dict(held)}"


def _setting(d: Decision) -> str:
    if d.step == "kept":
        return f"{d.phase}: {d.reason}; keeping {_dict(d.settings['kept'])}"
    return (f"{d.phase}: {d.reason}; lowered to {_dict(d.settings['lowered'])} before the "
            f"offline search")


def _shift(d: Decision) -> str:
    v = {k: float(x) for k, x in d.values.items()}
    if d.step == "local minimum":
        return (f"{d.phase}: local minimum: the last {d.count} online vertices "
                f"{[round(x, 1) for x in d.series]} are all worse than the offline best "
                f"{v['offline best']:.1f} by more than {100 * v['threshold']:.0f}% (threshold "
                f"{100 * v['configured threshold']:.0f}%, twice the noise "
                f"{100 * v['noise']:.1f}%): back to offline")
    if d.step == "band":
        return (f"{d.phase}: {d.reason}; workload-shift band [{v['band low']:.1f}, "
                f"{v['band high']:.1f}] from the last {d.count} vertices (widened by "
                f"{100 * max(v['noise'], v['margin']):.0f}%: margin {100 * v['margin']:.0f}%, "
                f"measured noise {100 * v['noise']:.0f}%); monitoring {int(v['monitor'])} "
                f"measurements of the best point")
    if d.step == "statement mix":
        return (f"{d.phase}: statement mix shift: {d.count} consecutive measurements whose "
                f"statements' time shares moved farther than {v['distance']:.2f} (total "
                f"variation) from the mix the best point was tuned on "
                f"{[round(x, 2) for x in d.series]}: back to offline with a new reference for "
                f"the new mix")
    return (f"{d.phase}: workload shift: {d.count} consecutive measurements outside "
            f"[{v['band low']:.1f}, {v['band high']:.1f}]: back to offline; the best so far was "
            f"measured under the old workload and is forgotten")


def _ranked(d: Decision) -> str:
    return f"{d.phase}: candidate {d.count} by the ledger of paired comparisons: {d.text}"


def _replicas(d: Decision) -> str:
    if d.step == "dropped":
        left = list(d.labels[1:])
        return (f"replica {d.labels[0]} dropped: {d.reason}; the run goes on with {len(left)} "
                f"replica(s) {left}")
    return f"{d.phase}: {d.count} evaluation(s) reported by replicas on other hosts"


def _measured(d: Decision) -> str:
    """The screening's design, measured per transaction (a search's design is rendered by
    :func:`~tuner_client.phases.decisions.render`)."""
    v = {k: float(x) for k, x in d.values.items()}
    return (
        f"{d.phase}: measured {d.design}: two Plackett–Burman designs of {d.count} rows (each "
        f"knob moved from its setting in force up to its high level, or down to its low one) "
        f"as the arms of one run, {int(v['transactions']):,} transactions in "
        f"{d.seconds or 0.0:.0f} s (at most {int(v['max seconds'])} s: it ends once every "
        f"move's interval is within ±{100 * v['settled half width']:g} %); a move's effect is "
        f"the transactions of the rows that made it over those of the rows that did not "
        f"(per-template latencies combined into the workload's count, block bootstrap over "
        f"time slices, {100 * (d.level or 0.0):.2f} %), the other knobs balanced on both sides; "
        f"a knob is searched when a move's interval lies above 1")


#: kind (its value) -> the sentence of a record of that kind
PHASE_SENTENCES: dict[str, Callable[[Decision], str]] = {
    "skipped": _skipped, "start": _start, "model": _model, "knobs": _knobs,
    "setting": _setting, "shift": _shift, "ranked": _ranked, "replicas": _replicas,
    "measured": _measured,
}
