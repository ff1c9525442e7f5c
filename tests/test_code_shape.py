"""The code keeps a shape a maintainer can hold: no function over 80 lines, no module over 400
lines, no import inside a function, in product code. Each allow-list below names today's
exceptions; it may only shrink: a new long function, long module or function-level import
fails, and so does an entry that no longer needs to be listed (remove it when its area is
split). Counts come from each module's syntax tree (a function's lines run from ``def`` to its
last statement, nested functions included).

Pure tables (a dict or tuple of data, a schema) may be long; list such a module in
``TABLES`` with the reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("harmony", "harmony_server", "tuner_client", "plugins", "strategies", "workloads", "bme")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 400

#: functions over MAX_FUNCTION_LINES today, as ``path:qualified name`` (only shrinks)
LONG_FUNCTIONS: set[str] = set()
#: modules over MAX_MODULE_LINES today (only shrinks)
LONG_MODULES: set[str] = set()
#: long modules that are pure tables, with the reason (never counted as long)
TABLES: dict[str, str] = {}
#: ``path:line`` of imports inside functions today, by module (only shrinks); a heavy optional
#: third-party import kept lazy on purpose is listed in LAZY_ON_PURPOSE with the reason
INNER_IMPORTS = {
    "tuner_client/controllers/docker.py": 2,  # the optional docker SDK (compose's area)
    "tuner_client/target.py": 11,
    "tuner_client/tune_run.py": 1,
}
LAZY_ON_PURPOSE: dict[str, str] = {}


def _modules() -> list[Path]:
    return sorted(p for pkg in PRODUCT for p in (ROOT / pkg).rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _walk(node: ast.AST, prefix: str, in_function: bool, out: dict[str, list]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + child.name
            out["functions"].append((name, (child.end_lineno or child.lineno) - child.lineno + 1))
            _walk(child, name + ".", True, out)
        elif isinstance(child, ast.ClassDef):
            _walk(child, prefix + child.name + ".", in_function, out)
        else:
            if in_function and isinstance(child, ast.Import | ast.ImportFrom):
                out["imports"].append(child.lineno)
            _walk(child, prefix, in_function, out)


def _shape() -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """``(long functions, long modules, inner imports per module)`` of the product code."""
    functions: dict[str, int] = {}
    modules: dict[str, int] = {}
    imports: dict[str, int] = {}
    for path in _modules():
        text = path.read_text()
        rel = _rel(path)
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES and rel not in TABLES:
            modules[rel] = lines
        found: dict[str, list] = {"functions": [], "imports": []}
        _walk(ast.parse(text, filename=rel), "", False, found)
        functions.update({f"{rel}:{name}": n for name, n in found["functions"]
                          if n > MAX_FUNCTION_LINES})
        if found["imports"]:
            imports[rel] = len(found["imports"])
    return functions, modules, imports


def test_no_new_long_function() -> None:
    functions, _, _ = _shape()
    new = {f: n for f, n in functions.items() if f not in LONG_FUNCTIONS}
    assert new == {}, (f"functions over {MAX_FUNCTION_LINES} lines; split them into named "
                       f"steps: {new}")
    fixed = LONG_FUNCTIONS - set(functions)
    assert fixed == set(), f"no longer over {MAX_FUNCTION_LINES} lines; drop from the list: {fixed}"


def test_no_new_long_module() -> None:
    _, modules, _ = _shape()
    new = {m: n for m, n in modules.items() if m not in LONG_MODULES}
    assert new == {}, (f"modules over {MAX_MODULE_LINES} lines; split them by job (or list a "
                       f"pure table in TABLES with the reason): {new}")
    fixed = LONG_MODULES - set(modules)
    assert fixed == set(), f"no longer over {MAX_MODULE_LINES} lines; drop from the list: {fixed}"


def test_no_new_import_inside_a_function() -> None:
    _, _, imports = _shape()
    allowed = {m: n for m, n in INNER_IMPORTS.items() if n}
    over = {m: n for m, n in imports.items()
            if m not in LAZY_ON_PURPOSE and n > allowed.get(m, 0)}
    assert over == {}, ("imports inside functions; import at the top of the module (fix the "
                        f"cycle that forced it, if any): {over}")
    fewer = {m: (allowed[m], imports.get(m, 0)) for m in allowed if imports.get(m, 0) < allowed[m]}
    assert fewer == {}, f"fewer imports inside functions now; lower the allow-list: {fewer}"


def test_the_walk_sees_the_product_code() -> None:
    """The scan reads every package (well over a hundred modules) with qualified names, and it
    measures a function from ``def`` to its last statement, nested functions included."""
    modules = _modules()
    assert len(modules) >= 120
    decision = ROOT / "tuner_client" / "stats" / "decision.py"
    assert decision in modules
    real: dict[str, list] = {"functions": [], "imports": []}
    _walk(ast.parse(decision.read_text()), "", False, real)
    names = {name for name, _ in real["functions"]}
    assert {"decide", "FinalDecision.to_dict", "_decision_lines.name"} <= names
    found: dict[str, list] = {"functions": [], "imports": []}
    source = ("def outer():\n    import os\n    def inner():\n        return os\n"
              "    return inner\n\n\nclass Kept:\n    def method(self):\n        pass\n")
    _walk(ast.parse(source), "", False, found)
    assert found == {"functions": [("outer", 5), ("outer.inner", 2), ("Kept.method", 2)],
                     "imports": [2]}
