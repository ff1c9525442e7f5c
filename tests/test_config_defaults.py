"""Defaults and units are stated once: a config without a section is that section's dataclass."""

from __future__ import annotations

from dataclasses import fields, replace
from fractions import Fraction

import pytest

from harmony_base import units
from harmony_base.errors import ConfigError
from tuner_client import budget
from tuner_client.config import (
    BudgetConfig,
    DatabaseConfig,
    FinalConfig,
    FlowConfig,
    MeasureConfig,
    ScreeningConfig,
    WarmStartConfig,
    WorkloadConfig,
    parse_bytes,
    parse_tuner_config,
)
from tuner_client.config.model import OFFLINE_SESSION, ONLINE_SESSION
from tuner_client.knobs import catalog as knobs
from tuner_client.metrics import exporter as metrics


def test_an_empty_config_is_every_dataclass_default() -> None:
    cfg = parse_tuner_config("name: x\n")
    assert cfg.database == DatabaseConfig()
    assert cfg.workload == WorkloadConfig()
    # the estimator follows the workload (progress for TPC-H); the dataclass keeps count, which
    # every workload's driver supports
    assert cfg.measure == replace(MeasureConfig(), estimator="progress")
    assert cfg.budget == BudgetConfig()
    assert cfg.flow == FlowConfig()
    assert cfg.final == FinalConfig()
    assert cfg.screening == ScreeningConfig()
    assert cfg.warm_start == WarmStartConfig()
    assert cfg.offline == replace(OFFLINE_SESSION, knobs=cfg.offline.knobs)
    assert cfg.online == replace(ONLINE_SESSION, knobs=cfg.online.knobs)
    # the numbers the README states
    assert (cfg.offline.evaluations, cfg.online.evaluations) == (6, 30)
    assert (cfg.offline.prior, cfg.online.prior) == (True, False)
    assert dict(cfg.offline.strategy_options) == {"simplex_size": 2}
    assert dict(cfg.online.strategy_options) == {"simplex_size": 6, "combine": True}


def test_the_default_flow_is_one_the_parser_accepts() -> None:
    default = FlowConfig()
    assert (default.kind, default.max_passes) == ("one-pass", 1)
    text = f"name: x\nflow: {{kind: {default.kind}, max_passes: {default.max_passes}}}\n"
    assert parse_tuner_config(text).flow == default
    multi = parse_tuner_config("name: x\nflow: {kind: multi-pass}\n").flow
    assert multi.max_passes == FlowConfig.MULTI_PASS_MAX_PASSES == 3
    with pytest.raises(ConfigError, match="one-pass flow makes exactly one pass"):
        parse_tuner_config("name: x\nflow: {kind: one-pass, max_passes: 3}\n")


def test_pgbench_defaults() -> None:
    wl = parse_tuner_config("name: x\nworkload: {pgbench: {}}\n").workload
    assert (wl.kind, wl.scale, wl.clients) == ("pgbench", WorkloadConfig.PGBENCH_SCALE, 4)


def test_every_session_field_has_one_stated_default() -> None:
    for base in (OFFLINE_SESSION, ONLINE_SESSION):
        assert base.knobs == ()
    differing = {f.name for f in fields(OFFLINE_SESSION)
                 if getattr(OFFLINE_SESSION, f.name) != getattr(ONLINE_SESSION, f.name)}
    assert differing == {"strategy_options", "evaluations", "prior"}


def test_units_are_one_table() -> None:
    assert knobs.MEMORY_UNITS is units.MEMORY_UNITS
    assert knobs.TIME_UNITS_MS is units.TIME_UNITS_MS
    assert budget.UNIT_BYTES is units.MEMORY_UNITS
    assert units.TIME_UNITS_MS["min"] == Fraction(60_000)
    assert parse_bytes("2gb", what="x") == 2 * units.MEMORY_UNITS["GB"]
    assert metrics.setting_to_base_units("250ms") == pytest.approx(0.25)
    assert metrics.setting_to_base_units("2TB") == 2.0 * 1024**4
    assert units.unit_size("KB") is None and units.unit_size("h") == ("time", 3600.0)
