"""Knob screening in a real tuning run: the design is measured on PostgreSQL, the knob that
matters is searched, the others are held at their values, and the ranking is reported; the
online session stops on its time budget."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import psycopg
import pytest
from test_decision_records import assert_valid_summary
from tune_fixtures import TpchCluster, jit_tpch_cluster  # noqa: F401  (fixture)

from tuner_client.api.client import connect
from tuner_client.config import parse_tuner_config
from tuner_client.flows import Tuner
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.servers.controllers import LocalController
from tuner_client.servers.target import Target

CONFIG = """\
name: screentest
seed: 3
workload:
  tpch: {scale: 0.01, mix: "2Q6,1Q13"}
  statement_timeout_s: 60
measure: {warmup_s: 0.2, samples: 2, queries: 18, design: windows}
budget: {os_reserved: 256MB, connections: 3, online: 96MB}
offline:
  knobs: {shared_buffers: {min: 128MB, max: 128MB, step: 8MB}}
  evaluations: 1
online:
  knobs:
    jit_above_cost: {min: 0, max: 200000, step: 1000}
    temp_buffers: {min: 1MB, max: 16MB}
    work_mem: {min: 1MB, max: 4MB}
  evaluations: 50
  seconds: 6
screening: {enabled: true, design: pb, replicates: 2, samples: 1}
flow: {kind: one-pass}
final: {rounds: 2, max_rounds: 2, candidates: 1, baselines: []}
"""


def _run(cluster: TpchCluster, tmp_path: Path, text: str) -> tuple[Tuner, Any, Path]:
    """One tuning run of ``text`` on the cluster (skipped without a JIT provider)."""
    dsn = (cluster.dsn
           + " options='-c jit_optimize_above_cost=0 -c jit_inline_above_cost=0'")
    with psycopg.connect(dsn) as conn:
        if not conn.execute("SELECT pg_jit_available()").fetchone()[0]:  # type: ignore[index]
            pytest.skip("this PostgreSQL has no JIT provider")
        catalog = KnobCatalog.from_connection(conn)
    target = Target(dsn=dsn, catalog=catalog, controller=LocalController(cluster.cluster),
                    cluster=None, ram_bytes=None)
    config = parse_tuner_config(text, source="screentest.yaml")
    out = tmp_path / "out"
    tuner = Tuner(config, client=connect(None), target=target, output_dir=out, run_id="sc1")
    return tuner, tuner.run(), out


def test_screening_searches_the_knob_that_matters(jit_tpch_cluster: TpchCluster,  # noqa: F811
                                                  tmp_path: Path) -> None:
    """JIT-compiling every query (jit_above_cost 0) is far slower than the default 100000 on
    SF 0.01: the screening sees it clear the noise, and the online search moves it. The
    sessions optimize and inline whatever they compile, so the effect is ~10x, not the
    1.3-1.5x of plain JIT: CI beside an I/O-heavy worker read that at 1.32-1.35x with se
    0.13-0.23, inside the noise (so did a run beside stress --cpu 3 --io 1, 1.32x at 0.175);
    with optimizing JIT the same hog read 11.5x at se 0.13."""
    tuner, result, out = _run(jit_tpch_cluster, tmp_path, CONFIG)

    screening = result.to_dict()["screening"]
    assert screening is not None and screening["design"] == "pb"
    effects = {e["knob"]: e for e in screening["effects"]}
    assert set(effects) == {"jit_above_cost", "temp_buffers", "work_mem"}
    # PB for 3 knobs: N = 8 runs (the smallest design), twice (two replicates: on a loaded
    # machine one replicate of 9-query samples left the JIT effect at 1.35x +- 0.23, inside
    # the noise), the default before and after every 2 runs
    design_records = [r for r in tuner.records if r.session == "screening"]
    assert screening["design_runs"] == 8
    assert len(design_records) == screening["evaluations"] == 16 + 8 + 1
    # the memory knobs share the 96MB online budget: each gets a real range, and every
    # combination of their high ends fits (no run of the design was refused)
    for knob in ("temp_buffers", "work_mem"):
        assert effects[knob]["high"] > effects[knob]["low"], effects[knob]
    assert all(r.failure is None for r in design_records)
    jit = effects["jit_above_cost"]
    assert jit["cleared"] and jit["ratio"] > 1.2, effects  # no JIT at all beats JIT everywhere
    assert screening["effects"][0]["knob"] == "jit_above_cost"  # the largest effect first

    # the online search moves only the knobs that cleared; the others stay as they were
    cleared = [k for k, e in effects.items() if e["cleared"]]
    online = [r for r in tuner.records if r.session == "p1-online"]
    assert online and all(set(r.point) == set(cleared) for r in online)
    # the online session's time budget (6 s) ends it long before its 50 evaluations: no
    # evaluation starts after 6 s
    assert len(online) < 50 and online[-1].started - online[0].started < 6.0
    original = result.best.original
    for r in online:
        for knob in set(effects) - set(cleared):
            assert r.in_force[knob] == original[knob]
    assert any("screening: searching" in d or "every online knob cleared" in d
               for d in result.work.decisions), result.work.decisions
    # the design's predicted best (jit_above_cost at its better, high end: 200000, above the
    # original 100000) is where the online search starts, and it races in the final rounds
    # (as "screened", or as the search's own candidate when the search ranked it first)
    screened = tuner.state.screened
    assert screened is not None and float(screened["jit_above_cost"]) == 200000, screened
    assert all(screened[k] == original[k] for k in set(effects) - set(cleared))
    assert float(online[0].in_force["jit_above_cost"]) == 200000, online[0].in_force
    raced = {r.session: r.in_force for r in tuner.records
             if r.session in ("final-screened", "final-best")}
    assert any(all(in_force[k] == v for k, v in screened.items())
               for in_force in raced.values()), (raced, screened)

    # reported: summary.json and the online session's metadata (which the report draws)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["screening"]["effects"][0]["knob"] == "jit_above_cost"
    from harmony_core.priordata import load
    from harmony_report import write_report
    online_xml = load(out / "sessions" / "screentest-sc1-p1-online.xml")
    assert online_xml.definition["metadata"]["screening"]["effects"] == summary["screening"][
        "effects"]
    write_report(online_xml, tmp_path / "report")
    assert (tmp_path / "report" / "screening.png").stat().st_size > 0
    assert jit_tpch_cluster.cluster.is_running()


def test_a_per_transaction_screening_holds_knobs_no_move_improves(
        jit_tpch_cluster: TpchCluster, tmp_path: Path) -> None:  # noqa: F811
    """With ``measure.design: per-transaction`` two designs' 16 rows (each knob moved from its
    setting in force toward either end of its range) share one randomized run. JIT-compiling
    every query (jit_above_cost 100000 → 0) is a ~10x loss and 50000 changes nothing on SF
    0.01: no move gains, so no knob is searched, and the run says how it measured. The range
    ends at 50000, below the setting in force: the rows leave the knob at 100000 where they do
    not move it (not at the range's nearest end), so both ends are moves down from there."""
    text = CONFIG.replace("measure: {warmup_s: 0.2, samples: 2, queries: 18, design: windows}",
                          "measure: {warmup_s: 0.2, samples: 2, queries: 18, "
                          "design: per-transaction, per_transaction_s: 10}")
    text = text.replace("jit_above_cost: {min: 0, max: 200000,",
                        "jit_above_cost: {min: 0, max: 50000,")
    text = text.replace("baselines: []}", "baselines: [], max_seconds: 30}")  # the shortest
    tuner, result, out = _run(jit_tpch_cluster, tmp_path, text)
    screening = result.to_dict()["screening"]
    assert screening is not None and screening["measured"] == "per-transaction"
    assert screening["design_runs"] == 16 and screening["transactions"] > 100
    # no window was measured for the design: no default between runs, no design points
    assert not [r for r in tuner.records if r.session == "screening"]
    effects = {e["knob"]: e for e in screening["effects"]}
    assert set(effects) == {"jit_above_cost", "temp_buffers", "work_mem"}
    jit = effects["jit_above_cost"]
    # its move down to 0 reads far below 1 (a loss), so its best move is to 50000
    down = float(re.search(r"down to 0(?:\.0)? ([\d.]+)×", jit["reason"]).group(1))  # type: ignore[union-attr]
    assert down < 0.5, jit
    assert re.match(r"from 100000(\.0)? down to 50000(\.0)? ", jit["reason"]), jit
    # 50000 changes no plan on SF 0.01, so that move reads 1 within its noise. Whether its
    # interval clears 1 is a coin with 2.3 % on it (z = 2, one side): a CI run read 1.067×
    # (se 2.9 %) and cleared, so the bound is on the ratio (about 7 se of 3 %), not on the verdict
    assert float(jit["high"]) == 50000 and abs(math.log(jit["ratio"])) < 0.2, jit
    decisions = result.work.decisions
    assert any("screening: measured per-transaction: two Plackett–Burman designs of 8 rows"
               in d for d in decisions), decisions
    assert any("spare columns" in d for d in decisions), decisions
    if not any(e["cleared"] for e in effects.values()):
        assert any("the online search is skipped" in d for d in decisions), decisions
        assert not [r for r in tuner.records if r.session == "p1-online"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["screening"]["measured"] == "per-transaction"
    # every decision a record under the published schema: the screening's as data
    kinds = assert_valid_summary(summary)
    assert {"measured", "line", "knobs"} <= kinds, kinds
    measured = next(r for r in summary["decision_records"] if r["kind"] == "measured"
                    and r.get("step") == "screening")
    assert measured["count"] == 8 and measured["values"]["transactions"] > 100
    assert jit_tpch_cluster.cluster.is_running()
