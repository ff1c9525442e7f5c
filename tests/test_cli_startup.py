"""A command line answers at once: ``harmony --help``, ``harmony --version`` and every
``harmony X ... --help`` load none of the heavy libraries (each subcommand's work is imported
when it runs; docs/conventions.md). Each check runs in a fresh interpreter, since this test
process has long imported them all. The timing goal is benchmarks/cli_startup.py's.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from harmony.cli import build_parser, priordata, synth, workload_parser
from harmony_core import priordata as prior_files
from harmony_core import synth as synth_core
from workloads.apps import app_names

ROOT = Path(__file__).resolve().parent.parent
#: libraries that take tenths of a second to import; none may load to print help
HEAVY = ("matplotlib", "aiohttp", "sqlalchemy", "scipy", "numpy", "islpy", "psycopg")

#: in a fresh interpreter: print every command path's help (``harmony X Y --help``), then the
#: heavy libraries loaded by then (help only adds imports, so one look at the end sees all)
_EVERY_HELP = """
import contextlib, io, json, sys
from harmony.cli import main
for path in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main([*path, "--help"])
heavy = json.loads(sys.argv[2])
print(json.dumps(sorted({m.split(".")[0] for m in sys.modules} & set(heavy))))
"""


def _command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
                   ) -> list[tuple[str, ...]]:
    """Every subcommand path under ``parser``: ``("bme",), ("bme", "fit"), ...``."""
    paths: list[tuple[str, ...]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths.append((*prefix, name))
                paths += _command_paths(sub, (*prefix, name))
    return paths


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def _imported(importtime_stderr: str) -> set[str]:
    """Top-level packages named in ``python -X importtime`` output."""
    names = set()
    for line in importtime_stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return names


def test_every_subcommand_is_found() -> None:
    """The walk sees the nested commands too (the list below is only a floor)."""
    paths = _command_paths(build_parser())
    assert {("server",), ("tune",), ("bme", "fit"), ("tpch", "load"), ("pgbench", "run"),
            ("workload", "app-setup"), ("export",), ("import",)} <= set(paths)
    assert len(paths) >= 25


def test_harmony_help_and_version_load_no_heavy_library() -> None:
    for option in ("--help", "--version"):
        done = _run("-X", "importtime", "-m", "harmony", option)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "harmony" in done.stdout
        loaded = _imported(done.stderr)
        assert "harmony" in loaded  # the importtime report was read
        assert loaded.isdisjoint(HEAVY), f"harmony {option} imports {loaded & set(HEAVY)}"


def test_harmony_tune_help_loads_no_heavy_library() -> None:
    done = _run("-X", "importtime", "-m", "harmony", "tune", "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--metrics-port" in done.stdout
    loaded = _imported(done.stderr)
    assert loaded.isdisjoint(HEAVY), f"harmony tune --help imports {loaded & set(HEAVY)}"


def test_every_subcommand_help_loads_no_heavy_library() -> None:
    paths = _command_paths(build_parser())
    done = _run("-c", _EVERY_HELP, json.dumps(paths), json.dumps(HEAVY))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == [], (
        "a subcommand's --help imports heavy libraries; reach the command's work through a "
        "harmony_base.lazy.LazyModule")


def test_the_help_lists_are_the_implementations_lists() -> None:
    """Names the light modules spell out for ``--help`` equal the heavy modules' own."""
    assert sorted(synth.FUNCTION_NAMES) == sorted(synth_core.FUNCTIONS)
    assert synth.GRIDS == synth_core.GRIDS
    assert list(priordata.FORMAT_NAMES) == list(prior_files.FORMATS)
    assert workload_parser.app_names() == app_names() != []
