"""docs/architecture.md against the import-linter contracts in pyproject.toml.

The page carries two machine-readable blocks: ```layers``` (the `layers` contract, top to
bottom, line for line) and ```imports``` (what each package may import, recomputed here from
the `layers` and `forbidden` contracts). It must also name every product package and
sub-package, so a new one cannot land undocumented.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

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
    assert "tuner_client/phases" in packages and "harmony_core" in packages  # the walk works
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
