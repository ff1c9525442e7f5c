"""The layers hold by construction: import-linter's contracts (``make lint``) see every static
import; this file catches what no static checker sees and what the contracts assume.

* No product module loads one of our modules by a string (``importlib.import_module("x")``,
  ``__import__("x")``): such an import would dodge the layer contracts.
* A module loaded lazily (``LazyModule("x")``, harmony_base/lazy.py) is also imported under
  ``TYPE_CHECKING``, so import-linter and mypy see the edge the string would hide.
* Nothing below the CLI imports ``harmony_server``: the client, the core, the plugins, the
  strategies and the workloads reach a server only over its HTTP API or through exported files.
  Checked on every module's syntax tree, so an import inside a function counts as much as one
  at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: every product package (the CLI included)
PRODUCT = ("harmony", "harmony_base", "harmony_core", "harmony_report",
           "harmony_server", "tuner_client", "plugins", "strategies", "workloads", "bme")
#: what must not import harmony_server (the CLI at the top may)
BELOW_THE_SERVER = ("harmony_base", "harmony_core", "harmony_report", "tuner_client",
                    "plugins", "strategies", "workloads", "bme")
SERVER = "harmony_server"


def _imports(tree: ast.AST) -> list[tuple[int, str, bool]]:
    """Every ``(line, module, dynamic)`` an ``import`` / ``from ... import`` statement names,
    plus ``importlib.import_module("...")`` / ``__import__("...")`` with a literal name
    (``dynamic`` True)."""
    found: list[tuple[int, str, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, False) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module, False))
        elif isinstance(node, ast.Call) and node.args \
                and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                found.append((node.lineno, node.args[0].value, True))
    return found


def _ours(module: str) -> bool:
    return module.split(".")[0] in PRODUCT


def _files(where: str) -> list[Path]:
    path = ROOT / where
    return [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))


def _scan(places: tuple[str, ...], bad) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    for where in places:
        for path in _files(where):
            tree = ast.parse(path.read_text(), filename=str(path))
            out += [f"{path.relative_to(ROOT)}:{line} imports {module}"
                    for line, module, dynamic in _imports(tree) if bad(module, dynamic)]
    return out


def test_nothing_below_the_cli_imports_the_server() -> None:
    offenders = _scan(BELOW_THE_SERVER,
                      lambda m, _: m == SERVER or m.startswith(SERVER + "."))
    assert offenders == [], ("modules below the CLI import harmony_server; read prior data over "
                             "the HTTP API (tuner_client.api.priordata_remote) or from exported "
                             "files:\n" + "\n".join(offenders))
    # the scan does look inside every package: dozens of modules, real imports
    scanned = sum(len(_files(p)) for p in BELOW_THE_SERVER)
    assert scanned >= 80


def test_no_product_module_imports_one_of_ours_by_a_string() -> None:
    offenders = _scan(PRODUCT, lambda m, dynamic: dynamic and _ours(m))
    assert offenders == [], ("import these plainly so the layer contracts see them:\n"
                             + "\n".join(offenders))


def test_the_scan_catches_a_server_import_wherever_it_is() -> None:
    """The checker itself: a top-level, a nested and a dynamic import are all found."""
    source = ("import harmony_server.store\n"
              "def f():\n"
              "    from harmony_server.priordata_store import prior_from_store\n"
              "    import importlib\n"
              "    return importlib.import_module('harmony_server.app')\n"
              "from harmony_core.priordata import load\n")
    hits = sorted((line, m, d) for line, m, d in _imports(ast.parse(source)) if _ours(m))
    assert hits == [(1, "harmony_server.store", False),
                    (3, "harmony_server.priordata_store", False),
                    (5, "harmony_server.app", True), (6, "harmony_core.priordata", False)]


def _lazy_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, module)`` of every ``LazyModule("module")``."""
    return [(node.lineno, node.args[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LazyModule"
            and node.args and isinstance(node.args[0], ast.Constant)]


def _type_checking_imports(tree: ast.AST) -> set[str]:
    """Modules imported inside ``if TYPE_CHECKING:`` (``from a import b`` names ``a`` and
    ``a.b``)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for inner in node.body:
                if isinstance(inner, ast.Import):
                    found |= {alias.name for alias in inner.names}
                elif isinstance(inner, ast.ImportFrom) and inner.module:
                    found.add(inner.module)
                    found |= {f"{inner.module}.{alias.name}" for alias in inner.names}
    return found


def test_every_lazy_module_is_imported_under_type_checking() -> None:
    missing, lazy = [], 0
    for path in (p for pkg in PRODUCT for p in _files(pkg)):
        tree = ast.parse(path.read_text(), filename=str(path))
        twins = _type_checking_imports(tree)
        for line, module in _lazy_modules(tree):
            lazy += 1
            if module not in twins:
                missing.append(f"{path.relative_to(ROOT)}:{line} LazyModule({module!r})")
    assert missing == [], ("import these under `if TYPE_CHECKING:` too, so the layer contracts "
                           "see them:\n" + "\n".join(missing))
    assert lazy >= 10  # the scan finds the CLI's lazy modules


def test_the_twin_check_reads_both_import_forms() -> None:
    source = ("if TYPE_CHECKING:\n    import a.b as c\n    from d import e\n"
              "else:\n    c = LazyModule('a.b')\n    e = LazyModule('d.e')\n"
              "f = LazyModule('g')\n")
    tree = ast.parse(source)
    assert sorted(_lazy_modules(tree)) == [(5, "a.b"), (6, "d.e"), (7, "g")]
    assert {"a.b", "d.e"} <= _type_checking_imports(tree)
    assert "g" not in _type_checking_imports(tree)
