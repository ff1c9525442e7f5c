"""The user's own SQL as the tuner's workload: pgbench custom scripts and ``.sql`` files.

Each sample is one run of the real ``pgbench`` binary with every script (``-f file@weight``)
in prepared mode (``-M prepared``, as applications send their statements), per-transaction
logging (per-script latencies) and ``-r`` (per-statement mean latencies). ``start()``
checks every script on the database first (:mod:`workloads.script_check`), so a bad
statement stops the run before any knob is touched. A workload that does not allow writes
also runs with ``default_transaction_read_only`` on, so not even a function can write.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from harmony_base.errors import ConfigError, WorkloadError
from workloads.connect import connect
from workloads.pgbench import PgbenchWorkload
from workloads.sample import Sample
from workloads.script_check import check_scripts, pgbench_parses
from workloads.script_file import Script, parse_weighted, read_script_file

logger = logging.getLogger(__name__)

#: pgbench runs at most this many scripts at once (its MAX_SCRIPTS)
MAX_SCRIPTS = 128
#: where shipped scripts are found when a path is not found from the working directory
PACKAGE_ROOT = Path(__file__).resolve().parent.parent
_SECTION = re.compile(r"^SQL script (\d+):", re.M)
_STATEMENT_ROW = re.compile(r"^\s+([\d.]+)(?:\s+\d+)?\s{2,}\S")


def resolve_script_path(name: str, base_dir: Path | None = None) -> Path:
    """A script path as written: absolute, from the working directory, from ``base_dir``
    (the config file's directory), or inside the installed package (``workloads/apps/...``)."""
    path = Path(name)
    if path.is_absolute():
        return path
    for root in (Path.cwd(), base_dir, PACKAGE_ROOT):
        if root is not None and (root / path).exists():
            return root / path
    return path


def load_scripts(files: Sequence[str], base_dir: Path | None = None) -> list[Script]:
    """Read ``file@weight`` specs into scripts (a .sql file gives one per statement)."""
    if not files:
        raise ConfigError("a scripted workload needs at least one file (file@weight)")
    scripts: list[Script] = []
    for spec in files:
        name, weight = parse_weighted(spec)
        scripts.extend(read_script_file(resolve_script_path(name, base_dir), weight, shown=name))
    if len(scripts) > MAX_SCRIPTS:
        raise ConfigError(f"pgbench runs at most {MAX_SCRIPTS} scripts, but the workload's "
                          f"files make {len(scripts)} (each .sql statement is one)")
    return scripts


class ScriptedWorkload(PgbenchWorkload):
    """pgbench running the user's scripts against ``dsn`` with ``clients`` connections."""

    def __init__(self, dsn: str, files: Sequence[str], *, clients: int = 4,
                 writes: bool = False, variables: Mapping[str, int | float | str] | None = None,
                 base_dir: Path | None = None, bin_dir: Path | str | None = None,
                 threads: int | None = None, statement_timeout_s: float | None = None) -> None:
        super().__init__(dsn, clients=clients, bin_dir=bin_dir, threads=threads)
        self.scripts = load_scripts(files, base_dir)
        self.writes = writes
        self.variables = dict(variables or {})
        for name in self.variables:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ConfigError(f"workload variable names are letters, digits and _, but "
                                  f"got {name!r}")
        self.statement_timeout_s = statement_timeout_s
        self.writing = False  # whether some script writes (known after start)
        self._dir: Path | None = None
        self._files: list[str] = []

    def start(self) -> None:
        """Check every script on the database (nothing runs, nothing changes), then write
        the scripts pgbench will run."""
        with connect(self.dsn) as conn:
            checked = check_scripts(conn, self.scripts, writes=self.writes,
                                    variables=self.variables)
        self.writing = any(c.writes for c in checked)
        self._dir = Path(tempfile.mkdtemp(prefix="harmony-scripts-"))
        # a workload only a duet's client uses is never stopped: its scripts go with it
        weakref.finalize(self, shutil.rmtree, self._dir, True)
        pgbench_parses(self.pgbench, self.scripts, self.variables, self._dir)
        self._files = []
        for i, script in enumerate(self.scripts):
            path = script.path
            if script.text != _read(path):  # a statement of a .sql file: its own script
                path = self._dir / f"script-{i}.pgbench"
                path.write_text(script.text)
            self._files.append(f"{path}@{script.weight}")
        logger.info("scripted workload: %d script(s), %d clients, %s", len(self.scripts),
                    self.clients, "writes allowed" if self.writes else "read-only")
        self._running = True

    def stop(self) -> None:
        super().stop()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def progress_command(self, dsn: str, seconds: int) -> tuple[list[str], dict[str, str] | None]:
        """The user's scripts with a per-second report (a duet's client): the scripts are
        checked and written first if :meth:`start` has not run, so pgbench never falls back
        on its built-in TPC-B (a duet once ran that on a ``.sql`` mix's database)."""
        if not self._files:
            self.start()
        return super().progress_command(dsn, seconds)

    def _script_args(self) -> list[str]:
        if not self._files:
            raise WorkloadError("the scripted workload's scripts are not written yet "
                                "(start() checks and writes them): pgbench would run its "
                                "built-in TPC-B instead")
        args = ["-M", "prepared", "-r"]
        for name, value in self.variables.items():
            args += ["-D", f"{name}={value}"]
        for spec in self._files:
            args += ["-f", spec]
        return args

    def _environment(self) -> dict[str, str]:
        options = [os.environ.get("PGOPTIONS", "")]
        if not self.writes:
            options.append("-c default_transaction_read_only=on")
        if self.statement_timeout_s is not None:
            options.append(f"-c statement_timeout={round(self.statement_timeout_s * 1000)}")
        return {**os.environ, "PGOPTIONS": " ".join(o for o in options if o)}

    def _label(self, script_no: int) -> str:
        return self.scripts[script_no].source if script_no < len(self.scripts) else "?"

    def _labels(self) -> tuple[str, ...]:
        return tuple(s.source for s in self.scripts)

    def _mix_name(self) -> str:
        return ",".join(f"{s.source}@{s.weight}" for s in self.scripts)

    def _report(self, out: str, err: str, code: int, logdir: Path) -> Sample:
        sample = super()._report(out, err, code, logdir)
        return replace(sample, per_statement=self.statement_latencies(out))

    def statement_latencies(self, out: str) -> dict[str, float]:
        """Mean latency (s) of each SQL command, by ``file, line N``, from ``pgbench -r``."""
        latencies: dict[str, float] = {}
        sections: list[tuple[int, int]] = [(int(m.group(1)) - 1, m.end())
                                           for m in _SECTION.finditer(out)]
        if not sections and len(self.scripts) == 1:  # one script: pgbench prints no section
            start = out.find("statement latencies")
            sections = [(0, start)] if start >= 0 else []
        for k, (number, begin) in enumerate(sections):
            if number >= len(self.scripts):
                continue
            script = self.scripts[number]
            end = sections[k + 1][1] if k + 1 < len(sections) else len(out)
            rows = [float(m.group(1)) for line in out[begin:end].splitlines()
                    if (m := _STATEMENT_ROW.match(line))]
            if len(rows) != len(script.commands):
                continue  # pgbench split the script differently: no per-statement figures
            for command, ms in zip(script.commands, rows, strict=True):
                if command.meta is None:
                    latencies[f"{script.file}, line {command.line}"] = ms / 1000.0
        return latencies


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None
