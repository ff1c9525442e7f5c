"""``harmony validate FILE...``: check session definitions without running anything."""

from __future__ import annotations

import argparse
import json

from harmony.base.errors import ConfigError, ConstraintError
from harmony.core.definition import load_definition
from harmony.core.session import SessionCore


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate", help="validate session definition YAML files",
        description="Validate session definitions against the schema, build their strategy and "
                    "plugins, and print the (possibly constraint-narrowed) search space.")
    parser.add_argument("files", nargs="+", help="session definition YAML files")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(func=run_validate)


def run_validate(args: argparse.Namespace) -> int:
    results = []
    for path in args.files:
        definition = load_definition(path)
        try:
            core = SessionCore(definition)
        except ConstraintError as exc:  # bad input like any other: exit 2, naming the file
            raise ConfigError(f"{path}: {exc}") from None
        results.append({"file": path, "name": definition.name, "strategy": definition.strategy,
                        "plugins": [p.name for p in definition.plugins],
                        "space": core.space.to_dict()})
        core.close()
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            print(f"{r['file']}: ok — session {r['name']!r}, strategy {r['strategy']}, "
                  f"plugins {r['plugins'] or 'none'}")
            for p in r["space"]:
                if p["type"] == "enum":
                    rng = str(p.get("values"))
                else:
                    rng = f"{p['min']}..{p['max']} step {p['step']}"
                print(f"    {p['name']:<24} {p['type']:<5} {rng}")
    return 0
