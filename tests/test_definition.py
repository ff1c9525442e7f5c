"""Session definitions: schema validation with file/line errors, and round trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from harmony_base.errors import ConfigError
from harmony_core.definition import SessionDefinition, load_definition, parse_yaml_with_lines

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def _load_text(text: str, tmp_path: Path) -> SessionDefinition:
    path = tmp_path / "session.yaml"
    path.write_text(text)
    return load_definition(path)


def test_round_trip_through_dict_is_exact() -> None:
    definition = load_definition(CONFIGS / "synthetic-budget.yaml")
    again = SessionDefinition.from_dict(definition.to_dict())
    assert again == definition
    assert again.maximize is True
    assert [p.name for p in again.plugins] == ["constraint", "agg"]
    assert again.space["maintenance_work_mem"].step == 8


def test_unknown_key_names_file_line_and_key(tmp_path: Path) -> None:
    text = "name: s\nparameters:\n  - {name: x, type: int, min: 0, max: 9}\nstrategey: random\n"
    with pytest.raises(ConfigError) as err:
        _load_text(text, tmp_path)
    msg = str(err.value)
    assert "session.yaml, line 4" in msg and "'strategey'" in msg and "strategy" in msg


def test_unknown_key_inside_a_parameter_points_at_its_line(tmp_path: Path) -> None:
    text = ("name: s\nparameters:\n  - name: x\n    type: int\n    min: 0\n    max: 9\n"
            "    stepp: 2\n")
    with pytest.raises(ConfigError, match=r"line 7.*'stepp'"):
        _load_text(text, tmp_path)


def test_wrong_type_is_reported_with_its_key(tmp_path: Path) -> None:
    text = "name: s\nparameters:\n  - {name: x, type: int, min: zero, max: 9}\n"
    with pytest.raises(ConfigError, match=r"line 3.*parameters.0.min"):
        _load_text(text, tmp_path)


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"session.yaml, line \d+: malformed YAML"):
        _load_text("name: s\nparameters: [\n  {name: x\n", tmp_path)


@pytest.mark.parametrize("param, fragment", [
    ("{name: x, type: int, min: 5, max: 1}", "min must be <= max"),
    ("{name: x, type: int, min: 0, max: 9, step: 0}", "step must be > 0"),
    ("{name: x, type: int, min: 0, max: 9, step: 20}", "larger than the range"),
    ("{name: x, type: real, min: 0, max: 1, log: true}", "log-scaled"),
])
def test_bad_parameter_is_named(tmp_path: Path, param: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as err:
        _load_text(f"name: s\nparameters:\n  - {param}\n", tmp_path)
    assert "'x'" in str(err.value)


def test_constraints_become_the_first_plugin() -> None:
    data, _ = parse_yaml_with_lines(
        "name: s\nparameters: [{name: x, type: int, min: 0, max: 9}]\n"
        "plugins: [agg]\nconstraints: ['x <= 4']\n", source="inline")
    definition = SessionDefinition.from_dict(data)
    assert [p.name for p in definition.plugins] == ["constraint", "agg"]
    assert definition.plugins[0].options["constraints"] == ["x <= 4"]


def test_every_shipped_synthetic_config_validates() -> None:
    files = sorted(CONFIGS.glob("synthetic-*.yaml"))
    assert len(files) >= 3
    for path in files:
        assert load_definition(path).name == path.stem
