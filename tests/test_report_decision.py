"""The report tells the decision's story with the decision's numbers: a race run by the real
:class:`~tuner_client.stats.racing.Race` and judged by the real
:func:`~tuner_client.stats.decision.decide`, written into a summary by the tuner's own
``TuneResult.to_dict`` and :func:`~tuner_client.phases.report_inputs.report_inputs`, then drawn.

One test per part of the report: the comparison with every interval (the winner's
simultaneous one), the race round by round with its drops, the tuning curve in one unit with
the reference's drift, anytime-valid intervals labelled as such, live mode's unit and
guardrail trips, and which replica measured what."""

from __future__ import annotations

import base64
import html
import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_priordata import make_definition, run_session

from harmony_core.priordata import PriorSession, prior_from_core
from harmony_report import summary_from_json, write_report
from harmony_report.curve import raced_evaluations
from tuner_client.cli.tune_run import format_result
from tuner_client.measurer import PointRecord
from tuner_client.measurer.guardrails import GuardrailSummary, Trip
from tuner_client.phases.final import NAMES
from tuner_client.phases.report_inputs import race_trace, report_inputs
from tuner_client.phases.result import Best, Evidence, Intervals, Throughput, TuneResult, Work
from tuner_client.stats.decision import decide
from tuner_client.stats.racing import Race, RaceBudget, RaceRules

#: true ratios to the default: one clearly better, one clearly worse, one the same
TRUE = {"default": 1.0, "best": 1.25, "candidate-2": 0.80, "pgtune": 1.0}
UNIT = "queries/min"


def run_race(seed: int = 7, noise: float = 0.03) -> tuple[TuneResult, list[PointRecord]]:
    """A real race and decision over synthetic measurements, summarised as the tuner does
    (the decisions worded as :mod:`tuner_client.phases.final` words them)."""
    rng = np.random.default_rng(seed)
    level = [1000.0]

    def measure(label: str) -> float:
        level[0] *= math.exp(rng.normal(0, 0.01))  # the machine drifts
        return level[0] * TRUE[label] * math.exp(rng.normal(0, noise))

    race = Race(measure, ["best", "candidate-2", "pgtune"], reference="default",
                budget=RaceBudget(max_rounds=16), rules=RaceRules(min_samples=2, level=0.95))
    result = race.run()
    decisions = [f"final: {label} dropped after {result.dropped_after[label]} rounds: {why}"
                 for label, why in result.dropped.items()]
    decisions.append(f"final: {len(result.rounds)} rounds; stopped: {result.stopped}")
    rounds = [dict(r) for r in result.rounds]
    decision = decide(rounds, reference="default", baselines=[],
                      candidates=["best", "candidate-2", "pgtune"], level=0.95,
                      names={**NAMES, "candidate-2": "tuned (candidate-2)"})
    decisions += [f"final: {line.strip()}" for line in decision.lines]
    for row in rounds:
        row["tuned"] = row.get(decision.winner or "default")

    def mean(label: str) -> float:
        return float(np.mean([v for r in rounds if (v := r.get(label)) is not None]))

    records = [PointRecord(session=session, point={}, settings={}, ratio=ratio,
                           value=ratio * 1000.0, reference=[980.0 + 10 * i, 1010.0 + 10 * i])
               for i, (session, ratio) in enumerate([("p1-offline", 1.02), ("p1-offline", 0.97),
                                                     ("p1-online", 1.10), ("p1-online", 1.31),
                                                     ("p1-online", 1.18)])]
    tune = TuneResult.conclude(
        Best({"work_mem": "64MB"}, {"work_mem": "4MB"},
             Throughput(default=mean("default"), best=mean(decision.winner or "default"),
                        unit=UNIT)),
        Intervals(rounds, decision), Work(passes=1, evaluations=len(records),
                                          decisions=decisions))
    return tune, records


def _width(step: dict[str, Any]) -> float:
    """high/low of an interval; an anytime-valid sequence is unbounded in its first rounds."""
    if step["low"] <= 0 or not math.isfinite(step["high"]):
        return math.inf
    return float(step["high"] / step["low"])


def decision_dict(tune: TuneResult) -> dict[str, Any]:
    assert tune.intervals.decision is not None
    return tune.intervals.decision.to_dict()


def summary_of(tune: TuneResult, records: list[PointRecord], unit: str = UNIT
               ) -> dict[str, Any]:
    """summary.json as :func:`tuner_client.phases.outputs.write_outputs` writes it."""
    text = json.dumps({**tune.to_dict(), **report_inputs(records, tune.intervals.rounds,
                                                          decision_dict(tune),
                                                          tune.work.decisions, unit)},
                      default=str)
    return dict(json.loads(text))


@pytest.fixture(scope="module")
def session() -> PriorSession:
    return prior_from_core(run_session(make_definition("tpch-online"), 8, clients=("c",)))


def page_text(page: str) -> str:
    """The page's text as a reader sees it (tags dropped, entities decoded)."""
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<img [^>]+>", "", page)))


def verdict_of(page: str) -> str:
    found = re.search(r"<p id=verdict>(.*?)</p>", page, re.S)
    assert found is not None
    return html.unescape(found.group(1))


def test_the_race_trace_is_the_race_the_decision_judged() -> None:
    tune, _ = run_race()
    decision = decision_dict(tune)
    trace = race_trace(tune.intervals.rounds, decision, tune.work.decisions)
    assert trace is not None
    # candidate-2 (truly 0.80x) left the race below the default, PGTune's rules (truly 1x)
    # below the winner, each in the race's own words
    # (anytime-valid sequences at 98.3 % each are unbounded before round 5 here)
    assert {k: v["after"] for k, v in trace["dropped"].items()} == {"candidate-2": 5,
                                                                    "pgtune": 5}
    after = trace["dropped"]["candidate-2"]["after"]
    assert trace["dropped"]["candidate-2"]["reason"].startswith(
        "candidate-2/default 0.78× (98.3 % anytime-valid CI 0.70–0.87) lies below 1")
    assert trace["dropped"]["pgtune"]["reason"].endswith("clearly worse than best")
    assert len(tune.intervals.rounds) == 5
    assert trace["stopped"] is not None and trace["winner"] == "best"
    # each label's last step is the decision's interval, to the last bit
    for label, steps in trace["trajectory"].items():
        iv = decision["intervals"][label]
        assert (steps[-1]["ratio"], steps[-1]["low"], steps[-1]["high"], steps[-1]["n"]) == (
            iv["ratio"], iv["low"], iv["high"], iv["n"]), label
        # the interval narrows as the rounds add up: the last is narrower than the first
        first, last = steps[0], steps[-1]
        if len(steps) > 1:
            assert _width(last) < _width(first), label
    assert [s["round"] for s in trace["trajectory"]["candidate-2"]] == list(range(2, after + 1))
    assert trace["trajectory"]["best"][-1]["round"] == len(tune.intervals.rounds)
    # a method this tuner does not know leaves the rounds untraced, never the summary unwritten
    odd = race_trace(tune.intervals.rounds, {**decision, "race_method": "no-such-method"},
                     tune.work.decisions)
    assert odd is not None and odd["trajectory"] == {} and odd["dropped"] == trace["dropped"]


def test_comparison_and_verdict_carry_the_printed_numbers(session: PriorSession,
                                                          tmp_path: Path) -> None:
    tune, records = run_race()
    summary = summary_of(tune, records)
    page = write_report(session, tmp_path, summary=summary).read_text()
    verdict, text = verdict_of(page), page_text(page)
    printed = format_result(tune).splitlines()
    # the decision's lines and the throughput line as the tuner printed them, in the verdict
    assert printed[1].startswith("result: recommending tuned: tuned/default ")
    # every candidate that raced counts in the correction, the dropped ones too
    assert "simultaneous over 3 candidates" in printed[1]
    assert f"Recommending{printed[1].removeprefix('result: recommending')}." in verdict
    throughput = next(line for line in printed if line.startswith("throughput"))
    assert f"T{throughput[1:]}." in verdict
    low, high = summary["improvement_ci"]
    gain = f"{100 * summary['improvement']:+.1f}%"
    assert f"({gain}, 95 % anytime-valid CI {100 * low:+.1f}% to {100 * high:+.1f}%)" \
        in throughput
    # the comparison row of the winner: the same gain and simultaneous interval
    assert (f"{gain} (95 % anytime-valid CI {100 * low:+.1f}% to {100 * high:+.1f}%), "
            "simultaneous over 3 "
            "candidates") in text
    assert f"In words: tuned measured {gain} (95 % anytime-valid CI" in verdict
    # every other label with its plain interval, and its mean in the unit
    for label in ("candidate-2", "pgtune"):
        iv = summary["decision"]["intervals"][label]
        assert (f"{100 * (iv['ratio'] - 1):+.1f}% (95 % anytime-valid CI "
                f"{100 * (iv['low'] - 1):+.1f}% to "
                f"{100 * (iv['high'] - 1):+.1f}%)") in text
    assert f"{summary['default_qpm']:.1f} {UNIT}" in text
    assert {p.name for p in tmp_path.glob("*.png")} == {
        "comparison.png", "race.png", "tuning_curve.png", "knobs.png"}


def test_the_race_is_drawn_with_its_drops_and_result(session: PriorSession,
                                                     tmp_path: Path) -> None:
    tune, records = run_race()
    summary = summary_of(tune, records)
    page = write_report(session, tmp_path, summary=summary).read_text()
    text = page_text(page)
    dropped = summary["race"]["dropped"]["candidate-2"]
    assert re.search(rf"tuned \(candidate-2\)\s+after round {dropped['after']}\s+"
                     rf"{re.escape(dropped['reason'])}", text)
    assert f"The race stopped: {summary['race']['stopped']}." in text
    assert "Result: tuned recommended." in text
    png = (tmp_path / "race.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000

    # a race nobody wins says so in the picture's caption and the verdict
    flat = {k: 1.0 for k in TRUE}
    TRUE_BEFORE = dict(TRUE)
    TRUE.update(flat)
    try:
        tune, records = run_race(seed=3)
    finally:
        TRUE.update(TRUE_BEFORE)
    page = write_report(session, tmp_path / "flat", summary=summary_of(tune, records)).read_text()
    assert "Result: kept the original (default)." in page_text(page)
    assert "so the original configuration is kept" in verdict_of(page)


def test_the_tuning_curve_is_in_one_declared_unit(session: PriorSession,
                                                  tmp_path: Path) -> None:
    tune, records = run_race()
    summary = summary_of(tune, records)
    assert [m["ratio"] for m in summary["measurements"]] == [1.02, 0.97, 1.10, 1.31, 1.18]
    page = write_report(session, tmp_path, summary=summary).read_text()
    text = page_text(page)
    assert "One unit throughout: each search evaluation's ratio to its session's reference" in text
    # the reference's drift: 980 .. 1050 over the five blocks
    assert f"(max/min {1050 / 980:.2f}×)" in text
    width, height = _png_size((tmp_path / "tuning_curve.png").read_bytes())
    assert (width, height) == (900, 600)  # two panels: ratios, and the reference below

    # the race's candidates found among the search's evaluations: "tuned" is the 1.31x one
    for i, r in enumerate(records):
        r.in_force = {"work_mem": f"{i + 1}MB"}
    final = [PointRecord(session=f"final-{label}", point={}, settings={}, value=1000.0,
                         in_force={"work_mem": mem})
             for label, mem in (("default", "4MB"), ("best", "4MB"), ("candidate-2", "5MB"))]
    run = summary_from_json(summary_of(tune, records + final))
    assert raced_evaluations(run) == {"best": [4], "candidate-2": [5]}
    page = write_report(session, tmp_path / "rings", summary=summary_of(tune, records + final))
    assert "rings round the evaluations whose configuration went on to the race" in page_text(
        page.read_text())

    # unpaired: the values in the unit, said so
    for r in records:
        r.ratio, r.reference = None, []
    page = write_report(session, tmp_path / "raw", summary=summary_of(tune, records)).read_text()
    assert f"Measured values in {UNIT} (not paired" in page_text(page)

    # without a summary: the session's values, as its strategy saw them
    page = write_report(session, tmp_path / "none").read_text()
    assert "as its strategy saw it" in page_text(page)
    assert "No comparison was recorded" in page


def test_anytime_valid_intervals_are_labelled_and_unbounded_ones_drawn(
        session: PriorSession, tmp_path: Path) -> None:
    tune, records = run_race()
    summary = summary_of(tune, records)
    decision = summary["decision"]
    for iv in decision["intervals"].values():
        iv["method"] = "anytime"
    decision["intervals"]["pgtune"]["high"] = None  # still unbounded: the tuner writes null
    summary["race"]["method"] = "anytime"
    summary["race"]["trajectory"]["pgtune"][0]["high"] = math.inf
    page = write_report(session, tmp_path,
                        summary=json.loads(json.dumps(summary))).read_text()
    text = page_text(page)
    iv = decision["intervals"]["pgtune"]
    assert f"{100 * (iv['ratio'] - 1):+.1f}% (95 % anytime-valid CI unbounded yet)" in text
    assert "95 % anytime-valid CI" in text
    assert all(len(_b64_images(page)[i]) > 5000 for i in range(len(_b64_images(page))))
    assert summary_from_json(summary).race_method == "anytime"


def test_live_mode_speaks_its_unit_and_lists_the_guardrail_trips(session: PriorSession,
                                                                 tmp_path: Path) -> None:
    live_unit = "x the original's speed"
    tune, records = run_race()
    # live values are relative speeds near 1
    rounds = [{k: (v / 1000.0 if v is not None else None) for k, v in r.items()}
              for r in tune.intervals.rounds]
    before = tune.best.throughput
    throughput = Throughput(default=(before.default or 0.0) / 1000.0,
                            best=(before.best or 0.0) / 1000.0, unit=live_unit)
    trip = Trip(kind="latency", reason="p95 latency 3.1x the last good configuration's",
                settings={"enable_indexscan": "off"}, restored={"enable_indexscan": "on"},
                detected_after_s=0.8, revert_s=0.12, at=1.0)
    tune = replace(tune, best=replace(tune.best, throughput=throughput),
                   intervals=replace(tune.intervals, rounds=rounds),
                   evidence=Evidence(guardrails=GuardrailSummary((trip,))))
    summary = summary_of(tune, records, unit=live_unit)
    page = write_report(session, tmp_path, summary=summary).read_text()
    text, verdict = page_text(page), verdict_of(page)
    assert f"{throughput.default:.3g} {live_unit}" in text
    assert f"-> {throughput.best:.3g} {live_unit}" in verdict
    assert "queries/min" not in text and "qpm" not in verdict
    assert "the guardrails tripped 1 time(s)" in verdict
    assert f"unit {live_unit} (the run's measurements and decision)" in " ".join(text.split())
    assert "Buffer miss equation" not in text  # live mode searches no buffer size
    assert re.search(r"latency\s+p95 latency 3\.1x the last good configuration's\s+"
                     r"enable_indexscan = off\s+enable_indexscan = on\s+0\.80 s\s+0\.12 s", text)


def test_the_replicas_table_says_which_replica_measured_what(session: PriorSession,
                                                             tmp_path: Path) -> None:
    tune, records = run_race()
    for i, r in enumerate(records):
        r.replica = ("replica-a", "replica-b")[i % 2]
    records.append(PointRecord(session="final-default", point={}, settings={}, value=1000.0,
                               replica="replica-b"))
    page = write_report(session, tmp_path, summary=summary_of(tune, records)).read_text()
    text = page_text(page)
    # a: offline 1, online 2; b: offline 1, online 1, final 1
    assert re.search(r"replica\s+p1-offline\s+p1-online\s+final rounds\s+"
                     r"replica-a\s+1\s+2\s+0\s+replica-b\s+1\s+1\s+1", text), text


def _b64_images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in
            re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def _png_size(data: bytes) -> tuple[int, int]:
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_the_screening_and_the_bme_fit_of_the_run_are_drawn_from_its_summary(
        session: PriorSession, tmp_path: Path) -> None:
    """A session exported without them (here: a bare session) still gets the run's
    screening and BME fit from summary.json."""
    tune, records = run_race()
    summary = summary_of(tune, records)
    summary["screening"] = {"design": "pb", "design_runs": 8, "evaluations": 13, "threshold": 2.0,
                      "effects": [{"knob": "jit_above_cost", "ratio": 1.4, "se": 0.03,
                                   "cleared": True, "reason": "cleared 2.0 se"},
                                  {"knob": "work_mem", "ratio": 1.01, "se": 0.03,
                                   "cleared": False, "reason": "within the noise"}]}
    mib = 1024**2
    summary["bme"] = {"p_star": 0.03, "p_c": 0.01, "m_b": 6.0 * mib, "m_star": 192.0 * mib,
                      "r2": 0.97,
                      "points": [[16 * mib, 0.5], [64 * mib, 0.2], [128 * mib, 0.07]]}
    page = write_report(session, tmp_path, summary=summary).read_text()
    text = page_text(page)
    assert {"screening.png", "bme.png"} <= {p.name for p in tmp_path.glob("*.png")}
    assert re.search(r"jit_above_cost\s+1\.400×\s+searched", text)
    assert re.search(r"work_mem\s+1\.010×\s+held", text)
    assert "M* = 192.0 MiB" in text


def test_a_summary_from_before_the_race_trace_still_gets_its_intervals(
        session: PriorSession, tmp_path: Path) -> None:
    """summary.json of an older tuner (no race, measurements or unit): the comparison with
    its intervals and the verdict as before, the race said untraced, the session's curve."""
    tune, _ = run_race()
    old = json.loads(json.dumps(tune.to_dict(), default=str))
    page = write_report(session, tmp_path, summary=old).read_text()
    assert {p.name for p in tmp_path.glob("*.png")} == {"comparison.png", "tuning_curve.png",
                                                        "knobs.png"}
    text = page_text(page)
    assert "The race's rounds were not traced in summary.json" in text
    assert "after round" not in text  # no drops invented from the decision's wording
    assert "Recommending tuned: tuned/default 1.21×" in verdict_of(page)
    assert "as its strategy saw it" in text
