"""The wheel ships the product only: its packages and their data, never a directory that
happens to lie beside them (``harmony-out/``, a tuning run's output, once shipped a plan.json).

The wheel is built from a copy of the tree with such a stray directory in it, without build
isolation (offline; the dev extra holds the build backend), and its file list is read.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
#: the top-level packages the wheel holds: the ones the import contracts cover (a package
#: moved out of harmony/ joins both lists)
PRODUCT = set(_CONFIG["tool"]["importlinter"]["root_packages"])
#: what a product package ships besides its modules (pyproject.toml's package-data)
DATA_SUFFIXES = {".py", ".typed", ".sql", ".json", ".yaml", ".pgbench"}


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The files of a wheel built from a copy of the tree holding stray output directories."""
    tree = tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    for package in PRODUCT:
        shutil.copytree(ROOT / package, tree / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for stray in ("harmony-out", "harmony-out/demo", "bme-old", "harmony_old-out"):
        (tree / stray).mkdir(parents=True, exist_ok=True)
        (tree / stray / "plan.json").write_text("{}\n")
    dist = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(tree), "--no-deps",
                           "--no-build-isolation", "--no-index", "-q", "-w", str(dist)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = dist.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_wheel_holds_the_product_packages_only(wheel_files: list[str]) -> None:
    tops = {name.split("/")[0] for name in wheel_files}
    dist_info = {t for t in tops if t.endswith(".dist-info")}
    assert len(dist_info) == 1
    assert tops - dist_info == PRODUCT, f"unexpected in the wheel: {tops - dist_info - PRODUCT}"
    assert not [n for n in wheel_files if "plan.json" in n or "-out/" in n or "bme-old" in n]
    odd = [n for n in wheel_files if not n.startswith(tuple(dist_info))
           and Path(n).suffix not in DATA_SUFFIXES]
    assert odd == [], f"files that are neither modules nor package data: {odd}"


def test_the_wheel_holds_every_product_module_and_its_data(wheel_files: list[str]) -> None:
    shipped = set(wheel_files)
    modules = [p.relative_to(ROOT).as_posix() for package in PRODUCT
               for p in (ROOT / package).rglob("*.py")]
    assert len(modules) > 120
    assert [m for m in modules if m not in shipped] == []
    for data in ("harmony/py.typed", "tuner_client/py.typed", "workloads/apps/shop/schema.sql",
                 "workloads/apps/shop/lookup.pgbench"):
        assert data in shipped


def test_the_package_patterns_cannot_take_an_output_directory() -> None:
    """pyproject.toml names each package exactly or with a dot after it: no prefix pattern
    (``harmony*`` took ``harmony-out``)."""
    include = _CONFIG["tool"]["setuptools"]["packages"]["find"]["include"]
    names = {p.removesuffix(".*") for p in include}
    assert all("*" not in name and "?" not in name and "[" not in name for name in names)
    assert set(include) == names | {f"{name}.*" for name in names}
    assert names >= PRODUCT
    assert {"harmony", "tuner_client", "bme"} <= PRODUCT  # the contracts were read
