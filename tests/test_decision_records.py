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
from test_code_shape import any_count
from test_report_decision import run_race
from test_stats_per_transaction import synthetic
from test_stats_switchback import closed_loop, spans_of

from benchmarks.design_metrics import BONFERRONI, shape
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


def test_no_decision_is_passed_as_a_sentence() -> None:
    """Every ``decide()`` takes a record (benchmarks/design_metrics.py counts the same way;
    39 took a sentence at b783da1)."""
    rows = shape(ROOT)
    assert rows["sentence decide() calls by module"] == []
    # the shape block counts Any as tests/test_code_shape.py does
    assert int(str(rows["Any in the product code"])) == sum(any_count().values())


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
    state.decide(Decision.note("screening: held 3 knobs"))
    state.decide(cases["offline: probes skipped"])
    assert state.decisions == ["screening: held 3 knobs", "offline: probes skipped"]
    assert [d.phase for d in state.decision_records] == ["screening", "offline"]


def assert_valid_summary(summary: dict[str, Any]) -> set[str]:
    """A real run's summary.json (tests/test_screening_flow.py, tests/test_flows.py) against
    the published schema, its sentences the records' own; the kinds its records use."""
    jsonschema.validate(summary, SCHEMA)
    records = summary["decision_records"]
    assert summary["decisions"] == [r["text"] for r in records]
    return {r["kind"] for r in records}


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


def test_the_phases_decisions_render_as_the_sentences_they_were() -> None:
    """Each decision before the final race, as a record, reads as the sentence the phase
    wrote before records (the old f-strings, with sample values), and validates."""
    label, band, noise, margin, values = "p1-online", (101.25, 130.5), 0.031, 0.05, [110.0, 120.0]
    held = {"work_mem": "4MB"}
    window = [90.04, 91.26, float("nan")]
    cases = {
        "online.knobs: auto: sorts spill -> work_mem, hash_mem_multiplier (3 temp files)":
            Decision.of("online.knobs", Kind.KNOBS, step="auto",
                        labels=["work_mem", "hash_mem_multiplier"], why="sorts spill",
                        reason="3 temp files"),
        "pass 3: a restart was asked for, but max_passes 3 is reached": Decision.of(
            "pass 3", Kind.SKIPPED, step="pass", count=3,
            reason="a restart was asked for, but max_passes 3 is reached"),
        "final: candidate 2 by the ledger of paired comparisons: 1.32× the original": Decision.of(
            "final", Kind.RANKED, step="ledger", count=2, text="1.32× the original"),
        f"{label}: 4 evaluation(s) reported by replicas on other hosts": Decision.of(
            label, Kind.REPLICAS, step="adopted", count=4),
        "replica r2 dropped: lost; the run goes on with 2 replica(s) ['r0', 'r1']": Decision.of(
            "replicas", Kind.REPLICAS, step="dropped", labels=("r2", "r0", "r1"), reason="lost"),
        f"{label}: warm start from prior session(s) a, b: first point {{'x': 0.5}} (init_point)":
            Decision.of(label, Kind.START, step="warm start", labels=["a", "b"],
                        values={"x": 0.5}, method="init_point"),
        f"{label}: warm start: no compatible prior session has a point in range; starting "
        f"from {{'x': 1}}": Decision.of(label, Kind.START, step="warm start", values={"x": 1}),
        f"{label}: warm start: no compatible prior session has a point in range; starting "
        f"as configured": Decision.of(label, Kind.START, step="warm start"),
        "p2-offline: shared_buffers from the equation (a re-probe after a workload shift): "
        "measuring 512MB only, no search": Decision.of(
            "p2-offline", Kind.START, step="equation", why="a re-probe after a workload shift",
            settings={"start": {"shared_buffers": "512MB"}}),
        f"p1-offline: the probes replace most of the search: 2 evaluation(s) from 512MB, the "
        f"first step {0.125:.0%} of the window": Decision.of(
            "p1-offline", Kind.START, step="BME probes", count=2,
            settings={"start": {"shared_buffers": "512MB"}}, values={"init_radius": 0.125}),
        "screening: the design predicts the best at {'work_mem': '64MB'}: the online search "
        "starts there, and it races in the final rounds": Decision.of(
            "screening", Kind.START, step="screening",
            settings={"start": {"work_mem": "64MB"}}),
        "p1-offline: BME advice not used (r² 0.4); the plain search goes on": Decision.of(
            "p1-offline", Kind.MODEL, step="BME", followed=False, reason="r² 0.4"),
        "p1-offline: BME fitted (r² 0.99); restarting the offline search in 1..2 from "
        "{'shared_buffers': 3}": Decision.of(
            "p1-offline", Kind.MODEL, step="BME", followed=True, reason="r² 0.99",
            values={"shared_buffers": 3}, text="1..2"),
        f"p1-offline: BME probes (128MB: {0.5:.3f}, 1GB: {0.01:.3f}; {3.25:.1f} s) not used: "
        f"flat; the plain search goes on (1 probe(s) failed: boom)": Decision.of(
            "p1-offline", Kind.MODEL, step="BME probes", followed=False, seconds=3.25,
            values={"128MB": 0.5, "1GB": 0.01}, reason="flat", count=1, text="boom"),
        f"p1-offline: BME probes (128MB: {0.5:.3f}; {3.25:.1f} s): knee, fits; the offline "
        f"search starts at 1GB in 512MB..2GB, leaving 1GB of the shared_buffers cap to the "
        f"online knobs and the OS cache": Decision.of(
            "p1-offline", Kind.MODEL, step="BME probes", followed=True, seconds=3.25,
            values={"128MB": 0.5}, method="knee", reason="fits",
            settings={"start": {"shared_buffers": "1GB"},
                      "window": {"low": "512MB", "high": "2GB", "left": "1GB"}}),
        f"screening: no online knob's effect cleared the noise; the online search is skipped "
        f"and {held} stay as they are": Decision.of("screening", Kind.KNOBS, step="screening",
                                                    settings={"held": held}),
        "screening: every online knob cleared the noise; all are searched": Decision.of(
            "screening", Kind.KNOBS, step="screening", labels=["work_mem"]),
        f"screening: searching {['jit']}; left as they are: {held}": Decision.of(
            "screening", Kind.KNOBS, step="screening", labels=["jit"], settings={"held": held}),
        f"p1-offline: no offline point measured successfully; keeping {held}": Decision.of(
            "p1-offline", Kind.SETTING, step="kept", settings={"kept": held},
            reason="no offline point measured successfully"),
        f"p1-offline: the online memory knobs in force left less than 1GB for shared_buffers "
        f"under the memory budget; lowered to {held} before the offline search": Decision.of(
            "p1-offline", Kind.SETTING, step="lowered", settings={"lowered": held},
            reason="the online memory knobs in force left less than 1GB for shared_buffers "
                   "under the memory budget"),
        f"{label}: local minimum: the last 3 online vertices {[round(v, 1) for v in window]} "
        f"are all worse than the offline best {140.27:.1f} by more than {100 * 0.062:.0f}% "
        f"(threshold {100 * 0.05:.0f}%, twice the noise {100 * noise:.1f}%): back to offline":
            Decision.of(label, Kind.SHIFT, step="local minimum", count=3, series=window,
                        values={"offline best": 140.27, "threshold": 0.062,
                                "configured threshold": 0.05, "noise": noise}),
        f"{label}: converged; workload-shift band [{band[0]:.1f}, {band[1]:.1f}] from the "
        f"last {len(values)} vertices (widened by {100 * max(noise, margin):.0f}%: margin "
        f"{100 * margin:.0f}%, measured noise {100 * noise:.0f}%); monitoring 4 "
        f"measurements of the best point": Decision.of(
            label, Kind.SHIFT, step="band", reason="converged", count=2, series=values,
            values={"band low": band[0], "band high": band[1], "noise": noise,
                    "margin": margin, "monitor": 4}),
        f"{label}: statement mix shift: 2 consecutive measurements whose statements' time "
        f"shares moved farther than {0.2:.2f} (total variation) from the mix the best point "
        f"was tuned on {[round(d, 2) for d in (0.314, 0.25)]}: back to offline with a new "
        f"reference for the new mix": Decision.of(
            label, Kind.SHIFT, step="statement mix", count=2, series=(0.314, 0.25),
            values={"distance": 0.2}),
        f"{label}: workload shift: 2 consecutive measurements outside [{band[0]:.1f}, "
        f"{band[1]:.1f}]: back to offline; the best so far was measured under the old "
        f"workload and is forgotten": Decision.of(
            label, Kind.SHIFT, step="workload", count=2, series=[90.0],
            values={"band low": band[0], "band high": band[1]}),
        "screening failed (no pgbench); every online knob is searched": Decision.of(
            "screening", Kind.FAILED, step="screening", reason="no pgbench",
            text="every online knob is searched"),
        "final: not raced: the per-transaction race failed, and managed mode measures in no "
        "other design; the original stays": Decision.of(
            "final", Kind.SKIPPED, step="final race", reason="not raced: the per-transaction "
            "race failed, and managed mode measures in no other design; the original stays"),
        f"screening: measured per-transaction: two Plackett–Burman designs of 8 rows (each knob "
        f"moved from its setting in force up to its high level, or down to its low one) as "
        f"the arms of one run, {12345:,} transactions in {41.6:.0f} s (at most 60 s: it ends "
        f"once every move's interval is within ±{100 * 0.03:g} %); a move's effect is the "
        f"transactions of the rows that made it over those of the rows that did not "
        f"(per-template latencies combined into the workload's count, block bootstrap over "
        f"time slices, {100 * 0.975:.2f} %), the other knobs balanced on both sides; a knob is "
        f"searched when a move's interval lies above 1": Decision.of(
            "screening", Kind.MEASURED, step="screening", design="per-transaction", count=8,
            seconds=41.6, level=0.975,
            values={"transactions": 12345, "max seconds": 60, "settled half width": 0.03}),
    }
    for text, record in cases.items():
        assert render(record) == text
        dumped = record.to_dict()
        assert dumped["kind"] == record.kind.value and dumped["text"] == text
        jsonschema.validate(json.loads(json.dumps(dumped, allow_nan=False)),
                            SCHEMA["$defs"]["decision_record"])
    # a program reads the numbers without the sentence: the NaN of a failed vertex is left out
    local: dict[str, Any] = json.loads(json.dumps(
        next(r for r in cases.values() if r.step == "local minimum").to_dict()))
    assert local["series"] == [90.04, 91.26] and local["values"]["offline best"] == 140.27
    # every kind a phase uses has its sentence
    assert {r.kind for r in cases.values()} >= {
        Kind.SKIPPED, Kind.START, Kind.MODEL, Kind.KNOBS, Kind.SETTING, Kind.SHIFT,
        Kind.RANKED, Kind.REPLICAS}
