"""The report of a real (small) tuning run, opened in a real headless Chromium: the page loads
without a console error, every image is there with a non-zero natural size, and the verdict
says what the tuner printed and summary.json holds, to the printed digit."""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from browser_support import BrowserUnavailable, chromium, load_page
from tune_fixtures import TpchCluster, tpch_cluster  # noqa: F401  (fixture)

from harmony.cli import report as report_cli
from tuner_client.api.client import connect
from tuner_client.cli.tune_run import format_result
from tuner_client.config import parse_tuner_config
from tuner_client.flows import Tuner
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.phases.result import TuneResult
from tuner_client.servers.controllers import LocalController
from tuner_client.servers.target import Target

pytestmark = pytest.mark.browser

CONFIG = """\
name: browsertest
seed: 5
workload:
  tpch: {scale: 0.01, mix: "2Q6,1Q13"}
  statement_timeout_s: 60
measure: {warmup_s: 0.2, samples: 2, aggregate: best, queries: 10, design: windows}
budget: {os_reserved: 256MB, connections: auto}
offline:
  knobs: {shared_buffers: {min: 16MB, max: 64MB, step: 8MB}}
  evaluations: 2
online:
  knobs:
    work_mem: {min: 1MB, max: 8MB}
    random_page_cost: {min: 0.5, max: 8, step: 0.5}
  strategy: {name: nelder-mead, options: {simplex_size: 3}}
  evaluations: 3
bme: {probes: 0}  # the plain offline search (probes are on by default)
flow: {kind: one-pass}
final: {rounds: 2, max_rounds: 3, candidates: 2}
"""


@dataclass(frozen=True)
class TunedRun:
    result: TuneResult
    out: Path
    printed: str
    summary: dict[str, Any]


@pytest.fixture(scope="module")
def tuned_run(tpch_cluster: TpchCluster,  # noqa: F811
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[TunedRun]:
    """A real one-pass run on the shared TPC-H cluster, its outputs written."""
    with psycopg.connect(tpch_cluster.dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
    target = Target(dsn=tpch_cluster.dsn, catalog=catalog,
                    controller=LocalController(tpch_cluster.cluster), cluster=None,
                    ram_bytes=None)
    out = tmp_path_factory.mktemp("browser-run") / "out"
    config = parse_tuner_config(CONFIG, source="browsertest.yaml")
    with connect(None) as client:
        result = Tuner(config, client=client, target=target, output_dir=out,
                       run_id="b1").run()
    yield TunedRun(result, out, format_result(result),
                   json.loads((out / "summary.json").read_text()))


def _report(run: TunedRun, session: str, out: Path) -> Path:
    """``harmony report SESSION --from-xml OUT/sessions/SESSION.xml`` (the summary found
    beside it), as a user runs it."""
    parser = argparse.ArgumentParser()
    report_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["report", session, "--from-xml",
                              str(run.out / "sessions" / f"{session}.xml"), "--out", str(out)])
    assert args.func(args) == 0
    return out / "report.html"


def test_the_report_of_a_real_run_renders_in_chromium_and_says_what_was_printed(
        tuned_run: TunedRun, tmp_path: Path) -> None:
    run, summary = tuned_run, tuned_run.summary
    session = "browsertest-b1-p1-online"
    page = _report(run, session, tmp_path / "report")
    pngs = sorted(p.name for p in page.parent.glob("*.png"))
    # the decision had final rounds, so the race and the comparison with intervals are drawn
    assert {"comparison.png", "race.png", "tuning_curve.png", "knobs.png"} <= set(pngs)
    try:
        with chromium() as driver:
            seen = load_page(driver, page)
    except BrowserUnavailable as exc:
        pytest.skip(f"no headless Chromium here: {exc}")
    assert seen.errors == []
    assert len(seen.images) == len(pngs)
    for image in seen.images:
        assert image["complete"] and image["width"] > 0 and image["height"] > 0, image

    # printed == summary.json == report, line by line and to the printed digit
    decision_lines = [line.strip() for line in summary["decision"]["text"]]
    printed = run.printed.splitlines()
    verdict_end = next(i for i, line in enumerate(printed)
                       if line.startswith("recommended configuration"))
    printed_results = [line.removeprefix("result: ").strip() for line in printed[1:verdict_end]]
    assert printed_results == decision_lines
    for line in decision_lines:
        assert f"{line[0].upper()}{line[1:]}." in seen.verdict, (line, seen.verdict)
    throughput = next(line for line in run.printed.splitlines()
                      if line.startswith("throughput, default vs best"))
    assert f"T{throughput[1:]}." in seen.verdict
    mean = summary["default_qpm"]
    assert f"{mean:.1f}" in throughput and f"{mean:.1f} {summary['unit']}" in seen.text
    if summary["decision"]["winner"] is None:
        assert "so the original configuration is kept." in seen.verdict
        assert "Result: kept the original (default)." in seen.text
    else:
        low, high = summary["improvement_ci"]
        assert f"{100 * low:+.1f}% to {100 * high:+.1f}%" in seen.verdict
        assert "so it is recommended." in seen.verdict
    # the race section names every label and its last interval as the decision does
    for label, iv in summary["decision"]["intervals"].items():
        if iv is not None and label != summary["decision"]["winner"]:
            kind = "anytime-valid CI" if iv.get("method") == "anytime" else "CI"
            shown = (f"{100 * (iv['ratio'] - 1):+.1f}% (95 % {kind} unbounded yet)"
                     if iv["high"] is None else
                     f"{100 * (iv['ratio'] - 1):+.1f}% (95 % {kind} "
                     f"{100 * (iv['low'] - 1):+.1f}% to {100 * (iv['high'] - 1):+.1f}%)")
            assert shown in seen.text, label
    last = {label: steps[-1] for label, steps in summary["race"]["trajectory"].items() if steps}
    for label, step in last.items():
        iv = summary["decision"]["intervals"][label]
        # unbounded: null in the JSON, in the decision and in the race's steps alike
        high = math.inf if iv["high"] is None else iv["high"]
        step_high = math.inf if step["high"] is None else step["high"]
        assert (step["ratio"], step["low"], step_high) == pytest.approx(
            (iv["ratio"], iv["low"], high), rel=1e-12), label
