"""``harmony validate FILE...``: check session definitions and tuner configs without running
anything.

A file is a tuner config when its top level has a tuner section (``database``, ``workload``,
``online`` …), else a session definition. A tuner config is checked as ``harmony tune`` would
read it (schema, units, ranges; file:line:key errors), then its knobs against the catalog of
the configured server (when it does not answer, only the schema is checked, and the output
says so: another server's catalog would be another version's) and its ranges against the
memory budget: a knob no value of which fits the budget is an error. The options
are in :mod:`harmony.cli.validate_parser`, which imports this module only when it runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harmony_base.errors import ConfigError, ConstraintError, DatabaseError
from harmony_core.definition import load_definition, load_yaml_with_lines
from harmony_core.session import SessionCore
from tuner_client.config import load_tuner_config
from tuner_client.config.schema import TUNER_SCHEMA
from tuner_client.plan.planner import make_plan

#: top-level keys only a tuner config has
TUNER_KEYS = frozenset(TUNER_SCHEMA["properties"]) - {"name", "description", "seed", "server"}


def is_tuner_config(path: str | Path) -> bool:
    """Whether ``path`` holds a tuner config (a top-level tuner section) rather than a session
    definition."""
    data, _ = load_yaml_with_lines(path)
    return isinstance(data, dict) and bool(TUNER_KEYS & set(data))


def run_validate(args: argparse.Namespace) -> int:
    results = [validate_tuner_config(path) if is_tuner_config(path)
               else validate_definition(path) for path in args.files]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    for r in results:
        if r["kind"] == "tuner config":
            print(f"{r['file']}: ok — tuner config {r['name']!r} checked against "
                  f"{r['checked_against']}")
            for k in r["knobs"]:
                print(f"    {k['phase']:<8} {k['name']:<32} {k['after_budget']}")
            for note in r["notes"]:
                print(f"    note: {note}")
            continue
        print(f"{r['file']}: ok — session {r['name']!r}, strategy {r['strategy']}, "
              f"plugins {r['plugins'] or 'none'}")
        for p in r["space"]:
            if p["type"] == "enum":
                rng = str(p.get("values"))
            else:
                rng = f"{p['min']}..{p['max']} step {p['step']}"
            print(f"    {p['name']:<24} {p['type']:<5} {rng}")
    return 0


def validate_definition(path: str) -> dict[str, Any]:
    definition = load_definition(path)
    try:
        core = SessionCore(definition)
    except ConstraintError as exc:  # bad input like any other: exit 2, naming the file
        raise ConfigError(f"{path}: {exc}") from None
    try:
        return {"file": path, "kind": "session definition", "name": definition.name,
                "strategy": definition.strategy,
                "plugins": [p.name for p in definition.plugins], "space": core.space.to_dict()}
    finally:
        core.close()


def validate_tuner_config(path: str) -> dict[str, Any]:
    config = load_tuner_config(path)
    try:
        plan = make_plan(config)
    except DatabaseError as exc:
        if config.database.dsn is None:
            raise
        # the knobs a server has depend on its version: never another server's catalog
        return {"file": path, "kind": "tuner config", "name": config.name,
                "checked_against": f"nothing: the configured server did not answer, so the "
                                   f"knob names, units and ranges and the memory budget were "
                                   f"not checked (schema only): {str(exc).splitlines()[0]}",
                "server_reached": False, "knobs": [], "notes": []}
    empty = [k for k in plan.knobs if k.after_budget.startswith("none fits")]
    if empty:
        raise ConfigError(f"{path}: {', '.join(k.phase + '.knobs.' + k.name for k in empty)}: "
                          f"no value in the range fits the memory budget ({plan.budget}); "
                          f"narrow the range or raise budget.ram / budget.online")
    version = f"PostgreSQL {plan.server_version}" if plan.server_version else "PostgreSQL"
    return {"file": path, "kind": "tuner config", "name": config.name,
            "checked_against": f"{version} at {plan.target}", "server_reached": True,
            "knobs": [{"phase": k.phase, "name": k.name, "configured": k.configured,
                       "after_budget": k.after_budget} for k in plan.knobs],
            "notes": [n for n in plan.notes if not n.startswith("no workload statistics")]}
