"""docs/architecture.md against the import-linter contracts in pyproject.toml, and the
contracts against the real imports.

The page carries three machine-readable blocks: ```layers``` (the `layers` contract, top to
bottom, line for line), ```imports``` (what each package may import, recomputed here from
the `layers` and `forbidden` contracts) and ```arrows``` (which top-level package imports which,
counted from the code). It must also name every product package and sub-package, so a new one
cannot land undocumented.

"A folder holds one layer" is checked on the import graph itself (grimp's, the one
import-linter reads, ``TYPE_CHECKING`` imports included): each layer is whole top-level
packages and each top-level package is in one layer; no top-level import arrow runs up the
layers (or across a ``|``); no import circle, between top-level packages or between modules.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"


def _contracts() -> tuple[list[str], list[dict[str, object]], list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    linter = config["tool"]["importlinter"]
    contracts = linter["contracts"]
    (layers,) = [c for c in contracts if c["type"] == "layers"]
    forbidden = [c for c in contracts if c["type"] == "forbidden"]
    return list(layers["layers"]), forbidden, list(linter["root_packages"])


def _block(name: str) -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    found = re.findall(rf"^```{name}\n(.*?)^```$", text, flags=re.S | re.M)
    assert len(found) == 1, f"{DOC.name} must have exactly one ```{name} block, has {len(found)}"
    return [line.strip() for line in found[0].splitlines() if line.strip()]


def _members(layer: str) -> tuple[list[str], bool]:
    """The packages of one layer, and whether they are independent ('|') of each other."""
    independent = "|" in layer
    return [m.strip() for m in re.split(r"[|:]", layer)], independent


def _covers(source: str, module: str) -> bool:
    return module == source or module.startswith(source + ".")


def expected_imports(layers: list[str], forbidden: list[dict[str, object]],
                     roots: list[str]) -> dict[tuple[str, str], list[str]]:
    """(package, '->' or '-/->') -> modules, as the contracts allow and forbid them."""
    expected: dict[tuple[str, str], list[str]] = {}
    for i, layer in enumerate(layers):
        members, independent = _members(layer)
        below = [m for lower in layers[i + 1:] for m in _members(lower)[0]]
        for member in members:
            siblings = [] if independent else [m for m in members if m != member]
            banned_ours: set[str] = set()
            banned_outside: list[str] = []
            for contract in forbidden:
                sources = contract["source_modules"]
                assert isinstance(sources, list)
                if not any(_covers(str(s), member) for s in sources):
                    continue
                targets = contract["forbidden_modules"]
                assert isinstance(targets, list)
                for target in map(str, targets):
                    if target.split(".")[0] in roots:
                        banned_ours.add(target)
                    elif target not in banned_outside:
                        banned_outside.append(target)
            allowed = [m for m in siblings + below
                       if not any(_covers(b, m) for b in banned_ours)]
            expected[(member, "->")] = allowed
            if banned_outside:
                expected[(member, "-/->")] = banned_outside
    return expected


def test_the_layers_block_is_the_layers_contract() -> None:
    layers, _, _ = _contracts()
    normalise = lambda line: " | ".join(p.strip() for p in line.split("|"))  # noqa: E731
    assert _block("layers") == [normalise(layer) for layer in layers]


def test_the_imports_block_is_what_the_contracts_allow() -> None:
    layers, forbidden, roots = _contracts()
    stated: dict[tuple[str, str], list[str]] = {}
    for line in _block("imports"):
        match = re.fullmatch(r"([\w.]+)(?:\s+(->|-/->)\s+(.*))?", line)
        assert match, f"{DOC.name}: cannot read the imports line {line!r}"
        package, arrow, targets = match.groups()
        key = (package, arrow or "->")
        assert key not in stated, f"{DOC.name}: {package} {key[1]} stated twice"
        stated[key] = [t.strip() for t in targets.split(",")] if targets else []
    expected = expected_imports(layers, forbidden, roots)
    assert set(stated) == set(expected), (
        f"lines missing: {sorted(set(expected) - set(stated))}, "
        f"lines not in the contracts: {sorted(set(stated) - set(expected))}")
    for key, modules in expected.items():
        assert sorted(stated[key]) == sorted(modules), (
            f"{DOC.name}: '{key[0]} {key[1]}' lists {stated[key]}, the contracts give {modules}")


def test_the_derivation_reads_the_contracts_as_import_linter_does() -> None:
    """A check of the helper itself on a small contract set, with the answer written out."""
    layers = ["top", "a | b", "base"]
    forbidden: list[dict[str, object]] = [
        {"source_modules": ["a"], "forbidden_modules": ["base.x", "asyncio"]}]
    got = expected_imports(layers, forbidden, ["top", "a", "b", "base"])
    assert got == {("top", "->"): ["a", "b", "base"], ("a", "->"): ["base"],
                   ("a", "-/->"): ["asyncio"], ("b", "->"): ["base"], ("base", "->"): []}
    # 'base.x' is banned, not 'base' as a whole; ':' siblings may import each other
    got = expected_imports(["top", "a : b", "base"], [], ["top", "a", "b", "base"])
    assert got[("a", "->")] == ["b", "base"]


def _product_packages() -> list[str]:
    _, _, roots = _contracts()
    found = []
    for root in roots:
        for init in sorted((ROOT / root).rglob("__init__.py")):
            found.append(init.parent.relative_to(ROOT).as_posix())
    return found


def test_the_page_names_every_product_package() -> None:
    text = DOC.read_text(encoding="utf-8")
    packages = _product_packages()
    assert "tuner_client/phases" in packages and "harmony_core/priordata" in packages  # walks
    missing = [p for p in packages
               if f"{p}/" not in text and f"`{p.replace('/', '.')}`" not in text]
    assert not missing, f"{DOC.name} does not mention the packages {missing}"


def test_every_layer_member_exists_as_code() -> None:
    """The contracts (and so the page) name real modules, not leftovers of a rename."""
    layers, _, _ = _contracts()
    members = [m for layer in layers for m in _members(layer)[0]]
    assert members[-1] == "harmony_base", members  # the base is the bottom layer
    missing = [m for m in members
               if not (ROOT / m.replace(".", "/")).is_dir()
               and not (ROOT / m.replace(".", "/")).with_suffix(".py").is_file()]
    assert not missing, f"pyproject.toml's layers name modules that do not exist: {missing}"


# -- the layers on the real import graph ------------------------------------------------------
def _module_arrows() -> dict[str, set[str]]:
    """Every module of ours -> the modules of ours it imports (``TYPE_CHECKING`` included)."""
    _, _, roots = _contracts()
    graph = grimp.build_graph(*roots, cache_dir=None, exclude_type_checking_imports=False)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def top_level_arrows(modules: Mapping[str, Iterable[str]]) -> dict[str, set[str]]:
    """Top-level package -> the other top-level packages it imports."""
    arrows: dict[str, set[str]] = {}
    for source, targets in modules.items():
        top = source.split(".")[0]
        arrows.setdefault(top, set()).update(
            t.split(".")[0] for t in targets if t.split(".")[0] != top)
    return arrows


def circles(arrows: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in arrows.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(arrows):
        if node not in index:
            visit(node)
    return sorted(found)


def layer_of(layers: list[str]) -> dict[str, set[int]]:
    """Top-level package -> the indices (0 = top) of the layers its modules are named in."""
    held: dict[str, set[int]] = {}
    for i, layer in enumerate(layers):
        for member in _members(layer)[0]:
            held.setdefault(member.split(".")[0], set()).add(i)
    return held


def against_the_layers(layers: list[str], arrows: Mapping[str, Iterable[str]]) -> list[str]:
    """The top-level arrows the layers forbid: up to a higher layer, or across a '|'."""
    held = layer_of(layers)
    bad = []
    for source, targets in sorted(arrows.items()):
        for target in sorted(targets):
            if source not in held or target not in held:
                continue  # a package outside the contract: test_every_root_is_one_layer says so
            if held[source] == held[target] and len(held[source]) == 1:
                if "|" in layers[min(held[source])]:  # across a '|'
                    bad.append(f"{source} -> {target}")
            elif not min(held[target]) > max(held[source]):  # not wholly below: up
                bad.append(f"{source} -> {target}")
    return bad


def test_every_root_package_is_in_exactly_one_layer_and_each_layer_is_whole_packages() -> None:
    layers, _, roots = _contracts()
    partial = [m for layer in layers for m in _members(layer)[0] if "." in m]
    assert partial == [], f"layers name parts of a package, not whole top-level ones: {partial}"
    held = layer_of(layers)
    spanning = {p: sorted(i) for p, i in held.items() if len(i) > 1}
    assert spanning == {}, f"top-level packages spanning several layers: {spanning}"
    assert sorted(held) == sorted(roots), (
        f"root packages in no layer: {sorted(set(roots) - set(held))}; "
        f"layer members that are not root packages: {sorted(set(held) - set(roots))}")


def test_no_top_level_arrow_runs_up_and_there_is_no_circle() -> None:
    layers, _, _ = _contracts()
    modules = _module_arrows()
    arrows = top_level_arrows(modules)
    assert sum(len(t) for t in arrows.values()) >= 20  # the graph is the real one
    assert against_the_layers(layers, arrows) == []
    assert circles(arrows) == [], "import circles between top-level packages"
    assert circles(modules) == [], "import circles between modules (TYPE_CHECKING counts)"


def test_the_arrows_block_is_the_code() -> None:
    """The page's ```arrows``` block lists, for each top-level package, the top-level packages
    its modules import: the drawing is counted from the code, not from intent."""
    stated: dict[str, set[str]] = {}
    for line in _block("arrows"):
        match = re.fullmatch(r"(\w+)\s+->(.*)", line)
        assert match, f"{DOC.name}: cannot read the arrows line {line!r}"
        stated[match[1]] = {t.strip() for t in match[2].split(",") if t.strip()}
    real = top_level_arrows(_module_arrows())
    assert stated == real, (
        f"{DOC.name}'s arrows block differs from the code: "
        + "; ".join(f"{p}: page {sorted(stated.get(p, ()))}, code {sorted(real.get(p, ()))}"
                    for p in sorted(set(stated) | set(real)) if stated.get(p) != real.get(p)))


def test_the_graph_checks_find_what_they_must() -> None:
    """The helpers on a small graph with the answer written out: a package over two layers,
    an arrow up, an arrow across a '|', a circle through a TYPE_CHECKING-style back edge."""
    layers = ["top", "a | b", "base"]
    modules = {"top.cli": ["a.x", "base.y"], "a.x": ["base.y", "b.z"], "b.z": ["top"],
               "base.y": [], "top": []}
    arrows = top_level_arrows(modules)
    assert arrows == {"top": {"a", "base"}, "a": {"base", "b"}, "b": {"top"}, "base": set()}
    assert against_the_layers(layers, arrows) == ["a -> b", "b -> top"]
    assert circles(arrows) == [["a", "b", "top"]]
    assert circles({"m.app": ["m.openapi"], "m.openapi": ["m.app"]}) == [["m.app", "m.openapi"]]
    assert circles(modules) == []
    assert layer_of(["top", "pkg.high | b", "pkg.low"]) == {"top": {0}, "pkg": {1, 2}, "b": {1}}
    # a package spanning layers: an arrow into it from between its layers runs up
    assert against_the_layers(["top", "pkg.high", "mid", "pkg.low"],
                              {"mid": {"pkg"}}) == ["mid -> pkg"]
