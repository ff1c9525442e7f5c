"""The one registry pattern behind strategies, plugins and controllers."""

from __future__ import annotations

from typing import Any

import pytest

from harmony_base.errors import ConfigError
from harmony_base.registry import Registry
from plugins.base import Plugin, make_plugin
from tuner_client.servers.controllers import CommandController, Controller, make_controller


class _Base:
    registry: Registry[_Base] = Registry("widget")

    def __init_subclass__(cls, name: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if name is not None:
            _Base.registry.add(name, cls)


class _Sized(_Base, name="sized"):
    def __init__(self, size: int, *, colour: str = "red") -> None:
        self.size, self.colour = size, colour


class _Broken(_Base, name="broken"):
    def __init__(self, size: int) -> None:
        # a bug inside the constructor, not a bad option from the user
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")


def test_build_binds_arguments_and_names_bad_options() -> None:
    built = _Base.registry.build("sized", 3, colour="blue")
    assert isinstance(built, _Sized) and (built.size, built.colour) == (3, "blue")
    with pytest.raises(ConfigError, match=r"widget 'sized': bad options \['shape'\]"):
        _Base.registry.build("sized", 3, shape="round")
    with pytest.raises(ConfigError, match="widget 'sized': bad options"):
        _Base.registry.build("sized")  # the required argument is missing
    with pytest.raises(ConfigError,
                       match="unknown widget 'sprocket'; known: broken, forwarding, sized"):
        _Base.registry.build("sprocket")


def test_a_type_error_inside_a_constructor_is_not_the_users_bad_options() -> None:
    with pytest.raises(TypeError, match="unsupported operand"):
        _Base.registry.build("broken", 1)


def test_a_second_class_under_a_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="widget 'sized' is registered twice"):
        class _Other(_Base, name="sized"):
            pass
    assert _Base.registry["sized"] is _Sized
    _Base.registry.add("sized", _Sized)  # the same class again (a re-import) is fine


def test_plugins_and_controllers_use_it() -> None:
    assert isinstance(Plugin.registry, Registry) and isinstance(Controller.registry, Registry)
    assert {"agg", "constraint", "cache", "log"} <= set(Plugin.registry)
    assert {"local", "pg_ctl", "docker", "command"} <= set(Controller.registry)
    with pytest.raises(ConfigError, match="unknown controller kind 'systemd'"):
        make_controller("systemd")
    with pytest.raises(ConfigError, match="controller kind 'command': bad options"):
        make_controller("command", dsn="host=127.0.0.1", reboot="now")
    with pytest.raises(ConfigError, match="unknown plugin 'agregate'"):
        make_plugin("agregate", None)  # type: ignore[arg-type]


def test_a_type_error_inside_a_controller_constructor_propagates() -> None:
    class _Faulty(CommandController, kind="faulty-for-test"):
        def __init__(self, dsn: str) -> None:
            raise TypeError("a bug in the controller")

    try:
        with pytest.raises(TypeError, match="a bug in the controller"):
            make_controller("faulty-for-test", dsn="host=127.0.0.1")
    finally:
        del Controller.registry["faulty-for-test"]


class _Forwarding(_Sized, name="forwarding"):
    """Takes one option of its own and forwards the rest to _Sized (as the simplex
    strategies forward theirs to SimplexStrategy)."""

    def __init__(self, size: int, *, shade: int = 1, **options: Any) -> None:
        super().__init__(size, **options)
        self.shade = shade


def test_options_forwarded_through_kwargs_are_bound_up_the_hierarchy() -> None:
    built = _Base.registry.build("forwarding", 3, shade=2, colour="blue")
    assert (built.size, built.colour, built.shade) == (3, "blue", 2)  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"widget 'forwarding': bad options .*'flavour'"):
        _Base.registry.build("forwarding", 3, flavour="sour")


def test_a_strategy_named_with_an_unknown_option_is_a_config_error() -> None:
    from harmony_base.space import IntParam, Space
    from strategies.base import make_strategy

    space = Space((IntParam("x", 0, 10),))
    with pytest.raises(ConfigError, match=r"strategy 'nelder-mead': bad options.*colour"):
        make_strategy("nelder-mead", space, colour="red")
    assert make_strategy("pro", space, seed=2, max_evals=5).ask() is not None
