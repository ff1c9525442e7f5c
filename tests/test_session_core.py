"""The session core: hand-outs, reports by trial id, plugins in order, sign handling, replay."""

from __future__ import annotations

import pytest

from harmony_base.errors import ConfigError, TrialError
from harmony_base.space import IntParam, Space
from harmony_core.definition import PluginSpec, SessionDefinition
from harmony_core.session import SessionCore

SPACE = Space((IntParam("x", -5, 5), IntParam("y", -5, 5)))


def sphere(point: dict) -> float:
    return float(point["x"] ** 2 + point["y"] ** 2)


def _definition(**kw) -> SessionDefinition:
    base = dict(name="s", space=SPACE, strategy="exhaustive", seed=3)
    base.update(kw)
    return SessionDefinition(**base)


def test_exhaustive_through_the_core_finds_the_minimum_and_counts_each_point_once() -> None:
    core = SessionCore(_definition())
    seen = []
    while (a := core.fetch("c1")) is not None:
        seen.append(tuple(a.point.values()))
        assert core.report(a.trial_id, sphere(a.point)) is True
    assert len(seen) == 121 and len(set(seen)) == 121
    assert core.best() == ({"x": 0, "y": 0}, 0.0)
    assert core.counts()["done"] == 121


def test_maximised_objective_keeps_its_own_sign() -> None:
    core = SessionCore(_definition(maximize=True))
    while (a := core.fetch("c")) is not None:
        core.report(a.trial_id, -sphere(a.point))
    point, value = core.best()
    assert point == {"x": 0, "y": 0} and value == 0.0
    # the worst value is -50: a maximised session must not pick it
    assert min(t.value for t in core.trials()) == -50.0


def test_duplicate_report_is_ignored_and_unknown_trial_raises() -> None:
    core = SessionCore(_definition())
    a = core.fetch("c")
    assert core.report(a.trial_id, 7.0) is True
    assert core.report(a.trial_id, 1.0) is False
    assert core.trials()[0].value == 7.0
    assert len(core.history()) == 1
    with pytest.raises(TrialError, match="no trial 999"):
        core.report(999, 1.0)


def test_non_finite_value_marks_the_trial_failed() -> None:
    core = SessionCore(_definition())
    a = core.fetch("c")
    core.report(a.trial_id, float("nan"))
    record = core.trial(a.trial_id)
    assert record.status == "failed" and "non-finite" in record.failure
    assert core.best() is None


def test_released_trial_is_handed_out_again_before_new_points() -> None:
    core = SessionCore(_definition())
    first = core.fetch("dead-client")
    core.release(first.trial_id)
    again = core.fetch("live-client")
    assert again.point == first.point and again.trial_id != first.trial_id
    assert core.report(again.trial_id, sphere(again.point))
    # the dead client's late report is kept but never told twice
    assert core.report(first.trial_id, 123.0) is True
    assert len(core.history()) == 1


def test_pause_really_pauses() -> None:
    core = SessionCore(_definition())
    core.pause()
    assert core.fetch("c") is None and core.status == "paused"
    core.resume()
    assert core.fetch("c") is not None and core.status == "running"


def test_agg_measures_three_times_and_tells_the_best() -> None:
    core = SessionCore(_definition(plugins=(PluginSpec("agg", {"times": 3, "how": "min"}),)))
    values = iter([5.0, 2.0, 9.0])
    points = []
    for _ in range(3):
        a = core.fetch("c")
        points.append(a.point)
        core.report(a.trial_id, next(values))
    assert points[0] == points[1] == points[2]
    assert len(core.history()) == 1 and core.history()[0].value == 2.0
    assert core.fetch("c").point != points[0]


def test_constraint_narrows_the_space_and_no_infeasible_point_is_handed_out() -> None:
    definition = _definition(plugins=(PluginSpec("constraint", {"constraints": ["x + 2*y <= 1",
                                                                                "x >= -2"]}),))
    core = SessionCore(definition)
    assert core.space["x"].min == -2
    handed = []
    while (a := core.fetch("c")) is not None:
        handed.append(a.point)
        core.report(a.trial_id, sphere(a.point))
    brute = [(x, y) for x in range(-5, 6) for y in range(-5, 6) if x + 2 * y <= 1 and x >= -2]
    assert sorted((p["x"], p["y"]) for p in handed) == sorted(brute)


def test_replaying_the_same_commands_reproduces_the_same_state() -> None:
    definition = _definition(strategy="random", strategy_options={"max_evals": 40})
    log = []
    core = SessionCore(definition)
    for i in range(30):
        a = core.fetch(f"c{i % 3}")
        log.append(("fetch", f"c{i % 3}"))
        if i % 4 == 3:
            core.release(a.trial_id)
            log.append(("release", a.trial_id))
        else:
            core.report(a.trial_id, sphere(a.point))
            log.append(("report", a.trial_id, sphere(a.point)))
    replay = SessionCore(definition)
    for cmd in log:
        if cmd[0] == "fetch":
            replay.fetch(cmd[1])
        elif cmd[0] == "release":
            replay.release(cmd[1])
        else:
            replay.report(cmd[1], cmd[2])
    assert [t.to_dict() for t in replay.trials()] == [t.to_dict() for t in core.trials()]
    assert replay.best() == core.best()
    assert replay.fetch("z").point == core.fetch("z").point


def test_unknown_strategy_and_plugin_names_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown strategy 'simplex'"):
        SessionCore(_definition(strategy="simplex"))
    with pytest.raises(ConfigError, match="unknown plugin 'agregate'"):
        SessionCore(_definition(plugins=(PluginSpec("agregate", {}),)))
