"""The live view of a tuning run: what it shows after each record, and the time it predicts."""

from __future__ import annotations

import io

from rich.console import Console

from tuner_client.cli.progress import RunView, live_view, phase_of
from tuner_client.config import parse_tuner_config
from tuner_client.measurer import PointRecord, SampleRecord

CONFIG = """\
name: viewtest
workload: {tpch: {scale: 0.01, mix: "1Q6"}}
offline: {knobs: {shared_buffers: {min: 16MB, max: 64MB}}, evaluations: 2}
online: {knobs: {work_mem: {min: 1MB, max: 32MB}}, evaluations: 4}
final: {rounds: 2, candidates: 1}
"""


def _record(session: str, value: float | None, work_mem: str) -> PointRecord:
    samples = [SampleRecord(qpm=q, completed=10, errors=0, seconds=1.0)
               for q in (value or 0.0, 1.1 * (value or 0.0))]
    return PointRecord(session=session, point={"work_mem": 1}, settings={"work_mem": work_mem},
                       in_force={"work_mem": work_mem}, samples=samples, value=value)


def _text(view: RunView) -> str:
    out = io.StringIO()
    Console(file=out, width=200).print(view.table())
    return out.getvalue()


def test_view_follows_the_records_and_keeps_the_best() -> None:
    view = RunView(parse_tuner_config(CONFIG, source="view.yaml"))
    assert view.planned == 6 and view.time_left() is None
    view.measured(_record("p1-offline", 100.0, "4MB"))
    view.measured(_record("p1-online", 130.0, "8MB"))
    view.measured(_record("p1-online", 90.0, "16MB"))
    view.measured(_record("p1-online", None, "32MB"))
    assert view.evaluations == 4 and view.phase == "online"
    assert view.best is not None and view.best.value == 130.0
    view.seconds = [10.0] * 4  # the pace: 10 s a measurement
    # 2 search evaluations left, then 2 rounds × (default + pgtune + 1 candidate)
    assert view.time_left() == 10.0 * (2 + 6)
    view.measured(_record("final-default", 120.0, "4MB"))
    view.decided("final: recommending tuned")
    assert view.phase == "final" and view.final_rounds == 1 and view.evaluations == 4
    text = _text(view)
    assert "130.0" in text and "work_mem=8MB" in text and "final" in text
    assert "4 of 6 per pass" in text and "recommending tuned" in text


def test_the_view_shows_the_runs_own_best() -> None:
    """Given the run's best (ranked by paired ratios), the view shows it, not the highest
    value: a 1.2× trial over the incumbent may read a lower value than the incumbent's."""
    incumbent = _record("p1-offline", 130.0, "4MB")
    trial = _record("p1-online", 110.0, "8MB")
    best = [incumbent]
    view = RunView(parse_tuner_config(CONFIG, source="view.yaml"), best_of=lambda: best[0])
    view.measured(incumbent)
    best[0] = trial  # the run ranked the trial above the incumbent by its ratio
    view.measured(trial)
    assert view.best is trial and "110.0" in _text(view)


def test_phase_names_and_a_view_off_the_terminal() -> None:
    assert [phase_of(s) for s in ("p1-offline", "p2-online", "final-best", "screening-1",
                                  "prepare")] == ["offline", "online", "final", "screening",
                                                  "prepare"]
    view = RunView(parse_tuner_config(CONFIG, source="view.yaml"))
    with live_view(view, enabled=False) as shown:
        assert shown is view
