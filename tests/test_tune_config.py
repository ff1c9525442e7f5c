"""The tuner config: schema, defaults, every shipped config, and errors naming file/line/knob."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import psycopg
import pytest

from harmony_base.errors import ConfigError
from harmony_base.space import Space
from tuner_client.cli.demo import _FALLBACK_YAML, DEMO_CONFIG_YAML
from tuner_client.config import (
    DEFAULT_ONLINE_KNOBS,
    KnobSpace,
    format_bytes,
    load_tuner_config,
    parse_bytes,
    parse_tuner_config,
    resolve_knob_space,
)
from tuner_client.config.model import RESTART_STAGE
from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.servers.local_cluster import LocalCluster

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
TUNER_CONFIGS = sorted([*CONFIGS.glob("tpch-*.yaml"), *CONFIGS.glob("pg-*.yaml")])


@pytest.fixture(scope="module")
def catalog(pg_cluster: LocalCluster) -> KnobCatalog:
    with psycopg.connect(pg_cluster.dsn) as conn:
        return KnobCatalog.from_connection(conn)


def test_every_shipped_config_loads_and_resolves(catalog: KnobCatalog) -> None:
    names = {p.name for p in TUNER_CONFIGS}
    assert {"tpch-onepass-4q6-4q9-4q13.yaml", "tpch-multipass-3q6-3q7-3q8-3q13.yaml",
            "tpch-tight-budget.yaml", "pg-existing-server.yaml", "tpch-demo.yaml"} <= names
    for path in TUNER_CONFIGS:
        cfg = load_tuner_config(path)
        offline = resolve_knob_space(cfg.offline.knobs, catalog, kind="offline")
        online = resolve_knob_space(cfg.online.knobs, catalog, kind="online")
        assert offline.names == ["shared_buffers"], path
        assert online.space.dim >= 4, path
    tight = load_tuner_config(CONFIGS / "tpch-tight-budget.yaml")
    assert tight.budget.online_limit_bytes == 64 * 2**20
    assert tight.flow.kind == "multi-pass"
    existing = load_tuner_config(CONFIGS / "pg-existing-server.yaml")
    assert existing.database.dsn and existing.database.controller.kind == "pg_ctl"


def test_every_tuner_config_in_configs_parses() -> None:
    """Every file of configs/ but the session definitions (synthetic-*) is a valid tuner
    config under the schema, the user-workload ones (shop-*) included."""
    paths = sorted(p for p in CONFIGS.glob("*.yaml") if not p.name.startswith("synthetic-"))
    assert {"shop-scripted.yaml", "shop-replay.yaml"} <= {p.name for p in paths}
    for path in paths:
        load_tuner_config(path)
    scripted = load_tuner_config(CONFIGS / "shop-scripted.yaml")
    assert scripted.workload.kind == "scripts" and scripted.workload.writes
    assert scripted.workload.app == "shop" and scripted.measure.estimator == "work"
    assert len(scripted.workload.files) == 3
    replay = load_tuner_config(CONFIGS / "shop-replay.yaml")
    assert replay.workload.kind == "replay" and replay.workload.files == ("shop-capture.json",)


def test_demo_config_file_matches_built_in_copy() -> None:
    body = [ln for ln in DEMO_CONFIG_YAML.read_text().splitlines() if not ln.startswith("#")]
    assert body == _FALLBACK_YAML.splitlines()


def test_defaults_are_the_study_setup() -> None:
    cfg = parse_tuner_config("name: x\n")
    assert cfg.database.embedded and cfg.database.controller.kind == "local"
    assert (cfg.measure.warmup_s, cfg.measure.samples, cfg.measure.aggregate) == (10.0, 3, "median")
    assert cfg.measure.queries == 20 and cfg.measure.seconds is None  # fixed work by default
    assert cfg.budget.shared_buffers_fraction == 0.5
    assert [k.name for k in cfg.online.knobs] == list(DEFAULT_ONLINE_KNOBS)
    assert cfg.offline.strategy_options == {"simplex_size": 2}
    assert cfg.online.strategy_options == {"simplex_size": 6, "combine": True}
    assert cfg.flow.kind == "one-pass" and cfg.flow.max_passes == 1
    assert cfg.flow.shift_outside == 3


def _spaces(catalog: KnobCatalog, online_knobs: str) -> tuple[KnobSpace, KnobSpace]:
    """The offline (shared_buffers 32MB-2GB by 8MB) and online spaces of a config whose
    online knobs are the YAML lines ``online_knobs``."""
    cfg = parse_tuner_config("name: x\n"
                             "offline: {knobs: {shared_buffers: {min: 32MB, max: 2GB, "
                             "step: 8MB}}}\n"
                             "online:\n  knobs:\n" + online_knobs)
    return (resolve_knob_space(cfg.offline.knobs, catalog, kind="offline"),
            resolve_knob_space(cfg.online.knobs, catalog, kind="online"))


def test_units_resolved_exactly(catalog: KnobCatalog) -> None:
    off, on = _spaces(catalog, "    work_mem: {min: 64kB, max: 200MB, step: 64kB}\n"
                               "    random_page_cost: {min: 0.1, max: 30, step: 0.1}\n"
                               "    jit: {values: [off, on]}\n"
                               "    max_parallel_workers_per_gather: null\n")
    sb = off["shared_buffers"]
    assert (sb.unit, sb.param.min, sb.param.max, sb.param.step) == ("MB", 32, 2048, 8)
    wm = on["work_mem"]
    assert (wm.unit, wm.param.min, wm.param.max, wm.param.step) == ("kB", 64, 204800, 64)
    point = {"work_mem": 65536, "random_page_cost": 1.1, "jit": "off",
             "max_parallel_workers_per_gather": 0}
    assert on.settings(point) == {"work_mem": "64MB", "random_page_cost": "1.1", "jit": "off",
                                  "max_parallel_workers_per_gather": "0"}
    assert on.point_from_settings(on.settings(point)) == point
    assert off.settings({"shared_buffers": 1024}) == {"shared_buffers": "1GB"}
    assert parse_bytes("1.5GB", what="x") == 1536 * 2**20 and format_bytes(1536 * 2**20) == "1536MB"


def test_wide_online_memory_ranges_are_searched_on_a_log_scale(catalog: KnobCatalog) -> None:
    """An online memory knob whose range spans 16x or more is searched in equal ratios unless
    its ``log`` says otherwise; narrower ranges, other quantities and the offline session's
    shared_buffers keep the linear scale."""
    off, on = _spaces(catalog, "    work_mem: {min: 1MB, max: 128MB}\n"
                               "    temp_buffers: {min: 1MB, max: 128MB, log: false}\n"
                               "    maintenance_work_mem: {min: 16MB, max: 128MB}\n"
                               "    random_page_cost: {min: 0.1, max: 30}\n"
                               "    max_wal_size: {min: 1GB, max: 4GB}\n")
    scales = {p.name: p.param.log for p in on.params + off.params}
    assert scales == {"work_mem": True, "temp_buffers": False, "maintenance_work_mem": False,
                      "random_page_cost": False, "max_wal_size": False,
                      "shared_buffers": False}, scales
    # 4MB sits at log(4)/log(128) = 0.29 of work_mem's axis, 3/127 = 0.024 of the linear one
    wm, tb = (on[n].param for n in ("work_mem", "temp_buffers"))
    assert (wm.max / wm.min, tb.max / tb.min) == (128, 128)
    assert abs(Space.to_unit_value(wm, wm.min * 4) - math.log(4) / math.log(128)) < 1e-9
    assert abs(Space.to_unit_value(tb, tb.min * 4) - 3 / 127) < 1e-9


def _error(text: str, source: str = "configs/bad.yaml") -> str:
    with pytest.raises(ConfigError) as info:
        parse_tuner_config(text, source=source)
    return str(info.value)


def _resolve_error(text: str, catalog: KnobCatalog, kind: str = "online") -> str:
    cfg = parse_tuner_config(text, source="configs/bad.yaml")
    specs: Any = cfg.online.knobs if kind == "online" else cfg.offline.knobs
    with pytest.raises(ConfigError) as info:
        resolve_knob_space(specs, catalog, kind=kind)
    return str(info.value)


def test_unknown_key_names_file_line_and_key() -> None:
    msg = _error("name: x\nmeasure:\n  warmup_s: 5\n  sampels: 3\n")
    assert "configs/bad.yaml, line 4" in msg and "'sampels'" in msg


def test_schema_errors_name_the_line() -> None:
    msg = _error("name: x\nflow:\n  kind: two-pass\n")
    assert "configs/bad.yaml, line 3" in msg and "flow.kind" in msg
    msg = _error("name: x\nmeasure: {queries: 10, seconds: 5}\n")
    assert "line 2" in msg and "not both" in msg
    # a DSN alone is managed mode (issue 52); restarts there need a controller
    assert parse_tuner_config("name: x\ndatabase: {dsn: 'host=db'}\n").database.managed
    msg = _error("name: x\ndatabase: {dsn: 'host=db', allow_restarts: true}\n")
    assert "line 2" in msg and "database.allow_restarts" in msg and "controller" in msg
    msg = _error("name: x\nfinal:\n  visit_samples: 0\n")
    assert "line 3" in msg and "final.visit_samples" in msg and "0" in msg


def test_knob_range_checked_against_live_catalog(catalog: KnobCatalog) -> None:
    msg = _resolve_error("name: x\nonline:\n  knobs:\n    work_mem: {min: 1MB, max: 5TB}\n",
                         catalog)
    assert "configs/bad.yaml, line 4" in msg and "work_mem" in msg
    assert "64kB" in msg and "5TB" in msg  # the allowed range and the value given


def test_knob_errors_unknown_wrong_section_bad_unit(catalog: KnobCatalog) -> None:
    msg = _resolve_error("name: x\nonline:\n  knobs:\n    work_mme: {min: 1MB, max: 2MB}\n",
                         catalog)
    assert "line 4" in msg and "work_mme" in msg and "work_mem" in msg  # suggestion
    msg = _resolve_error("name: x\noffline:\n  knobs:\n    work_mem: {min: 1MB, max: 2MB}\n"
                         "online: {knobs: [random_page_cost]}\n", catalog, kind="offline")
    assert "line 4" in msg and "online.knobs" in msg
    msg = _resolve_error("name: x\nonline:\n  knobs:\n    work_mem: {min: 1mb, max: 2MB}\n",
                         catalog)
    assert "line 4" in msg and "work_mem" in msg and "'MB'" in msg
    msg = _error("name: x\nonline:\n  knobs: [fsync_whatever]\n")
    assert "line 3" in msg and "no built-in range" in msg



def test_measure_estimator_default_and_bad_value() -> None:
    # progress where the driver reports query starts (TPC-H, replay), count elsewhere
    assert parse_tuner_config("name: x\n").measure.estimator == "progress"
    assert parse_tuner_config("name: x\nworkload: {pgbench: {scale: 1}}\n"
                              ).measure.estimator == "count"
    cfg = parse_tuner_config("name: x\nmeasure: {estimator: concurrency}\n")
    assert cfg.measure.estimator == "concurrency"
    msg = _error("name: x\nmeasure:\n  estimator: latency\n")
    assert "configs/bad.yaml, line 3" in msg and "estimator" in msg and "'latency'" in msg


def test_budget_process_memory_and_operations() -> None:
    cfg = parse_tuner_config("name: x\n")
    assert (cfg.budget.process_memory_bytes, cfg.budget.operations) == (4 * 2**20, 1)
    cfg = parse_tuner_config("name: x\nbudget: {process_memory: 12MB, operations: 4}\n")
    assert (cfg.budget.process_memory_bytes, cfg.budget.operations) == (12 * 2**20, 4)
    # the original formula of docs/background.md §2 exactly
    assert parse_tuner_config("name: x\nbudget: {process_memory: 0}\n"
                              ).budget.process_memory_bytes == 0
    msg = _error("name: x\nbudget:\n  operations: 0\n")
    assert "configs/bad.yaml, line 3" in msg and "operations" in msg
    msg = _error("name: x\nbudget:\n  process_memory: 8 potatoes\n")
    assert "line 3" in msg and "budget.process_memory" in msg and "8 potatoes" in msg


def test_a_strategy_without_options_gets_its_own_defaults() -> None:
    """The sessions' default options (simplex_size) belong to the default simplex strategy:
    cma-es named without options must not inherit them (it has no simplex_size)."""
    from strategies.base import make_strategy
    from tuner_client.config import parse_tuner_config

    cfg = parse_tuner_config("name: x\nonline: {strategy: {name: cma-es}}\n")
    assert cfg.online.strategy == "cma-es" and dict(cfg.online.strategy_options) == {}
    assert dict(cfg.offline.strategy_options) == {"simplex_size": 2}
    assert dict(parse_tuner_config("name: x\n").online.strategy_options) == {"simplex_size": 6,
                                                                             "combine": True}
    from harmony_base.space import IntParam, Space
    strategy = make_strategy(cfg.online.strategy, Space((IntParam("a", 0, 10),)), seed=1,
                             **cfg.online.strategy_options)
    assert strategy.ask() is not None


def test_final_close_call_rounds() -> None:
    cfg = parse_tuner_config("name: x\n").final
    assert (cfg.max_rounds, cfg.close_call_rounds) == (6, 12)
    # a larger max_rounds raises the close-call limit with it unless one is given
    assert parse_tuner_config("name: x\nfinal: {max_rounds: 15}\n").final.close_call_rounds == 15
    assert parse_tuner_config("name: x\nfinal: {close_call_rounds: 20}\n"
                              ).final.close_call_rounds == 20
    msg = _error("name: x\nfinal:\n  max_rounds: 8\n  close_call_rounds: 7\n")
    assert "configs/bad.yaml, line 4" in msg and "close_call_rounds" in msg and "7" in msg


def test_final_until() -> None:
    assert parse_tuner_config("name: x\n").final.until == "claim"
    assert parse_tuner_config("name: x\nfinal: {until: winner}\n").final.until == "winner"
    msg = _error("name: x\nfinal:\n  until: forever\n")
    assert "until" in msg and "forever" in msg and "claim" in msg, msg


def test_final_restart_seconds_is_the_restart_parts_own_budget() -> None:
    cfg = parse_tuner_config("name: x\nfinal: {max_seconds: 30, restart_seconds: 80}\n").final
    assert (cfg.seconds_for(None), cfg.seconds_for(RESTART_STAGE)) == (30, 80)
    assert cfg.seconds_for("session part") == 30
    # without it the restart part reads final.max_seconds, as every race did before
    plain = parse_tuner_config("name: x\nfinal: {max_seconds: 45}\n").final
    assert plain.seconds_for(RESTART_STAGE) == 45
    assert parse_tuner_config("name: x\n").final.seconds_for(RESTART_STAGE) is None
    msg = _error("name: x\nfinal:\n  restart_seconds: 0\n")
    assert "configs/bad.yaml, line 3" in msg and "restart_seconds" in msg and "0" in msg, msg
