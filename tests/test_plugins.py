"""The agg, cache and log plugins, and the plugin registry."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plugin_support import SessionView

import plugins
from harmony_base.errors import ConfigError
from harmony_base.space import EnumParam, IntParam, RealParam, Space
from plugins.agg import AggregatePlugin, aggregate
from plugins.base import Flow, HistoryEntry, Plugin, PluginTrial, make_plugin
from plugins.cache import CachePlugin
from plugins.log import LogPlugin, read_log

SPACE = Space((IntParam("work_mem", 1, 64), RealParam("random_page_cost", 0.5, 8.0, 0.5),
               EnumParam("jit", ("on", "off"))))


def test_every_plugin_class_is_registered() -> None:
    def concrete(cls: type[Plugin]) -> list[type[Plugin]]:
        return [c for sub in cls.__subclasses__() for c in (sub, *concrete(sub))]

    names = {c.name for c in concrete(Plugin) if c.__module__.startswith("plugins.")}
    assert names == {"agg", "cache", "constraint", "log"}
    assert all(Plugin.registry[n].name == n for n in names)
    assert plugins.AggregatePlugin is Plugin.registry["agg"]


def test_unknown_plugin_and_unknown_options_are_config_errors() -> None:
    session = SessionView(SPACE)
    with pytest.raises(ConfigError, match="unknown plugin 'agregate'"):
        make_plugin("agregate", session)
    with pytest.raises(ConfigError, match=r"plugin 'agg': unknown option\(s\) \['time'\]; "
                                          r"allowed: \['how', 'retry_failures', 'times'\]"):
        make_plugin("agg", session, time=3)
    with pytest.raises(ConfigError, match="'times' must be an integer >= 1, got 0"):
        make_plugin("agg", session, times=0)
    with pytest.raises(ConfigError, match="'how' must be one of"):
        make_plugin("agg", session, how="average")
    with pytest.raises(ConfigError, match="'reject_hint' must be one of"):
        make_plugin("constraint", session, constraints=["work_mem <= 3"], reject_hint="snap")
    with pytest.raises(ConfigError, match="prior file .* does not exist"):
        make_plugin("cache", session, prior="/nonexistent/prior.csv")


# -- agg --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("how", "maximize", "samples", "expected"), [
    ("min", False, [3.0, 1.0, 2.0], 1.0),
    ("max", False, [3.0, 1.0, 2.0], 3.0),
    ("mean", False, [3.0, 1.0, 2.0, 6.0], 3.0),
    ("median", False, [3.0, 1.0, 2.0], 2.0),
    ("median", False, [4.0, 1.0, 3.0, 10.0], 3.5),  # even count: mean of the two middle values
    ("median", False, [5.0, 1.0], 3.0),
    ("best", True, [120.0, 140.0, 130.0], 140.0),
    ("best", False, [120.0, 140.0, 130.0], 120.0),
])
def test_aggregates(how: str, maximize: bool, samples: list[float], expected: float) -> None:
    assert aggregate(samples, how, maximize) == expected


def run_agg(plugin: Plugin, measurements: list[float | str]) -> tuple[list[Flow], PluginTrial]:
    """Feed one candidate's measurements to ``analyze`` the way the session core does."""
    flows, samples = [], []
    trial = PluginTrial(candidate=7, point={"work_mem": 4})
    for m in measurements:
        if isinstance(m, str):
            trial = PluginTrial(candidate=7, point={"work_mem": 4}, failure=m,
                                samples=list(samples))
        else:
            samples.append(m)
            trial = PluginTrial(candidate=7, point={"work_mem": 4}, value=m, samples=list(samples))
        flows.append(plugin.analyze(trial).flow)
    return flows, trial


@pytest.mark.parametrize("times", [1, 2, 3, 5])
def test_agg_retries_exactly_times_minus_one(times: int) -> None:
    plugin = make_plugin("agg", SessionView(SPACE, maximize=True), times=times)
    values = [100.0 + 10 * i for i in range(times)]
    flows, trial = run_agg(plugin, values)
    assert flows == [Flow.RETRY] * (times - 1) + [Flow.ACCEPT]
    assert isinstance(plugin, AggregatePlugin) and plugin.retries == times - 1
    assert trial.value == max(values)  # best of a maximised objective


def test_agg_median_of_four_replaces_the_value() -> None:
    plugin = make_plugin("agg", SessionView(SPACE), times=4, how="median")
    flows, trial = run_agg(plugin, [9.0, 1.0, 4.0, 6.0])
    assert flows[-1] is Flow.ACCEPT and trial.value == 5.0


def test_agg_failure_fails_the_candidate_unless_retried() -> None:
    plain = make_plugin("agg", SessionView(SPACE), times=3)
    flows, trial = run_agg(plain, [5.0, "timeout"])
    assert flows == [Flow.RETRY, Flow.ACCEPT] and trial.failure == "timeout"
    patient = make_plugin("agg", SessionView(SPACE), times=3, how="mean", retry_failures=1)
    flows, trial = run_agg(patient, [5.0, "timeout", 7.0, 9.0])
    assert flows == [Flow.RETRY, Flow.RETRY, Flow.RETRY, Flow.ACCEPT] and trial.value == 7.0
    flows, trial = run_agg(patient, [5.0, "boom", "boom again"])
    assert flows[-1] is Flow.ACCEPT and trial.failure == "boom again"


# -- cache ------------------------------------------------------------------------------------
def test_cache_returns_a_previously_measured_value() -> None:
    session = SessionView(SPACE, entries=[
        HistoryEntry({"work_mem": 4, "random_page_cost": 1.5, "jit": "on"}, 120.5),
        HistoryEntry({"work_mem": 8, "random_page_cost": 2.0, "jit": "off"}, None, "crashed"),
    ])
    cache = make_plugin("cache", session)
    cache.init(SPACE)
    hit = cache.generate(PluginTrial(0, {"work_mem": 4, "random_page_cost": 1.5, "jit": "on"}))
    assert hit.flow is Flow.RETURN and hit.value == 120.5
    # failures are measured again; unknown points too
    assert cache.generate(PluginTrial(1, {"work_mem": 8, "random_page_cost": 2.0,
                                          "jit": "off"})).flow is Flow.ACCEPT
    assert cache.generate(PluginTrial(2, {"work_mem": 4, "random_page_cost": 1.5,
                                          "jit": "off"})).flow is Flow.ACCEPT
    # history grows: the new entry is answered too, the first value of a point wins
    session.entries.append(HistoryEntry({"work_mem": 5, "random_page_cost": 0.5, "jit": "on"}, 9.0))
    session.entries.append(HistoryEntry({"work_mem": 4, "random_page_cost": 1.5, "jit": "on"}, 1.0))
    assert cache.generate(PluginTrial(3, {"work_mem": 5, "random_page_cost": 0.5,
                                          "jit": "on"})).value == 9.0
    assert cache.generate(PluginTrial(4, {"work_mem": 4, "random_page_cost": 1.5,
                                          "jit": "on"})).value == 120.5
    assert isinstance(cache, CachePlugin) and cache.hits == 3


def test_cache_reads_prior_csv_and_log_files(tmp_path: Path) -> None:
    csv_path = tmp_path / "prior.csv"
    csv_path.write_text("work_mem,random_page_cost,jit,value\n"
                        "4,1.5,on,77.25\n"
                        "4.5,1.5,on,1.0\n"  # off the integer grid: skipped
                        "6,2,off,\n"  # no value: skipped
                        "6,2,off,33\n")
    cache = make_plugin("cache", SessionView(SPACE), prior=str(csv_path))
    cache.init(SPACE)
    assert cache.generate(PluginTrial(0, {"work_mem": 4, "random_page_cost": 1.5,
                                          "jit": "on"})).value == 77.25
    assert cache.generate(PluginTrial(1, {"work_mem": 6, "random_page_cost": 2.0,
                                          "jit": "off"})).value == 33.0

    log_path = tmp_path / "run.log"
    writer = make_plugin("log", SessionView(SPACE, name="earlier"), path=str(log_path))
    writer.analyze(PluginTrial(0, {"work_mem": 10, "random_page_cost": 4.0, "jit": "off"},
                               value=250.0, client="c1", samples=[250.0]))
    writer.analyze(PluginTrial(1, {"work_mem": 11, "random_page_cost": 4.0, "jit": "off"},
                               failure="timeout", client="c1"))
    cache = make_plugin("cache", SessionView(SPACE), prior=str(log_path))
    cache.init(SPACE)
    assert cache.generate(PluginTrial(0, {"work_mem": 10, "random_page_cost": 4.0,
                                          "jit": "off"})).value == 250.0
    assert cache.generate(PluginTrial(1, {"work_mem": 11, "random_page_cost": 4.0,
                                          "jit": "off"})).flow is Flow.ACCEPT


def test_cache_rejects_a_csv_without_value_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("work_mem,throughput\n4,1\n")
    cache = make_plugin("cache", SessionView(SPACE), prior=str(path))
    with pytest.raises(ConfigError, match="needs a header with the parameter columns and 'value'"):
        cache.init(SPACE)


# -- log --------------------------------------------------------------------------------------
def test_log_writes_one_parseable_line_per_trial(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "session.log"
    session = SessionView(SPACE, name="tpch-online")
    log = make_plugin("log", session, path=str(path))
    trials = [
        PluginTrial(0, {"work_mem": 4, "random_page_cost": 1.5, "jit": "on"}, value=101.5,
                    client="c1", samples=[101.5]),
        PluginTrial(0, {"work_mem": 4, "random_page_cost": 1.5, "jit": "on"}, value=99.0,
                    client="c2", samples=[101.5, 99.0]),
        PluginTrial(1, {"work_mem": 9, "random_page_cost": 2.0, "jit": "off"}, failure="timeout",
                    client="c1"),
    ]
    for t in trials:
        assert log.analyze(t).flow is Flow.ACCEPT
        # flushed per line: the file already holds every line written so far
        assert len(path.read_text().splitlines()) == trials.index(t) + 1
    session.replaying = True  # a replay after a crash must not log the trials twice
    log.analyze(trials[0])
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and isinstance(log, LogPlugin) and log.lines == 3
    records = [json.loads(line) for line in lines]
    assert [r["value"] for r in records] == [101.5, 99.0, None]
    assert [r["failure"] for r in records] == [None, None, "timeout"]
    assert [r["client"] for r in records] == ["c1", "c2", "c1"]
    assert [r["candidate"] for r in records] == [0, 0, 1]
    assert records[1]["point"] == {"work_mem": 4, "random_page_cost": 1.5, "jit": "on"}
    assert {r["session"] for r in records} == {"tpch-online"}
    assert all(r["time"].endswith("+00:00") for r in records)
    assert list(read_log(path)) == records
    # append-only: a second plugin on the same file adds lines after the existing ones
    again = make_plugin("log", SessionView(SPACE, name="next"), path=str(path))
    again.analyze(trials[0])
    assert [r["session"] for r in read_log(path)] == ["tpch-online"] * 3 + ["next"]
