"""The store belongs to the server: nothing outside ``harmony_server/`` imports it.

The client, the shared core, the plugins, the strategies and the workloads reach a server
only over its HTTP API (or through exported files). Checked on every module's syntax tree,
so an import inside a function counts as much as one at the top; the only mention allowed
is the name of a subcommand module in the ``harmony`` CLI's dispatch table (a string).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: packages that must not import harmony_server
CLIENT_SIDE = ("harmony", "tuner_client", "plugins", "strategies", "workloads")
SERVER = "harmony_server"


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    """Every ``(line, module)`` an ``import`` / ``from ... import`` statement names,
    plus ``importlib.import_module("...")`` / ``__import__("...")`` with a literal name."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args \
                and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                found.append((node.lineno, node.args[0].value))
    return found


def _is_server(module: str) -> bool:
    return module == SERVER or module.startswith(SERVER + ".")


def server_imports(package: str) -> list[str]:
    """``path:line module`` for every import of harmony_server under ``package``."""
    out = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        out += [f"{path.relative_to(ROOT)}:{line} imports {module}"
                for line, module in _imports(tree) if _is_server(module)]
    return out


def test_no_client_side_module_imports_the_server() -> None:
    offenders = [hit for package in CLIENT_SIDE for hit in server_imports(package)]
    assert offenders == [], ("modules outside harmony_server/ import it; read prior data over "
                             "the HTTP API (harmony.priordata_sources) or from exported files:\n"
                             + "\n".join(offenders))
    # the scan does look inside every package: 5 packages, dozens of modules, real imports
    scanned = sum(len(list((ROOT / p).rglob("*.py"))) for p in CLIENT_SIDE)
    assert scanned >= 40


def test_the_cli_dispatch_table_names_server_modules_only_as_strings() -> None:
    """``harmony/cli.py`` lists subcommand modules by dotted name; those strings are the one
    allowed mention of harmony_server, and each of them is a real module with add_parser."""
    import importlib

    from harmony.cli import SUBCOMMAND_MODULES

    server_modules = [m for m in SUBCOMMAND_MODULES if _is_server(m)]
    assert server_modules == ["harmony_server.cli", "harmony_server.report_cli",
                              "harmony_server.priordata_cli"]
    for name in server_modules:
        assert callable(importlib.import_module(name).add_parser)
    tree = ast.parse((ROOT / "harmony" / "cli.py").read_text())
    assert [m for _, m in _imports(tree) if _is_server(m)] == []


def test_the_scan_catches_a_server_import_wherever_it_is() -> None:
    """The checker itself: a top-level, a nested and a dynamic import are all found."""
    source = ("import harmony_server.store\n"
              "def f():\n"
              "    from harmony_server.priordata_store import prior_from_store\n"
              "    import importlib\n"
              "    return importlib.import_module('harmony_server.app')\n"
              "from harmony.priordata import load\n")
    hits = [(line, m) for line, m in _imports(ast.parse(source)) if _is_server(m)]
    assert hits == [(1, "harmony_server.store"), (3, "harmony_server.priordata_store"),
                    (5, "harmony_server.app")]
