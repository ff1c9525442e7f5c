"""Decisions as data (issue 53): every decision of a run is a typed record first
(:class:`Decision`: its phase, its kind, the design and why, the configurations, the ratio
with its interval and level, the count it estimates, the reason) and a sentence second,
rendered here and nowhere else (:func:`render`) for the log, the CLI's progress and
``summary.json``'s ``decisions``. ``summary.json`` keeps the records under
``decision_records``, in the layout of ``docs/schemas/summary.schema.json``, so that a
program reads what was raced, by which design, with what interval, without parsing text.

A decision not yet given its own kind is a :attr:`Kind.NOTE` carrying its sentence; a line
of a race's own account (a design's words about its run) is a :attr:`Kind.LINE` carrying the
design and, for a verdict, the interval.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from harmony_base.jsontypes import JSONObject
from tuner_client.phases.decision_sentences import PHASE_SENTENCES
from tuner_client.stats.decision import FinalDecision
from tuner_client.stats.drift import METHOD_TEXT as DRIFT_METHOD
from tuner_client.stats.drift import Drift

#: the JSON Schema of one record, published beside the docs (tests validate summary.json)
SCHEMA_PATH = "docs/schemas/summary.schema.json"


class Kind(enum.StrEnum):
    """What a decision decides."""

    #: a sentence kept whole, with the fields a program may read beside it
    NOTE = "note"
    #: how a search session's evaluations are measured (the design and why)
    MEASURED = "measured"
    # -- the phases' decisions before the final race (step: what the decision is about)
    #: a step not taken (no knob to search, no probes, nothing to screen, not raced), and why
    SKIPPED = "skipped"
    #: where a search starts and why (a warm start, the equation, the probes, the screening)
    START = "start"
    #: what a fitted model (the BME curve, the probes) advises, and whether the run follows it
    MODEL = "model"
    #: which knobs are searched and which are held (the screening, an automatic proposal)
    KNOBS = "knobs"
    #: settings put in force or kept to keep a constraint (the memory budget, a failed pass)
    SETTING = "setting"
    #: the online pass's watch: the workload-shift band armed, a shift seen, a local minimum
    SHIFT = "shift"
    #: a final candidate ranked by the ledger of paired comparisons
    RANKED = "ranked"
    #: the replicas: evaluations adopted from other hosts, a replica dropped
    REPLICAS = "replicas"
    #: a line of a race's own account (its design's words); a verdict carries its interval
    LINE = "line"
    #: the design chosen for a race, and why each more precise one was not
    DESIGN = "design"
    #: what each raced label is (the settings it changes)
    RACED = "raced"
    #: a design's run failed; the race falls back on another design
    FAILED = "failed"
    #: a candidate left a race
    DROPPED = "dropped"
    #: a race stopped
    STOPPED = "stopped"
    #: too few rounds for an interval
    NO_INTERVAL = "no-interval"
    #: the reference's own level over a race (issue 51): ``ratio``/``low``/``high`` over the
    #: race, ``reason`` ``moved`` or ``steady``, ``text`` what the race's interval holds for
    DRIFT = "drift"


@dataclass(frozen=True)
class Decision:
    """One decision of the run. ``labels``: the configurations it concerns (by label, the
    reference first where there is one); ``settings``: what each label changes; ``ratio``,
    ``low``, ``high``, ``level``: an interval it rests on; ``counts``: what that ratio
    counts; ``rounds``: the observations behind it (rounds, blocks or slices) or the round a
    candidate left after; ``why``: why the design was chosen; ``reason``: why a race stopped,
    a candidate left or a run failed; ``text``: the sentence of a note or a line."""

    phase: str
    kind: Kind
    design: str | None = None
    stage: str | None = None
    labels: tuple[str, ...] = ()
    settings: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    winner: str | None = None
    ratio: float | None = None
    low: float | None = None
    high: float | None = None
    level: float | None = None
    counts: str | None = None
    rounds: int | None = None
    method: str | None = None
    why: str | None = None
    reason: str | None = None
    text: str | None = None
    step: str | None = None
    count: int | None = None
    seconds: float | None = None
    values: Mapping[str, float | str] = field(default_factory=dict)
    series: tuple[float, ...] = ()
    followed: bool | None = None

    @classmethod
    def of(cls, phase: str, kind: Kind, *, labels: Sequence[str] = (),
           **fields: object) -> Decision:
        """A record of ``kind`` (the fields by keyword)."""
        if "series" in fields:
            fields["series"] = tuple(cast("Iterable[float]", fields["series"]))
        return cls(phase, kind, labels=tuple(labels), **fields)  # type: ignore[arg-type]

    @classmethod
    def note(cls, text: str, *, labels: Sequence[str] = (), **fields: object) -> Decision:
        """A sentence (``"phase: what"``) as a record of kind :attr:`Kind.NOTE`, with the
        fields a program may read beside it (the design, the stage, the labels, the
        interval, the reason) by keyword."""
        phase, sep, _ = text.partition(": ")
        where = phase if sep and phase.isidentifier() else "run"
        return cls(where, Kind.NOTE, labels=tuple(labels), text=text,
                   **fields)  # type: ignore[arg-type]

    @classmethod
    def line(cls, phase: str, text: str, *, design: str | None,
             stage: str | None = None) -> Decision:
        """A line of a race's account in ``design``'s words."""
        return cls(phase, Kind.LINE, design=design, stage=stage, text=text)

    @classmethod
    def verdict(cls, phase: str, decision: FinalDecision, *, stage: str | None = None,
                counts: str | None = None, line: int = 0) -> Decision:
        """The verdict (line ``line``) of ``decision``, with the winner's (else the best's)
        interval:
        the simultaneous one a recommendation rests on, the plain one otherwise."""
        shown = decision.winner or decision.best
        iv = decision.intervals.get(shown) if shown is not None else None
        ratio = low = high = None
        level = decision.level
        if decision.winner is not None and decision.improvement_ci is not None:
            ratio = 1.0 + decision.improvement
            low, high = (1.0 + x for x in decision.improvement_ci)
            level = decision.decision_level
        elif iv is not None:
            ratio, low, high = iv.ratio, iv.low, iv.high
        return cls(phase, Kind.LINE, design=decision.design, stage=stage,
                   labels=(decision.reference, *((shown,) if shown else ())),
                   winner=decision.winner, ratio=ratio, low=low,
                   high=high if high is None or math.isfinite(high) else None, level=level,
                   counts=counts, rounds=decision.rounds,
                   method=decision.method_text or decision.method,
                   text=decision.lines[line].strip() if decision.lines else None)

    def to_dict(self) -> JSONObject:
        """The record for ``summary.json`` (:data:`SCHEMA_PATH`)."""
        out: JSONObject = {"phase": self.phase, "kind": self.kind.value, "text": render(self)}
        for key in ("design", "stage", "winner", "ratio", "low", "high", "level", "counts",
                    "rounds", "method", "why", "reason", "step", "count", "seconds", "followed"):
            value = getattr(self, key)
            # an unbounded interval's side is left out: JSON has no infinity
            if value is not None and _finite(value):
                out[key] = value
        if self.labels:
            out["labels"] = list(self.labels)
        if self.settings:
            out["settings"] = {k: dict(v) for k, v in self.settings.items()}
        if self.values:
            out["values"] = {k: v for k, v in self.values.items() if _finite(v)}
        if self.series:
            out["series"] = [v for v in self.series if _finite(v)]
        return out


def _finite(value: object) -> bool:
    return not (isinstance(value, float) and not math.isfinite(value))


def _changes(settings: Mapping[str, str]) -> str:
    return str(dict(settings))


def render(d: Decision) -> str:
    """The decision as one sentence: the log's, the CLI's and ``summary.json``'s words."""
    stage = f"{d.stage}: " if d.stage else ""
    if d.kind is Kind.NOTE:
        return d.text or ""
    if d.kind is Kind.LINE:
        return f"{d.phase}: {stage}{d.text}"
    if d.kind is Kind.MEASURED and d.step == "screening":
        return PHASE_SENTENCES[d.kind](d)
    if d.kind is Kind.MEASURED:
        return f"{d.phase}: {stage}evaluations measured by {d.why}"
    if d.kind is Kind.DESIGN:
        return f"{d.phase}: {stage}the race of {', '.join(d.labels)} by {d.why}"
    if d.kind is Kind.RACED:
        return f"{d.phase}: {stage}raced: " + "; ".join(
            f"{label} {_changes(d.settings[label])}" for label in d.labels
            if label in d.settings)
    if d.kind is Kind.FAILED and d.design is None:  # a phase of its own (the screening)
        return f"{d.phase} failed ({d.reason}); {d.text}"
    if d.kind is Kind.FAILED:
        return f"{d.phase}: {stage}the {d.design} run failed ({d.reason}); {d.text}"
    if d.kind is Kind.DROPPED:
        return f"{d.phase}: {stage}{d.labels[0]} dropped after {d.rounds} rounds: {d.reason}"
    if d.kind is Kind.STOPPED:
        return (f"{d.phase}: {stage}{d.rounds} rounds in whole-server {d.design} of "
                f"{', '.join(d.labels)}; stopped: {d.reason} (intervals: {d.method})")
    if d.kind is Kind.NO_INTERVAL:
        return f"{d.phase}: {stage}fewer than 2 rounds measured: no interval{d.text}"
    if d.kind is Kind.DRIFT:
        how = ("moved beyond its noise" if d.reason == "moved"
               else "did not move beyond its noise")
        return (f"{d.phase}: {stage}the reference {d.labels[0]}'s own level {how} during "
                f"the {d.design} race: {d.text}")
    if d.kind in PHASE_SENTENCES:
        return PHASE_SENTENCES[d.kind](d)
    raise ValueError(f"no sentence for a decision of kind {d.kind!r}")


def drift_record(drift: Drift, *, reference: str, design: str, holds: str,
                 stage: str | None = None) -> Decision:
    """The reference's ``drift`` over a race in ``design`` as a :attr:`Kind.DRIFT` record;
    ``holds``: what the race's interval holds for in that design (said when it moved)."""
    said = f"{drift.text()}; {holds}" if drift.moved else drift.text()
    return Decision.of("final", Kind.DRIFT, labels=(reference,), design=design, stage=stage,
                       ratio=drift.over, low=drift.over_low, high=drift.over_high,
                       level=drift.level, rounds=drift.n, method=DRIFT_METHOD,
                       reason="moved" if drift.moved else "steady", text=said)


def race_records(decision: FinalDecision, *, stage: str | None = None,
                 counts: str | None = None) -> list[Decision]:
    """A race's decision as records: its verdict with the interval, then each further line
    of its account in its design's words."""
    return [Decision.verdict("final", decision, stage=stage, counts=counts),
            *(Decision.line("final", line.strip(), design=decision.design, stage=stage)
              for line in decision.lines[1:])]
