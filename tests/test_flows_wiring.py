"""A standalone tuning run wired to its metrics, a warm start and the report's metadata.

Real PostgreSQL (TPC-H SF 0.01), no server: the sessions run in-process. The run serves its
Prometheus metrics on a free loopback port; the values read back over HTTP must match what
the run did (best throughput, restarts seen in the server log, evaluations per kind). The
online session is warm-started from an exported prior session, so its first point is that
session's best; the exported sessions carry the comparison and the BME fit for the report.
"""

from __future__ import annotations

import json
import math
import urllib.request
from pathlib import Path

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tune_fixtures import TpchCluster, tpch_cluster  # noqa: F401  (fixture)

from harmony_base.space import IntParam, RealParam, Space
from harmony_core.definition import SessionDefinition
from harmony_core.priordata import HostInfo, PriorSession, TrialRecord, dump, load
from harmony_report import write_report
from tuner_client.api.client import host_metadata
from tuner_client.config import parse_tuner_config
from tuner_client.flows import Tuner
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.metrics.exporter import TunerMetrics
from tuner_client.servers.controllers import LocalController
from tuner_client.servers.target import Target

MIX = "2Q6,1Q13"
CONFIG = f"""\
name: wiring
seed: 3
workload:
  tpch: {{scale: 0.01, mix: "{MIX}"}}
  statement_timeout_s: 60
measure: {{warmup_s: 0.3, samples: 3, aggregate: best, queries: 15, design: windows}}
budget: {{os_reserved: 256MB, connections: 3, online: 48MB}}
offline:
  knobs: {{shared_buffers: {{min: 16MB, max: 160MB, step: 8MB}}}}
  evaluations: 3
  prior: {{min_r2: 0.0}}
online:
  knobs:
    work_mem: {{min: 1MB, max: 32MB}}
    maintenance_work_mem: {{min: 1MB, max: 32MB}}
    temp_buffers: {{min: 1MB, max: 16MB}}
    random_page_cost: {{min: 0.5, max: 8, step: 0.5}}
  strategy: {{name: nelder-mead, options: {{simplex_size: 5}}}}
  evaluations: 2
bme: {{probes: 0}}  # the plain search and its own BME prior (probes are on by default)
flow: {{kind: one-pass}}
final: {{rounds: 1}}
warm_start: {{from: [PRIORS]}}
"""
PRIOR_BEST = {"work_mem": 4, "maintenance_work_mem": 8, "temp_buffers": 2,
              "random_page_cost": 1.5}
#: the same point in the new session's units: these ranges have kB grids (no MB step given)
PRIOR_BEST_KB = {"work_mem": 4096, "maintenance_work_mem": 8192, "temp_buffers": 2048,
                 "random_page_cost": 1.5}


def _prior_online_session(path: Path) -> Path:
    """An exported earlier online session of the same workload on this host; best PRIOR_BEST."""
    space = Space((IntParam("work_mem", 1, 32, unit="MB"),
                   IntParam("maintenance_work_mem", 1, 32, unit="MB"),
                   IntParam("temp_buffers", 1, 16, unit="MB"),
                   RealParam("random_page_cost", 0.5, 8.0, step=0.5)))
    definition = SessionDefinition(name="wiring-earlier-p1-online", space=space,
                                   strategy="nelder-mead", maximize=True, objective="qpm",
                                   metadata={"workload": MIX})
    points = [({"work_mem": 2, "maintenance_work_mem": 4, "temp_buffers": 8,
                "random_page_cost": 4.0}, 900.0),
              (PRIOR_BEST, 1500.0),
              ({"work_mem": 6, "maintenance_work_mem": 2, "temp_buffers": 1,
                "random_page_cost": 2.0}, 1200.0)]
    facts = host_metadata()
    prior = PriorSession(
        name=definition.name, definition=definition.to_dict(), created=1.7e9,
        trials=[TrialRecord(i, i, dict(p), "earlier", "done", v, None, 1.7e9 + i, 1.7e9 + i)
                for i, (p, v) in enumerate(points)],
        hosts=[HostInfo("earlier", 1.7e9, facts["hostname"], facts["cpu_count"],
                        facts["ram_bytes"], facts["os"])])
    return dump(prior, path)


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_standalone_run_serves_metrics_warm_starts_and_exports_metadata(
        tpch_cluster: TpchCluster, tmp_path: Path) -> None:  # noqa: F811
    cluster, dsn = tpch_cluster.cluster, tpch_cluster.dsn
    prior_file = _prior_online_session(tmp_path / "priors" / "earlier.xml")
    config = parse_tuner_config(CONFIG.replace("PRIORS", str(prior_file)), source="wiring.yaml")
    with psycopg.connect(dsn) as conn:
        catalog = KnobCatalog.from_connection(conn)
        original_sb = conn.execute("SELECT current_setting('shared_buffers')").fetchone()[0]  # type: ignore[index]
    target = Target(dsn=dsn, catalog=catalog, controller=LocalController(cluster), cluster=None,
                    ram_bytes=None)
    metrics = TunerMetrics([k.name for k in config.knob_specs()], tuner=config.name)
    port = metrics.serve("127.0.0.1", 0)
    log_start = cluster.log_path.stat().st_size
    out = tmp_path / "out"
    try:
        tuner = Tuner(config, target=target, output_dir=out, run_id="w1", metrics=metrics)
        result = tuner.run()  # standalone: no server, sessions in-process
        got = _scrape(port)
    finally:
        metrics.stop()

    def value(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    def count(name: str, **labels: str) -> float:
        """A counter's value; 0 when it was never incremented (no sample exported)."""
        return got.get((name, tuple(sorted(labels.items()))), 0.0)

    # the run: 3+ offline points (BME may add one), 2 online, 1 final round, all measured
    searched = [r for r in tuner.records if r.session.startswith("p1-")]
    offline = [r for r in searched if "offline" in r.session]
    online = [r for r in searched if r.session == "p1-online"]
    assert len(offline) >= 3 and len(online) == 2
    assert all(r.failure is None and r.value and r.value > 0 for r in searched)
    assert result.work.passes == 1 and len(result.intervals.rounds) >= 1

    # warm start: the online session's first point is the prior session's best (MB -> kB)
    assert online[0].point == PRIOR_BEST_KB
    assert online[0].in_force["work_mem"] == "4MB"
    assert any("warm start from prior session(s) wiring-earlier-p1-online" in d
               for d in result.work.decisions)

    # the metrics served over HTTP match the run
    # the search's best: ranked by paired ratios over a shared reference, so not always the
    # top value (values are ratios times levels measured at different times)
    assert result.best.throughput.search_best in {r.value for r in searched}
    assert math.isclose(value("harmony_tuner_best_throughput_queries_per_second"),
                        result.best.throughput.search_best / 60.0, rel_tol=1e-9)
    assert result.best.throughput.default is not None
    assert math.isclose(value("harmony_tuner_default_throughput_queries_per_second"),
                        result.best.throughput.default / 60.0, rel_tol=1e-9)
    restarts = cluster.log_path.read_text(errors="replace")[log_start:].count(
        "database system is ready to accept connections")
    assert restarts >= 3  # offline sizes, then back to the original shared_buffers
    assert value("harmony_tuner_restarts_total") == restarts
    assert value("harmony_tuner_failed_restarts_total") == 0
    assert value("harmony_tuner_restart_duration_seconds_count") == restarts
    assert value("harmony_tuner_evaluations_total", kind="offline") == len(offline)
    assert value("harmony_tuner_evaluations_total", kind="online") == len(online)
    # the default is measured once per final round; the candidates beside it, each round
    # until they drop; with a candidate there are 2 rounds at least (an interval needs 2)
    rounds = result.intervals.rounds
    assert value("harmony_tuner_evaluations_total", kind="baseline") == len(rounds)
    finals = [r for r in tuner.records if r.session.startswith("final-")
              and r.session != "final-default"]
    assert len(finals) == sum(1 for row in rounds for k in row
                              if k not in ("default", "tuned"))
    assert len(rounds) == (1 if not finals else max(2, len(rounds)))
    assert count("harmony_tuner_evaluations_total", kind="final") == len(finals)
    # 3 samples a searched point, one a final visit (final.visit_samples: the race's seconds
    # buy rounds); paired blocks add one sample of the reference each (and one more where a
    # block opens without the previous block's reference measurement)
    blocks = sum(1 for r in searched if r.ratio is not None)
    references = value("harmony_tuner_samples_total") - 3 * len(searched) \
        - tuner.config.final.visit_samples * (len(rounds) + len(finals))
    assert blocks == len(searched) and blocks + 1 <= references <= 2 * blocks
    assert value("harmony_tuner_evaluations_total", kind="reference") == references
    assert value("harmony_tuner_passes_total") == 1 and value("harmony_tuner_pass") == 1
    assert value("harmony_tuner_phase", phase="idle") == 1
    assert value("harmony_tuner_session_info", session="wiring-w1-p1-online", kind="online") == 1
    # back at the original configuration: the knob gauges say so
    assert value("harmony_tuner_knob_value", knob="shared_buffers") == \
        catalog["shared_buffers"].parse(original_sb)
    # the budget slack of the original settings: the tightest of the shared_buffers cap (with
    # the processes' own memory and the online knobs) and the 48MB online budget (which the
    # server's own defaults break: negative)
    budget = tuner.budget.budget  # type: ignore[union-attr]
    with psycopg.connect(dsn) as conn:
        now = {n: int(catalog[n].parse(conn.execute(  # type: ignore[arg-type]
                   "SELECT current_setting(%s)", [n]).fetchone()[0]))  # type: ignore[index]
               for n in ("shared_buffers", "work_mem", "maintenance_work_mem", "temp_buffers")}
    online_used = (now["work_mem"] * budget.work_mem_coefficient + now["maintenance_work_mem"]
                   + now["temp_buffers"])
    assert budget.process_memory_bytes == 4 * 2**20  # the default P
    expected = min(min(budget.shared_buffers_max_bytes,
                       budget.ram_bytes - budget.os_reserved_bytes
                       - budget.connections * 4 * 2**20 - online_used) - now["shared_buffers"],
                   48 * 2**20 - online_used)
    assert value("harmony_tuner_budget_slack_bytes") == expected

    # the BME fit of the offline points: exported, and in the offline sessions' metadata
    assert result.evidence.bme is not None, result.work.decisions
    assert value("harmony_tuner_bme_fits_total") == 1
    assert math.isclose(value("harmony_tuner_bme_m_star_bytes"), result.evidence.bme["m_star"])
    assert len(result.evidence.bme["points"]) >= 3

    # outputs: the summary and the sessions as XML with the comparison (and the BME fit)
    summary = json.loads((out / "summary.json").read_text())
    assert {k: v for k, v in summary["comparison"].items() if k != "pgtune"} == {
        "default": result.best.throughput.default, "tuned": result.best.throughput.best,
        "unit": "queries/min"}
    assert summary["sessions"][0] == "wiring-w1-p1-offline"
    online_xml = load(out / "sessions" / "wiring-w1-p1-online.xml")
    assert online_xml.definition["metadata"]["comparison"] == summary["comparison"]
    assert online_xml.definition["metadata"]["warm_start"]["start"] == PRIOR_BEST_KB
    assert len(online_xml.completed()) == len(online)  # one trial per paired block
    offline_xml = load(out / "sessions" / "wiring-w1-p1-offline.xml")
    assert offline_xml.definition["metadata"]["bme"]["m_star"] == result.evidence.bme["m_star"]
    # the report reads both from the metadata, no flags needed
    write_report(offline_xml, tmp_path / "report")
    assert (tmp_path / "report" / "comparison.png").stat().st_size > 0
    assert (tmp_path / "report" / "bme.png").stat().st_size > 0

    assert cluster.is_running()


def test_warm_start_config_is_checked(tmp_path: Path) -> None:
    from harmony_base.errors import ConfigError
    from tuner_client.phases.warm import load_priors

    base = "name: x\nwarm_start: "
    with pytest.raises(ConfigError, match=r"line 2.*warm_start"):
        parse_tuner_config(base + "{form: [a.xml]}\n", source="x.yaml")
    cfg = parse_tuner_config(base + f"{{from: [{tmp_path / 'missing.xml'}]}}\n", source="x.yaml")
    assert cfg.warm_start.enabled and cfg.warm_start.server is None
    with pytest.raises(ConfigError, match=r"x.yaml: warm_start.from: .*missing.xml"):
        load_priors(cfg.warm_start, source="x.yaml")
    _prior_online_session(tmp_path / "dir" / "a.xml")
    (tmp_path / "dir" / "notes.md").write_text("not prior data")
    cfg = parse_tuner_config(base + f"{{from: [{tmp_path / 'dir'}]}}\n")
    assert [p.name for p in load_priors(cfg.warm_start)] == ["wiring-earlier-p1-online"]


def test_warm_start_converts_units_and_refuses_unrelated_ones(tmp_path: Path) -> None:
    from harmony_core.warmstart import check_compatible, warm_start_simplex

    prior = load(_prior_online_session(tmp_path / "a.xml"))
    kb = Space((IntParam("work_mem", 64, 32768, unit="kB"),
                IntParam("maintenance_work_mem", 1024, 32768, unit="kB"),
                IntParam("temp_buffers", 1024, 16384, step=8, unit="kB"),
                RealParam("random_page_cost", 0.5, 8.0, step=0.5)))
    new = SessionDefinition(name="new", space=kb, strategy="nelder-mead", maximize=True,
                            objective="qpm", metadata={"workload": MIX})
    simplex = warm_start_simplex([prior], new, 5, host=host_metadata())
    assert simplex[0] == PRIOR_BEST_KB and len(simplex) == 5
    ms = Space((IntParam("work_mem", 1, 100, unit="ms"), *kb.params[1:]))
    verdict = check_compatible(prior, SessionDefinition(name="n2", space=ms,
                                                        strategy="nelder-mead", maximize=True,
                                                        objective="qpm"))
    assert not verdict.compatible and "work_mem is in MB" in verdict.reason
