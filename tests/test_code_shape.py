"""The code keeps a shape a maintainer can hold: no function over 80 lines, no module over 400
lines, no import inside a function, in product code. Counts come from each module's syntax
tree (a function's lines run from ``def`` to its last statement, nested functions included).

The limits are smell detectors, not targets: a module pressed against 400 lines was cut by
count, not by concern (docs/conventions.md, "Limits are smell detectors"). So a module over
400 lines fails only when :data:`LONG_MODULES` does not list it with the reason it may be
long (a table of data, one concept that does not part); an entry that no longer needs to be
listed fails too. Modules within :data:`NEAR_MODULE_LINES` of the limit are reported, never
failed (:func:`test_modules_near_the_limit_are_reported`): a prompt to look for a seam, not
to trim the rationale that explains the code.

The function and import allow-lists name today's exceptions; they may only shrink: a new
long function or function-level import fails, and so does an entry that no longer needs to
be listed (remove it when its area is split).

``Any`` belongs where untrusted input is parsed (docs/conventions.md, "One record per concept,
typed"), so the product code holds at most :data:`MAX_ANY` of them, counted by
:func:`any_count`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("harmony", "harmony_base", "harmony_core", "harmony_report",
           "harmony_server", "tuner_client", "plugins", "strategies", "workloads", "bme")
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 400
#: modules this close to MAX_MODULE_LINES (or over it, listed) are reported in the summary
NEAR_MODULE_LINES = 20

#: functions over MAX_FUNCTION_LINES today, as ``path:qualified name`` (only shrinks)
LONG_FUNCTIONS: set[str] = set()
#: modules that may run over MAX_MODULE_LINES, each with the reason (a table of data, one
#: concept that does not part); the reason is what a reviewer weighs, so say why
LONG_MODULES: dict[str, str] = {
    "tuner_client/config/model.py": (
        "a table: one frozen dataclass per section of the YAML config, every field with its "
        "default and the comment that documents it; the one place every default is stated "
        "(the parser falls back on it), which a split by count would scatter"),
}
#: ``path:line`` of imports inside functions today, by module (only shrinks); a heavy optional
#: third-party import kept lazy on purpose is listed in LAZY_ON_PURPOSE with the reason
INNER_IMPORTS = {
    "tuner_client/servers/controllers/docker.py": 2,  # the optional docker SDK (compose's area)
    "tuner_client/cli/tune_run.py": 1,
}
LAZY_ON_PURPOSE: dict[str, str] = {}
#: the most ``Any`` the product code may hold (issue 46, item 6: 524 before, 149 after)
MAX_ANY = 150


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
    """``(long functions, module lines, inner imports per module)`` of the product code."""
    functions: dict[str, int] = {}
    modules: dict[str, int] = {}
    imports: dict[str, int] = {}
    for path in _modules():
        text = path.read_text()
        rel = _rel(path)
        modules[rel] = len(text.splitlines())
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


def test_no_unlisted_long_module() -> None:
    _, modules, _ = _shape()
    long = {m: n for m, n in modules.items() if n > MAX_MODULE_LINES}
    new = {m: n for m, n in long.items() if m not in LONG_MODULES}
    assert new == {}, (f"modules over {MAX_MODULE_LINES} lines; split them where their concepts "
                       f"part (not by trimming docstrings), or list one that reads as a table "
                       f"or holds one concept in LONG_MODULES with the reason: {new}")
    fixed = set(LONG_MODULES) - set(long)
    assert fixed == set(), f"no longer over {MAX_MODULE_LINES} lines; drop from the list: {fixed}"
    vague = [m for m, why in LONG_MODULES.items() if len(why.split()) < 4]
    assert vague == [], f"say why each listed module may be long: {vague}"


def near_limit(modules: dict[str, int]) -> dict[str, int]:
    """The modules within :data:`NEAR_MODULE_LINES` of the limit or over it, longest first."""
    near = {m: n for m, n in modules.items() if n >= MAX_MODULE_LINES - NEAR_MODULE_LINES}
    return dict(sorted(near.items(), key=lambda item: (-item[1], item[0])))


def test_modules_near_the_limit_are_reported(record_property: Callable[[str, object], None]
                                             ) -> None:
    """Never fails on the modules' lengths: records the modules near the limit as the test's
    ``shape_report`` property, which tests/conftest.py prints in the run's summary (a Python
    warning would fail the run: pyproject's filterwarnings makes warnings errors)."""
    _, modules, _ = _shape()
    near = near_limit(modules)
    lines = [f"{m}: {n} lines" + (f" (listed: {LONG_MODULES[m]})" if m in LONG_MODULES else "")
             for m, n in near.items()]
    record_property("shape_report",
                    [f"modules within {NEAR_MODULE_LINES} lines of the {MAX_MODULE_LINES}-line "
                     f"limit or over it ({len(lines)}): look for a seam, keep the rationale",
                     *lines])
    assert near_limit({"a.py": MAX_MODULE_LINES - NEAR_MODULE_LINES - 1,
                       "b.py": MAX_MODULE_LINES - NEAR_MODULE_LINES, "c.py": 450}) \
        == {"c.py": 450, "b.py": MAX_MODULE_LINES - NEAR_MODULE_LINES}


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


def _any_nodes(tree: ast.AST) -> int:
    """``Any`` in ``tree``: each ``Any`` name and ``typing.Any`` attribute in an expression, and
    each one inside a string that parses as an expression (a quoted annotation); the names an
    import statement binds are not expressions, so ``from typing import Any`` counts nothing."""
    found = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "Any" \
                or isinstance(node, ast.Attribute) and node.attr == "Any":
            found += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and "Any" in node.value:
            try:
                quoted = ast.parse(node.value, mode="eval")
            except SyntaxError:
                continue
            found += _any_nodes(quoted)
    return found


def any_count() -> dict[str, int]:
    """``Any`` per product module that holds one (:func:`_any_nodes` over its syntax tree)."""
    counts = {_rel(path): _any_nodes(ast.parse(path.read_text())) for path in _modules()}
    return {m: n for m, n in counts.items() if n}


def test_any_only_at_the_parsers(record_property: Callable[[str, object], None]) -> None:
    counts = any_count()
    total = sum(counts.values())
    most = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:5]
    record_property("shape_report", [f"Any in the product code: {total} (at most {MAX_ANY}); "
                                     "most in " + ", ".join(f"{m} {n}" for m, n in most)])
    assert total <= MAX_ANY, (
        f"{total} Any in the product code, at most {MAX_ANY}: type what is known (a JSON value "
        f"is harmony_base.jsontypes.JSON, a stored or compared one object) and keep Any where "
        f"untrusted input is parsed; most in {most}")


def test_the_any_count_sees_annotations_and_quoted_ones() -> None:
    source = ("from typing import Any\nimport typing\n\n\n"
              "def f(a: Any, b: dict[str, Any], c: 'list[Any]', d: typing.Any) -> 'Any':\n"
              "    e: Any = cast(Any, a)\n    return 'Any at all'\n")
    assert _any_nodes(ast.parse(source)) == 7
