"""``harmony report``: a self-contained HTML page with the tuning curve, knob trajectories,
the default/recommended/tuned comparison and the BME fit, from a file or a store."""

from __future__ import annotations

import argparse
import base64
import json
import re
import struct
from pathlib import Path

import pytest
from test_priordata import make_definition, run_session, space_dicts

from harmony.cli import report as report_cli
from harmony_base.errors import ConfigError
from harmony_core.priordata import PriorSession, TrialRecord, dump, prior_from_core
from harmony_report import comparison_from_metadata, write_report
from harmony_server.priordata_store import import_into_store
from harmony_server.store import Store, default_store_url

PNG = b"\x89PNG\r\n\x1a\n"
MIB = 1024**2
BME = {"p_star": 0.03, "p_c": 0.01, "m_b": 6.0 * MIB, "m_star": 192.0 * MIB, "r2": 0.98,
       "points": [[16 * MIB, 0.55], [64 * MIB, 0.21], [128 * MIB, 0.08]]}


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def embedded_images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in
            re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


@pytest.fixture(scope="module")
def session() -> PriorSession:
    definition = make_definition("tpch-online", metadata={
        "workload": "4Q6,4Q9,4Q13",
        "comparison": {"default": 1210.0, "recommended": 2430.5, "tuned": {"value": 4875.0}},
        "bme": BME})
    core = run_session(definition, 30)
    prior = prior_from_core(core, created=1700000000.0)
    prior.trials = [TrialRecord(t.id, t.candidate, t.point, t.client, t.status, t.value,
                               t.failure, 1700000000.0 + 60 * t.id, 1700000030.0 + 60 * t.id)
                    for t in prior.trials]
    # one evil failure reason: it must come out escaped
    t = prior.trials[3]
    prior.trials[3] = TrialRecord(t.id, t.candidate, t.point, t.client, "failed", None,
                                 "<script>alert(1)</script>", t.leased_at, t.reported_at)
    return prior


def test_report_page_is_self_contained_with_every_figure(session: PriorSession,
                                                         tmp_path: Path) -> None:
    page_path = write_report(session, tmp_path / "out")
    page = page_path.read_text()
    files = {p.name: p.read_bytes() for p in (tmp_path / "out").glob("*.png")}
    assert sorted(files) == ["bme.png", "comparison.png", "knobs.png", "tuning_curve.png"]
    images = embedded_images(page)
    assert sorted(images) == sorted(files.values())  # the page embeds exactly the PNGs
    assert png_size(files["tuning_curve.png"]) == (800, 400)
    width, height = png_size(files["knobs.png"])
    assert width == 800 and height >= 4 * 150  # one panel per parameter
    assert all(len(data) > 5000 for data in images)  # real drawings, not empty canvases
    # nothing is fetched from elsewhere: no external scripts, styles or images
    assert not re.search(r'(src|href)="(?!data:)', page)
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # the numbers are there
    best_point, best_value = session.best()  # type: ignore[misc]
    assert f"{best_value:.6g}" in page
    assert "+302.9%" in page and "+100.9%" in page  # tuned and recommended over default
    assert "M* = 192.0 MiB" in page
    assert "29 done" not in page and f"{sum(t.status == 'done' for t in session.trials)} done" \
        in page


def test_report_without_comparison_or_bme_says_so(tmp_path: Path) -> None:
    core = run_session(make_definition("plain"), 8, clients=("c",))
    page = write_report(prior_from_core(core), tmp_path).read_text()
    assert len(embedded_images(page)) == 2
    assert "No comparison was recorded" in page and "No BME fit was recorded" in page
    assert not (tmp_path / "bme.png").exists()


def test_comparison_inputs() -> None:
    summary = {"best_qpm": 4000.0, "default_qpm": 1000.0, "improvement": 3.0, "passes": 2}
    comparison = comparison_from_metadata(summary)
    assert comparison is not None and comparison.values == {"default": 1000.0, "tuned": 4000.0}
    assert comparison.gain("tuned") == pytest.approx(3.0)
    with pytest.raises(ConfigError, match="tuned must be a finite number"):
        comparison_from_metadata({"default": 1.0, "tuned": "fast"})
    with pytest.raises(ConfigError, match="p_star"):
        write_report(PriorSession("x", make_definition("x").to_dict(), None), "/nonexistent",
                     bme={"p_c": 0.1})


def test_report_cli_from_xml_and_from_a_store(session: PriorSession, tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    report_cli.add_parser(parser.add_subparsers())
    xml = dump(session, tmp_path / "s.xml")
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"default_qpm": 1000.0, "best_qpm": 2500.0}))
    args = parser.parse_args(["report", "tpch-online", "--from-xml", str(xml), "--out",
                              str(tmp_path / "r1"), "--comparison", str(summary)])
    assert args.func(args) == 0
    page = (tmp_path / "r1" / "report.html").read_text()
    assert "+150.0%" in page and len(embedded_images(page)) == 4

    state = tmp_path / "state"
    small = prior_from_core(run_session(make_definition("small", params=space_dicts()[:1]), 5,
                                        lambda p: p["work_mem"] / 1024, clients=("c",)))
    store = Store(default_store_url(state))
    try:
        import_into_store(store, small)
    finally:
        store.close()
    args = parser.parse_args(["report", "small", "--state-dir", str(state), "--out",
                              str(tmp_path / "r2")])
    assert args.func(args) == 0
    page = (tmp_path / "r2" / "report.html").read_text()
    assert len(embedded_images(page)) == 2 and "5 points measured, 1 failed" in page

    bad: list[tuple[list[str], str]] = [
        (["report", "other", "--from-xml", str(xml)], "holds session 'tpch-online'"),
        (["report", "tpch-online", "--state-dir", str(tmp_path / "none")], "no store at"),
        (["report", "tpch-online", "--from-xml", str(xml), "--bme", str(tmp_path / "no.json")],
         "cannot read it"),
    ]
    for argv, message in bad:
        args = parser.parse_args(argv)
        with pytest.raises(ConfigError, match=message):
            args.func(args)


def test_evaluations_aggregate_the_samples_of_a_point_like_the_session() -> None:
    """With the agg plugin every point is measured 3 times: one evaluation, best of 3."""
    definition = make_definition("agg").to_dict()
    definition["plugins"] = [{"name": "agg", "options": {"times": 3, "how": "best"}}]
    from harmony_core.definition import SessionDefinition
    from harmony_core.session import SessionCore
    from harmony_report import evaluations

    core = SessionCore(SessionDefinition.from_dict(definition))
    core.join("c")
    noise = [0.0, 40.0, -25.0]
    for i in range(18):
        got = core.fetch("c")
        assert got is not None
        core.report(got.trial_id, 1000.0 + got.point["work_mem"] / 1024 + noise[i % 3])
    evals = evaluations(prior_from_core(core))
    assert len(evals) == 6 and all(len(ev.samples) == 3 for ev in evals)
    assert [ev.value for ev in evals] == [max(ev.samples) for ev in evals]
    assert [ev.value for ev in evals] == [h.value for h in core.history()]
