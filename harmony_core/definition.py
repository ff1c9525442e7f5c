"""Session definitions: the JSON Schema, validation with file/line errors, and the frozen object.

A definition is what a YAML file in ``configs/`` holds and what the server stores: name,
parameters, strategy and options, plugins in order, constraints, objective, seed.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harmony_base.errors import ConfigError
from harmony_base.jsontypes import JSON, JSONObject
from harmony_base.space import Space, space_from_dicts

#: the largest magnitude of a parameter's min, max and step: every integer up to it is exact in
#: a double and in JSON, so an int parameter never hands out a float
MAX_BOUND = 1e15
#: the shortest and longest lease a session may give a trial (seconds)
MIN_LEASE_SECONDS = 0.1
MAX_LEASE_SECONDS = 86400.0
DEFAULT_LEASE_SECONDS = 300.0
DEFAULT_STRATEGY = "nelder-mead"

_NUMBER = {"type": "number", "minimum": -MAX_BOUND, "maximum": MAX_BOUND}
_PARAM_SCHEMA: dict[str, object] = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1, "pattern": r"^[A-Za-z_][A-Za-z0-9_.]*$"},
        "type": {"enum": ["int", "real", "enum"]},
        "min": _NUMBER,
        "max": _NUMBER,
        "step": _NUMBER,
        "log": {"type": "boolean"},
        "values": {"type": "array", "minItems": 1,
                   "items": {"type": ["string", "number", "boolean"]}},
        "default": {"type": ["string", "number", "boolean", "null"]},
        "unit": {"type": ["string", "null"]},
    },
    "allOf": [
        {"if": {"properties": {"type": {"const": "enum"}}, "required": ["type"]},
         "then": {"required": ["values"]},
         "else": {"required": ["min", "max"]}},
    ],
}
_PLUGIN_SCHEMA: JSONObject = {
    "oneOf": [
        {"type": "string", "minLength": 1},
        {"type": "object", "required": ["name"], "additionalProperties": False,
         "properties": {"name": {"type": "string", "minLength": 1},
                        "options": {"type": "object"}}},
    ]
}

#: The schema of a session definition (unknown keys are rejected everywhere).
SESSION_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Harmony session definition",
    "type": "object",
    "required": ["name", "parameters"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 200,
                 "pattern": r"^[A-Za-z0-9_.:-]+$"},
        "description": {"type": "string", "default": ""},
        "parameters": {"type": "array", "minItems": 1, "items": _PARAM_SCHEMA},
        "strategy": {
            "default": DEFAULT_STRATEGY,
            "oneOf": [
                {"type": "string", "minLength": 1},
                {"type": "object", "required": ["name"], "additionalProperties": False,
                 "properties": {"name": {"type": "string", "minLength": 1},
                                "options": {"type": "object"}}},
            ]
        },
        "plugins": {"type": "array", "items": _PLUGIN_SCHEMA, "default": []},
        "constraints": {"type": "array", "items": {"type": "string", "minLength": 1},
                        "default": []},
        "constants": {"type": "object", "additionalProperties": {"type": "number"}},
        "objective": {
            "type": "object", "additionalProperties": False,
            "properties": {"name": {"type": "string", "default": "value"},
                           "goal": {"enum": ["minimize", "maximize"], "default": "minimize"}},
        },
        "seed": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1, "default": 0},
        "lease_seconds": {"type": "number", "minimum": MIN_LEASE_SECONDS,
                          "maximum": MAX_LEASE_SECONDS, "default": DEFAULT_LEASE_SECONDS},
        "metadata": {"type": "object", "default": {}},
    },
}


@dataclass(frozen=True)
class PluginSpec:
    """A plugin name and its options, in the order the session lists them."""

    name: str
    options: Mapping[str, JSON] = field(default_factory=dict)


@dataclass(frozen=True)
class SessionDefinition:
    """One tuning task: a space, a strategy, plugins, an objective direction, a seed."""

    name: str
    space: Space
    strategy: str = DEFAULT_STRATEGY
    strategy_options: Mapping[str, Any] = field(default_factory=dict)
    plugins: tuple[PluginSpec, ...] = ()
    maximize: bool = False
    objective: str = "value"
    seed: int = 0
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    metadata: Mapping[str, Any] = field(default_factory=dict)
    description: str = ""

    def to_dict(self) -> JSONObject:
        """The JSON-ready form; :meth:`from_dict` of it gives an equal definition."""
        params = []
        for item in self.space.to_dict():
            params.append({k: v for k, v in item.items() if v is not None and v is not False})
        out: JSONObject = {
            "name": self.name,
            "parameters": params,
            "strategy": {"name": self.strategy,
                         "options": copy.deepcopy(dict(self.strategy_options))},
            "plugins": [{"name": p.name, "options": copy.deepcopy(dict(p.options))}
                        for p in self.plugins],
            "objective": {"name": self.objective,
                          "goal": "maximize" if self.maximize else "minimize"},
            "seed": self.seed,
            "lease_seconds": self.lease_seconds,
            "metadata": copy.deepcopy(dict(self.metadata)),
        }
        if self.description:
            out["description"] = self.description
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "session definition",
                  lines: Mapping[tuple[object, ...], int] | None = None) -> SessionDefinition:
        """Validate ``data`` against :data:`SESSION_SCHEMA` and build the definition.

        ``source`` names the file in error messages; ``lines`` maps key paths to line numbers.
        """
        _check_finite(data, source=source, lines=lines)
        validate(data, SESSION_SCHEMA, source=source, lines=lines)
        try:
            space = space_from_dicts(data["parameters"])
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc}") from None
        strategy = data.get("strategy", DEFAULT_STRATEGY)
        if isinstance(strategy, str):
            strategy_name, strategy_options = strategy, {}
        else:
            strategy_name, strategy_options = strategy["name"], dict(strategy.get("options", {}))
        plugins: list[PluginSpec] = []
        for item in data.get("plugins", []):
            if isinstance(item, str):
                plugins.append(PluginSpec(item, {}))
            else:
                plugins.append(PluginSpec(item["name"], dict(item.get("options", {}))))
        constraints = list(data.get("constraints", []))
        if constraints:
            if any(p.name == "constraint" for p in plugins):
                raise ConfigError(f"{source}: give constraints either under 'constraints' or in "
                                  f"the 'constraint' plugin's options, not both")
            # constraints go first so that no later plugin ever sees an infeasible point
            plugins.insert(0, PluginSpec("constraint", {
                "constraints": constraints, "constants": dict(data.get("constants", {}))}))
        elif data.get("constants"):
            raise ConfigError(f"{source}: 'constants' given without 'constraints'")
        objective = data.get("objective", {})
        return cls(
            name=data["name"],
            space=space,
            strategy=strategy_name,
            strategy_options=strategy_options,
            plugins=tuple(plugins),
            maximize=objective.get("goal", "minimize") == "maximize",
            objective=objective.get("name", "value"),
            seed=int(data.get("seed", 0)),
            lease_seconds=float(data.get("lease_seconds", DEFAULT_LEASE_SECONDS)),
            metadata=dict(data.get("metadata", {})),
            description=data.get("description", ""),
        )



def validate(data: object, schema: Mapping[str, JSON], *, source: str,
             lines: Mapping[tuple[object, ...], int] | None = None) -> None:
    """Raise :class:`ConfigError` naming the file, line and key of the first schema violation."""
    validator = jsonschema.Draft202012Validator(schema)
    # at one key path an unknown key comes first: 'paramters' is a typo, not a missing key
    errors = sorted(validator.iter_errors(data),
                    key=lambda e: (len(e.path), list(map(str, e.path)),
                                   e.validator != "additionalProperties"))
    if not errors:
        return
    err = _most_specific(errors[0])
    path = tuple(err.absolute_path)
    where = source
    line = _line_for(path, lines)
    if line is not None:
        where += f", line {line}"
    key = ".".join(str(p) for p in path) or "(top level)"
    if err.validator == "additionalProperties":
        extra = sorted(set(err.instance) - set(err.schema.get("properties", {})))
        line = _line_for(path + (extra[0],), lines) if extra else line
        where = source + (f", line {line}" if line is not None else "")
        allowed = sorted(err.schema.get("properties", {}))
        raise ConfigError(f"{where}: unknown key {extra[0]!r} in {key}; allowed keys: {allowed}")
    raise ConfigError(f"{where}: {key}: {err.message}")


def _check_finite(data: object, *, source: str,
                  lines: Mapping[tuple[object, ...], int] | None) -> None:
    """:class:`ConfigError` naming the key of a NaN or infinity anywhere in ``data`` (YAML
    has ``.nan`` and ``.inf``; JSON answers cannot carry them)."""
    stack: list[tuple[tuple[object, ...], object]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, Mapping):
            stack.extend((path + (k,), v) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((path + (i,), v) for i, v in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            line = _line_for(path, lines)
            where = source + (f", line {line}" if line is not None else "")
            key = ".".join(map(str, path)) or "(top level)"
            raise ConfigError(f"{where}: {key} must be a finite number, got {value!r}")


def _most_specific(err: jsonschema.ValidationError) -> jsonschema.ValidationError:
    # oneOf/anyOf errors hide the useful message in their context, where one alternative got
    # further into the value; when none did, the alternatives' own message says more
    while err.context:
        deeper = max(err.context, key=lambda e: len(e.absolute_path))
        if len(deeper.absolute_path) == len(err.absolute_path) and len(err.context) > 1:
            return err
        err = deeper
    return err


def _line_for(path: tuple[object, ...],
              lines: Mapping[tuple[object, ...], int] | None) -> int | None:
    if not lines:
        return None
    while path not in lines and path:
        path = path[:-1]
    return lines.get(path)


def load_yaml_with_lines(path: str | Path) -> tuple[object, dict[tuple[object, ...], int]]:
    """Parse a YAML file; return the data and a map from key paths to 1-based line numbers."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {p}: {exc.strerror}") from None
    return parse_yaml_with_lines(text, source=str(p))


def parse_yaml_with_lines(text: str, *, source: str
                          ) -> tuple[object, dict[tuple[object, ...], int]]:
    """Like :func:`load_yaml_with_lines` for a string."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f", line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{source}{where}: malformed YAML: {problem}") from None
    lines: dict[tuple[object, ...], int] = {}

    def walk(n: Any, prefix: tuple[object, ...]) -> None:
        if n is None:
            return
        lines[prefix] = n.start_mark.line + 1
        if isinstance(n, yaml.MappingNode):
            for k, v in n.value:
                key = k.value
                lines[prefix + (key,)] = k.start_mark.line + 1
                walk(v, prefix + (key,))
                lines[prefix + (key,)] = k.start_mark.line + 1
        elif isinstance(n, yaml.SequenceNode):
            for i, v in enumerate(n.value):
                walk(v, prefix + (i,))

    walk(node, ())
    return data, lines


def load_definition(path: str | Path) -> SessionDefinition:
    """Load and validate a session definition YAML file."""
    data, lines = load_yaml_with_lines(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a session definition must be a mapping at the top level")
    return SessionDefinition.from_dict(data, source=str(path), lines=lines)
