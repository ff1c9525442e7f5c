"""One design protocol and decisions as data (issue 53): every concrete design registered by
name; a new design is one more class (the dispatcher finds it, a fallback wraps it, nothing
else changes); every decision a record rendered in one place; summary.json's records and race
valid against the published JSON Schema; the race traced as data whatever its design, so the
report draws it."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from test_report_decision import run_race
from test_stats_per_transaction import synthetic
from test_stats_switchback import closed_loop, spans_of

from benchmarks.design_metrics import BONFERRONI
from harmony_base.errors import ConfigError
from harmony_report.draw import ReportFigures
from harmony_report.inputs import summary_from_json
from harmony_report.race import race_png
from harmony_report.sections import race_section
from tuner_client.engine.designs import UNIVERSAL, Choice
from tuner_client.engine.protocol import DESIGNS, Design, RaceRequest, design_named
from tuner_client.phases import design_choice
from tuner_client.phases.decisions import SCHEMA_PATH, Decision, Kind, race_records, render
from tuner_client.phases.final_design import Fallback, FinalDesign, FinalRun
from tuner_client.phases.report_inputs import report_inputs
from tuner_client.phases.result import Best, Intervals, Throughput, TuneResult, Work
from tuner_client.phases.state import RunState
from tuner_client.stats.decision import FinalDecision
from tuner_client.stats.levels import simultaneous_level
from tuner_client.stats.per_transaction_race import race_per_transaction
from tuner_client.stats.switchback import balanced_order, race, totals_from_transactions

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / SCHEMA_PATH).read_text())


def subclasses(cls: type[Design[object]]) -> Iterator[type[Design[object]]]:
    sub: type[Design[object]]
    for sub in cls.__subclasses__():
        yield sub
        yield from subclasses(sub)


def test_every_concrete_design_is_registered_under_its_name() -> None:
    every = subclasses(Design)  # type: ignore[type-abstract]
    concrete = [c for c in every if not getattr(c, "__abstractmethods__", None)
                and c.__module__.startswith("tuner_client")]
    assert len(concrete) >= 6, concrete  # per transaction, switchback, windows, 3 compositions
    for cls in concrete:
        assert DESIGNS[cls.name] is cls, cls
    # the chooser's designs each have their implementation
    for name in ("per-transaction", "switchback", "windows"):
        assert isinstance(design_choice.final_design_of(name), FinalDesign)
    with pytest.raises(ConfigError, match="no measurement design is registered as 'nope'"):
        design_named("nope")


class Echo:
    """A test design's outcome: the request's first candidate wins."""

    def __init__(self, request: RaceRequest) -> None:
        self.request = request

    @property
    def winner(self) -> str | None:
        return self.request.candidates[0]

    def to_final_decision(self) -> FinalDecision | None:
        return None


def test_a_new_design_is_one_more_class() -> None:
    calls: list[str] = []

    class Coin(FinalDesign, name="coin-test"):
        def race(self, run: FinalRun, request: RaceRequest) -> Echo | None:
            calls.append(self.name)
            return Echo(request)

    class Broken(FinalDesign, name="broken-test"):
        def race(self, run: FinalRun, request: RaceRequest) -> Echo | None:
            calls.append(self.name)
            return None

    try:
        request = RaceRequest({"default": {}, "best": {"jit": "off"}}, ("default", "best"),
                              0.95)
        run = FinalRun(None, RunState())  # type: ignore[arg-type]  # the designs read neither
        # the dispatcher finds it by the chooser's name and wraps it with the universal
        # design as its fallback: no module names it
        chosen = design_choice.final_design(None, request,  # type: ignore[arg-type]
                                            Choice("coin-test", "auto"))
        assert isinstance(chosen, Fallback) and isinstance(chosen.first, Coin)
        assert chosen.then.name == UNIVERSAL
        outcome = chosen.race(run, request)
        assert outcome is not None and outcome.winner == "best" and calls == ["coin-test"]
        # a design whose run fails hands the race on
        assert Fallback(Broken(), Coin()).race(run, request).winner == "best"  # type: ignore[union-attr]
        assert calls == ["coin-test", "broken-test", "coin-test"]
        with pytest.raises(ConfigError, match="two designs register the name 'coin-test'"):
            type("Again", (FinalDesign,), {"race": Coin.race}, name="coin-test")
    finally:
        DESIGNS.pop("coin-test", None)
        DESIGNS.pop("broken-test", None)


def test_a_request_names_what_is_missing() -> None:
    with pytest.raises(ConfigError, match=r"no configuration for \['best'\]"):
        RaceRequest({"default": {}}, ("default", "best"), 0.95)


def test_the_level_arithmetic_is_one_function() -> None:
    assert simultaneous_level(0.95, 1) == 0.95
    assert simultaneous_level(0.95, 0) == 0.95
    assert simultaneous_level(0.95, 2) == pytest.approx(0.975)
    assert simultaneous_level(0.95, 4) == pytest.approx(0.9875)
    # no other module writes it out (benchmarks/design_metrics.py counts the same way)
    written = [p for p in (ROOT / "tuner_client").rglob("*.py")
               if BONFERRONI.search(p.read_text()) and p.name != "levels.py"]
    assert written == []


def test_decisions_render_as_the_sentences_they_were() -> None:
    cases = {
        "final: best dropped after 5 rounds: below the default": Decision.of(
            "final", Kind.DROPPED, labels=("best",), rounds=5, reason="below the default"),
        "final: 7 rounds in whole-server windows of default, best, pgtune; stopped: max "
        "rounds (intervals: t)": Decision.of(
            "final", Kind.STOPPED, design="windows", rounds=7,
            labels=("default", "best", "pgtune"), reason="max rounds", method="t"),
        "final: the race of default, best by windows, the most precise design valid here":
            Decision.of("final", Kind.DESIGN, labels=("default", "best"), design="windows",
                        why="windows, the most precise design valid here"),
        "final: raced: best {'work_mem': '64MB'}": Decision.of(
            "final", Kind.RACED, labels=("best",), settings={"best": {"work_mem": "64MB"}}),
        "final: the switchback run failed (no pgbench); measured in windows": Decision.of(
            "final", Kind.FAILED, design="switchback", reason="no pgbench",
            text="measured in windows"),
        "final: fewer than 2 rounds measured: no interval, so no decision; keeping the "
        "original": Decision.of("final", Kind.NO_INTERVAL, rounds=1,
                                text=", so no decision; keeping the original"),
        "offline: probes skipped": Decision.note("offline: probes skipped"),
        "p1-online: evaluations measured by windows (measure.design: windows)": Decision(
            "p1-online", Kind.MEASURED, design="windows",
            why="windows (measure.design: windows)"),
        "final: stage 1: best/candidate-2 1.02×": Decision.note(
            "final: stage 1: best/candidate-2 1.02×", design="narrowing", stage="stage 1",
            labels=("best", "candidate-2"), ratio=1.02, low=0.0, high=math.inf, level=0.95),
    }
    for text, record in cases.items():
        assert render(record) == text
        jsonschema.validate(json.loads(json.dumps(record.to_dict(), allow_nan=False)),
                            SCHEMA["$defs"]["decision_record"])
    assert "high" not in cases["final: stage 1: best/candidate-2 1.02×"].to_dict()
    # the schema names every kind the records use
    assert set(SCHEMA["$defs"]["decision_record"]["properties"]["kind"]["enum"]) == \
        {k.value for k in Kind}
    state = RunState()
    state.decide("screening: held 3 knobs")
    state.decide(cases["offline: probes skipped"])
    assert state.decisions == ["screening: held 3 knobs", "offline: probes skipped"]
    assert [d.phase for d in state.decision_records] == ["screening", "offline"]


def _summary(decision: FinalDecision, trace: dict[str, Any] | None, state: RunState
             ) -> dict[str, Any]:
    """summary.json as tuner_client.phases.outputs writes it, for a race without rounds."""
    tune = TuneResult.conclude(
        _best(), Intervals([], decision), Work(passes=1, evaluations=0,
                                               decisions=list(state.decisions),
                                               decision_records=[
                                                   d.to_dict() for d in state.decision_records]))
    return dict(json.loads(json.dumps(
        {**tune.to_dict(), **report_inputs([], [], decision.to_dict(), state.decisions,
                                           "queries/min", trace=trace)})))


def _best() -> Best:
    return Best({"jit": "off"}, {"jit": "on"}, Throughput(default=None, best=None))


def _traced_summary(outcome: Any) -> dict[str, Any]:
    decision = outcome.to_final_decision()
    state = RunState()
    for record in race_records(decision, counts="transactions of the mix"):
        state.decide(record)
    trace = outcome.trace().to_dict(winner=decision.winner,
                                    decision_level=decision.decision_level,
                                    unstable=decision.unstable)
    return _summary(decision, trace, state)


def test_a_per_transaction_race_is_traced_slice_by_slice_and_drawn(tmp_path: Path) -> None:
    outcome = race_per_transaction(synthetic(11, n=9000, more=(np.ones(3),)),
                                   ["default", "best", "pgtune"],
                                   [{}, {"jit": "off"}, {"jit": "on"}], seed=1)
    summary = _traced_summary(outcome)
    jsonschema.validate(summary, SCHEMA)
    race_ = summary["race"]
    assert race_["design"] == "per-transaction" and race_["unit"] == "slice"
    steps = race_["trajectory"]["best"]
    slices = outcome.plain["best"].slices
    assert [s["round"] for s in steps] == list(range(2, slices + 1))
    # the running sequence narrows and ends wider than the fixed-length bootstrap it precedes
    assert steps[-1]["high"] / steps[-1]["low"] < (steps[2]["high"] or math.inf) / max(
        steps[2]["low"], 1e-9)
    plain = outcome.plain["best"].interval
    assert steps[-1]["low"] <= plain.low and steps[-1]["high"] >= plain.high
    # the verdict record carries the interval the recommendation rests on
    verdict = summary["decision_records"][0]
    assert verdict["kind"] == "line" and verdict["design"] == "per-transaction"
    assert verdict["winner"] == "best" and verdict["low"] > 1.0
    assert verdict["level"] == pytest.approx(0.975)
    assert verdict["text"] == f"final: {outcome.verdict()}"
    _drawn(summary, "slice")


def test_a_switchback_race_is_traced_block_by_block_and_drawn() -> None:
    spans = spans_of(balanced_order(3, 12, seed=5), 2.0)
    template, start, latency, ok = closed_loop(spans, {0: 1.0, 1: 1.25, 2: 0.9}, seed=6)
    totals = totals_from_transactions(spans, template, start, latency, ok, settle_s=0.05)
    outcome = race(totals, ["default", "best", "pgtune"], slice_s=2.0, settle_s=0.05)
    summary = _traced_summary(outcome)
    jsonschema.validate(summary, SCHEMA)
    trace = summary["race"]
    assert trace["design"] == "switchback" and trace["unit"] == "block"
    # the last step is the decision's plain interval, to the last bit
    for label in ("best", "pgtune"):
        last = trace["trajectory"][label][-1]
        iv = summary["decision"]["intervals"][label]
        assert (last["round"], last["ratio"], last["low"], last["high"]) == (
            12, iv["ratio"], iv["low"], iv["high"])
    _drawn(summary, "block")


def test_a_windows_summary_validates_and_keeps_its_drops() -> None:
    tune, records = run_race()
    text = json.dumps({**tune.to_dict(), **report_inputs(
        records, tune.intervals.rounds, tune.intervals.decision.to_dict()
        if tune.intervals.decision else None, tune.work.decisions, "queries/min")})
    summary = json.loads(text)
    jsonschema.validate(summary, SCHEMA)
    assert summary["race"]["dropped"]


def _drawn(summary: dict[str, Any], unit: str) -> None:
    parsed = summary_from_json(summary)
    assert parsed.race_unit == unit
    figures = ReportFigures()
    figures.images["race.png"] = race_png(parsed)
    assert figures.images["race.png"].startswith(b"\x89PNG")
    section = race_section(parsed, figures)
    assert "not traced" not in section and f"over the {unit}s so far" in section
