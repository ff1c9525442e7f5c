"""The shape of the tuner's decision code, counted from the source (issue 53's evidence table):
the race classes, the places that build a ``FinalDecision``, the modules outside the
measurement engine that compare design names, the Bonferroni level written out, and the
import closure of one final decision (``tuner_client/phases/final.py``); then, a block of its
own (:func:`shape`), the modules at 360–400 lines, ``Any`` and the decisions still written as
sentences, by module.

    python -m benchmarks.design_metrics [--tree DIR]

Static: it parses the files (``ast``), imports nothing of the tree it measures.
"""

from __future__ import annotations

import argparse
import ast
import re
from collections import Counter
from pathlib import Path

#: the design names, as constants and as literals
DESIGN_NAMES = {"per-transaction", "switchback", "windows", "duet"}
DESIGN_CONSTANTS = {"PER_TRANSACTION", "SWITCHBACK", "WINDOWS", "DUET"}
#: ``1 - (1 - level) / k`` written out
BONFERRONI = re.compile(r"1(?:\.0)? - \(1(?:\.0)? - [\w.]+\) / (?!2\.0\))")
PACKAGES = ("tuner_client", "harmony", "harmony_report", "harmony_core", "harmony_base",
            "workloads")


def modules(tree: Path) -> dict[str, Path]:
    """Dotted module name → file, for the project's packages."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((tree / package).rglob("*.py")):
            parts = list(path.relative_to(tree).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target:
                found.add(target)
    return found


def closure(tree: Path, start: str) -> list[str]:
    """Every project module ``start`` imports, transitively (packages' ``__init__`` too)."""
    known = modules(tree)
    seen, todo = {start}, [start]
    while todo:
        name = todo.pop()
        parents = [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
        for dep in _imports(known[name], name, known) | {p for p in parents if p in known}:
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return sorted(seen)


def _compares_design(node: ast.AST) -> bool:
    if not isinstance(node, ast.Compare):
        return False
    for side in [node.left, *node.comparators]:
        if isinstance(side, ast.Constant) and side.value in DESIGN_NAMES:
            return True
        if isinstance(side, ast.Name) and side.id in DESIGN_CONSTANTS:
            return True
        if isinstance(side, ast.Attribute) and side.attr in DESIGN_CONSTANTS:
            return True
    return False


def _decide_call(node: ast.AST) -> str | None:
    """``prose`` for ``….decide("…")`` or ``….decide(f"…")``, ``record`` for any other
    argument, None when ``node`` is no such call."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "decide" and len(node.args) == 1):
        return None
    arg = node.args[0]
    prose = isinstance(arg, ast.JoinedStr) or (isinstance(arg, ast.Constant)
                                               and isinstance(arg.value, str))
    return "prose" if prose else "record"


def _design_classes(parsed: ast.Module) -> list[str]:
    """Classes registering a name by ``class X(..., name=...)``, from a ``Design`` base."""
    return [node.name for node in ast.walk(parsed) if isinstance(node, ast.ClassDef)
            and any(k.arg == "name" for k in node.keywords)
            and any("Design" in ast.unparse(b) for b in node.bases)]


def measure(tree: Path) -> dict[str, str | list[str]]:
    known = modules(tree)
    builds: list[str] = []
    compares: list[str] = []
    race_classes: list[str] = []
    designs: list[str] = []
    decides = {"prose": 0, "record": 0}
    bonferroni = 0
    bonferroni_modules: set[str] = set()
    for name, path in known.items():
        text = path.read_text()
        parsed = ast.parse(text)
        designs += [f"{name}.{c}" for c in _design_classes(parsed)]
        for node in ast.walk(parsed):
            if (kind := _decide_call(node)) is not None and name.startswith("tuner_client"):
                decides[kind] += 1
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "FinalDecision":
                builds.append(name)
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(f, ast.FunctionDef) and f.name == "to_final_decision"
                    for f in node.body):
                race_classes.append(f"{name}.{node.name}")
        if not name.startswith("tuner_client.engine") and any(
                _compares_design(n) for n in ast.walk(parsed)):
            compares.append(name)
        hits = len(BONFERRONI.findall(text))
        if hits:
            bonferroni += hits
            bonferroni_modules.add(name)
    final = closure(tree, "tuner_client.phases.final")
    tuner = [m for m in final if m.startswith("tuner_client")]
    final_text = (tree / "tuner_client/phases/final.py").read_text()
    return {
        "classes with to_final_decision (race outcomes)": sorted(race_classes),
        "Design classes registered by name": sorted(designs),
        "design-name compares in phases/final.py": str(sum(
            _compares_design(n) for n in ast.walk(ast.parse(final_text)))),
        "decide() calls: a sentence / a record": f"{decides['prose']} / {decides['record']}",
        "FinalDecision(...) calls": f"{len(builds)} in {len(set(builds))} modules "
                                    f"({', '.join(sorted(set(builds)))})",
        "modules outside tuner_client.engine comparing design names": sorted(set(compares)),
        "Bonferroni written out": f"{bonferroni} in {len(bonferroni_modules)} modules "
                                  f"({', '.join(sorted(bonferroni_modules))})",
        "import closure of phases/final.py (tuner_client)":
            f"{len(tuner)} modules, {sum(_lines(known[m]) for m in tuner):,} lines",
        "import closure of phases/final.py (project)":
            f"{len(final)} modules, {sum(_lines(known[m]) for m in final):,} lines",
    }


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


#: the run's two state classes, in ``tuner_client/phases/state.py``
STATE_MODULE = "tuner_client.phases.state"
STATE_CLASSES = ("RunContext", "RunState")
#: the methods that change a list, a dict or a set in place
MUTATORS = {"append", "extend", "insert", "pop", "clear", "remove", "update", "setdefault",
            "add", "discard", "sort", "reverse"}


def state_fields(tree: Path) -> dict[str, list[str]]:
    """The fields of :class:`RunContext` and :class:`RunState` (class-level annotations)."""
    parsed = ast.parse((tree / "tuner_client/phases/state.py").read_text())
    return {node.name: [s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                        and isinstance(s.target, ast.Name)]
            for node in parsed.body
            if isinstance(node, ast.ClassDef) and node.name in STATE_CLASSES}


def _takes_state(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    args = function.args
    return any(a.annotation is not None
               and any(c in ast.unparse(a.annotation) for c in STATE_CLASSES)
               for a in [*args.posonlyargs, *args.args, *args.kwonlyargs])


def _state_receiver(node: ast.expr) -> bool:
    """``state``, ``self.state``, ``tuner.state``, ``run_state``: a name for the RunState."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", "")
    return name.endswith("state")


def _field_target(node: ast.expr, fields: set[str]) -> str | None:
    """``state.<field>`` (or ``state.<field>[...]``) in ``node``, as ``<field>``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute) and node.attr in fields and _state_receiver(node.value):
        return node.attr
    return None


def state_writes(parsed: ast.Module, fields: set[str]) -> list[str]:
    """Assignments to RunState fields and in-place changes of them, in ``parsed`` (the
    changed field of each)."""
    writes: list[str] = []
    for node in ast.walk(parsed):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets
                       for t in (target.elts if isinstance(target, ast.Tuple) else [target])]
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in MUTATORS):
            targets = [node.func.value]
        writes += [f for t in targets if (f := _field_target(t, fields)) is not None]
    return writes


def _tuner_modules(tree: Path) -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text()) for name, path in modules(tree).items()
            if name.startswith("tuner_client")}


def state_takers(tree: Path) -> list[str]:
    """The module of every function (or method) that takes a RunContext or a RunState."""
    return [name for name, parsed in _tuner_modules(tree).items() for node in ast.walk(parsed)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _takes_state(node)]


def measure_state(tree: Path) -> dict[str, object]:
    """The run's state as the phases reach it: the fields, the functions that take the
    context or the state, and the writes to the state's fields outside its module."""
    fields = state_fields(tree)
    run_state = {f for f in fields["RunState"] if not f.startswith("_")}
    taking = state_takers(tree)
    writes = [f"{name}:{f}" for name, parsed in _tuner_modules(tree).items()
              if name != STATE_MODULE for f in state_writes(parsed, run_state)]
    return {
        "RunContext / RunState fields (public)": " / ".join(
            f"{len(fields[c])} ({sum(not f.startswith('_') for f in fields[c])})"
            for c in STATE_CLASSES),
        "functions taking a RunContext or a RunState":
            f"{len(taking)} in {len(set(taking))} modules",
        "writes to RunState fields outside state.py": sorted(writes),
    }


# -- issue 53's shape evidence: modules near the line limit, Any, sentence decisions ----------
#: what tests/test_code_shape.py counts as product code, and its limits
PRODUCT = ("harmony", "harmony_base", "harmony_core", "harmony_report", "harmony_server",
           "tuner_client", "plugins", "strategies", "workloads", "bme")
NEAR_LINES = (360, 400)


def _product(tree: Path) -> dict[str, Path]:
    return {p.relative_to(tree).as_posix(): p for pkg in PRODUCT
            for p in sorted((tree / pkg).rglob("*.py"))}


def _anys(node: ast.AST) -> int:
    """``Any`` as tests/test_code_shape.py counts it: a name or ``typing.Any`` in an
    expression, and inside a quoted annotation (an import binds none)."""
    total = 0
    for sub in ast.walk(node):
        if getattr(sub, "id", None) == "Any" or getattr(sub, "attr", None) == "Any":
            total += isinstance(sub, ast.Name | ast.Attribute)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "Any" in sub.value:
            try:
                total += _anys(ast.parse(sub.value, mode="eval"))
            except SyntaxError:
                pass
    return total


def shape(tree: Path) -> dict[str, str | list[str]]:
    """Modules at 360–400 lines, the ``Any`` count, and the decisions still passed as
    sentences (``decide("…")``/``decide(f"…")``) by module, beside the records kept as notes
    (``Decision.note(…)``)."""
    near: list[str] = []
    anys = 0
    prose: Counter[str] = Counter()
    notes: Counter[str] = Counter()
    for rel, path in _product(tree).items():
        text = path.read_text()
        n = len(text.splitlines())
        if NEAR_LINES[0] <= n <= NEAR_LINES[1]:
            near.append(f"{rel} ({n})")
        parsed = ast.parse(text)
        anys += _anys(parsed)
        for node in ast.walk(parsed):
            if _decide_call(node) == "prose":
                prose[rel] += 1
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "note" and ast.unparse(node.func.value) == "Decision":
                notes[rel] += 1
    return {
        f"modules at {NEAR_LINES[0]}–{NEAR_LINES[1]} lines": near,
        "Any in the product code": str(anys),
        "sentence decide() calls by module": [f"{m} {k}" for m, k in sorted(prose.items())],
        "Decision.note(...) records (a sentence kept whole) by module":
            [f"{m} {k}" for m, k in sorted(notes.items())],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args()
    for block in (measure(args.tree), shape(args.tree)):
        for key, value in block.items():
            shown = value if isinstance(value, str) else f"{len(value)}: {', '.join(value)}"
            print(f"- {key}: {shown}")
        print()
    print("the run's state (RunContext, RunState):")
    for key, value in measure_state(args.tree).items():
        shown = value if isinstance(value, str) else f"{len(value)}: {', '.join(value)}"
        print(f"- {key}: {shown}")


if __name__ == "__main__":
    main()
