"""Per-transaction assignment with pgbench: one script variant per configuration, at equal
weight, so pgbench's own weighted random choice assigns every transaction a configuration.

A variant is the template's script inside ``BEGIN; SET LOCAL ...; <body>; END;`` (a body
with its own ``BEGIN`` gets the ``SET LOCAL`` lines right after it). pgbench numbers the
scripts in the order of ``-f``; script ``t·K + k`` is template t under configuration k, and
the per-transaction log (``-l``: client, transaction, latency µs, script number, epoch s,
µs) gives every transaction's configuration, template, end time and latency (a client's
cycle, see :meth:`PgbenchAssignment._trace`). The wrapper's own round trips (``BEGIN``, the
``SET LOCAL`` lines, ``END``) are not the workload's: a few ``SELECT 1`` scripts drawn beside
the variants measure them, and the trace carries their cost (``Trace.overhead``) for the
estimators to subtract.

Statements go in prepared mode (``-M prepared``, as applications send them) while every
configuration is carried by ``SET LOCAL`` lines: a variant's statements are planned under its
own settings. A run whose configurations set nothing measures the server's configuration,
which a switchback changes under it by reload; a prepared statement may keep its generic plan
across reloads (a parameterless one always runs the plan made at its first execution: on
PostgreSQL 15 a reload of random_page_cost and max_parallel_workers_per_gather left EXECUTE's
bitmap scan and its two parallel workers in place), so such a run uses the extended protocol
(``-M extended``: planned at every execution, under the configuration then in force).
"""

from __future__ import annotations

import logging
import math
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harmony_base.errors import WorkloadError
from workloads.connect import connect
from workloads.per_transaction.settings import (
    Configuration,
    check_session_settable,
    padded_set_local,
)
from workloads.per_transaction.trace import CHECK_S, Settled, Trace, concat
from workloads.pgbench import find_pgbench
from workloads.script_file import Script, blank_quoted, split_commands

logger = logging.getLogger(__name__)

_BEGIN_LINE = re.compile(r"^[ \t]*(begin|start[ \t]+transaction)\b[^;\n]*;[ \t]*$", re.I | re.M)
_BEGIN_KEYWORDS = ("begin", "start")
#: a piece's seed is the run's plus this times the piece's index (no two pieces repeat draws)
PIECE_SEED_STEP = 7919
#: pgbench's query modes (``-M``)
QUERY_MODES = ("simple", "extended", "prepared")
#: the wrapper's calibration (a run whose configurations set something): ``SELECT 1`` bare,
#: in a block of its own, and under each configuration's wrapper, each drawn this share of
#: the time; the cycles' differences are the wrapper's cost per transaction under the run's
#: own load (on the shop's lookups, 8 clients on 2 cores: 9,200 tps bare, 3,400 wrapped)
CALIBRATION_SHARE = 0.01
#: every variant's weight is its template's times this, so a calibration weight can be small
WEIGHT_SCALE = 100
CALIBRATION_BODY = "SELECT 1;\n"


@dataclass(frozen=True)
class Template:
    """A pgbench script to compare configurations on: its label, text and weight."""

    name: str
    text: str
    weight: int = 1


def builtin_template(name: str, bin_dir: Path | str | None = None) -> Template:
    """pgbench's built-in script ``name`` (``tpcb-like``, ``select-only``, ...) as a template,
    read from ``pgbench --show-script``."""
    done = subprocess.run([str(find_pgbench(bin_dir)), f"--show-script={name}"],
                          capture_output=True, text=True, check=False)
    text = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("--"))
    if done.returncode != 0 or not text.strip():
        raise WorkloadError(f"pgbench has no built-in script {name!r}: {done.stderr.strip()}")
    return Template(name, text.strip() + "\n")


def script_templates(scripts: Sequence[Script]) -> list[Template]:
    """Templates from the scripted workload's scripts (one per .sql statement)."""
    return [Template(s.source, s.text, s.weight) for s in scripts]


def _begins(commands: Sequence[Any]) -> list[Any]:
    """The commands that open a transaction block."""
    return [c for c in commands if c.meta is None and c.keyword in _BEGIN_KEYWORDS]


def variant_text(template: Template, settings: Sequence[str]) -> str:
    """The template's script running in one transaction that starts with ``settings``
    (rendered ``SET LOCAL`` statements)."""
    commands = split_commands(template.text, template.name)
    begins = _begins(commands)
    lines = "".join(f"{s};\n" for s in settings)
    if len(begins) > 1:
        raise WorkloadError(f"script {template.name} runs {len(begins)} transactions; "
                            f"per-transaction assignment needs one transaction per script")
    if begins:
        match = _BEGIN_LINE.search(template.text)
        if match is None:
            raise WorkloadError(f"script {template.name}: its BEGIN must stand on a line of its "
                                f"own for the SET LOCAL lines to follow it")
        return template.text[:match.end()] + "\n" + lines.rstrip("\n") + template.text[match.end():]
    body = template.text.rstrip()
    sql_commands = [c for c in commands if c.meta is None]
    if sql_commands and commands[-1].meta is None and not blank_quoted(body).rstrip().endswith(";"):
        body += ";"
    return f"BEGIN;\n{lines}{body}\nEND;\n"


class PgbenchAssignment:
    """pgbench running ``templates`` with every transaction under one of ``configurations``,
    drawn at random (equal weights), against ``dsn`` with ``clients`` connections."""

    def __init__(self, dsn: str, configurations: Sequence[Configuration],
                 templates: Sequence[Template], *, clients: int = 4, threads: int | None = None,
                 variables: Mapping[str, int | float | str] | None = None,
                 bin_dir: Path | str | None = None, seed: int = 0,
                 pgoptions: str = "", query_mode: str | None = None) -> None:
        if not templates:
            raise WorkloadError("a per-transaction pgbench run needs at least one script")
        calibration = 2 + len(configurations) if any(configurations) else 0
        if len(templates) * len(configurations) + calibration > 128:
            raise WorkloadError(f"pgbench runs at most 128 scripts, but {len(templates)} "
                                f"scripts × {len(configurations)} configurations make "
                                f"{len(templates) * len(configurations)}, and the wrapper's "
                                f"calibration {calibration} more")
        self.dsn = dsn
        self.configurations = tuple(dict(c) for c in configurations)
        self.templates = tuple(templates)
        self.clients = clients
        self.threads = threads or max(1, min(clients, 2))
        if clients % self.threads:
            raise WorkloadError(f"pgbench clients ({clients}) must be a multiple of threads "
                                f"({self.threads})")
        self.variables = dict(variables or {})
        self.pgbench = find_pgbench(bin_dir)
        self.seed = seed
        self.pgoptions = pgoptions
        if query_mode is not None and query_mode not in QUERY_MODES:
            raise WorkloadError(f"pgbench's query mode must be one of {QUERY_MODES}, but got "
                                f"{query_mode!r}")
        # only the server's configuration (a switchback's driver): planned at every execution
        self.query_mode = query_mode or (
            "prepared" if any(self.configurations) else "extended")
        with connect(dsn) as conn:
            check_session_settable(conn, self.configurations)
            self._settings = [[s.as_string(conn) for s in lines]
                              for lines in padded_set_local(self.configurations)]
        #: per template: it opens its own block (its wrapper is then the SET LOCAL lines only)
        self._own_block = [bool(_begins(split_commands(t.text, t.name))) for t in self.templates]

    @property
    def calibrated(self) -> bool:
        """Whether the run measures its wrapper (some configuration sets something)."""
        return any(self.configurations)

    def _write_variants(self, directory: Path) -> list[str]:
        """The ``-f`` options: script ``t·K + k`` is template t under configuration k; with
        :attr:`calibrated`, then ``SELECT 1`` bare, in a block, and wrapped per configuration."""
        specs = []
        for t, template in enumerate(self.templates):
            for k, settings in enumerate(self._settings):
                path = directory / f"t{t}-c{k}.pgbench"
                path.write_text(variant_text(template, settings))
                specs += ["-f", f"{path}@{template.weight * WEIGHT_SCALE}"]
        if self.calibrated:
            total = WEIGHT_SCALE * len(self._settings) * sum(t.weight for t in self.templates)
            weight = max(1, round(CALIBRATION_SHARE * total))
            texts = [CALIBRATION_BODY, f"BEGIN;\n{CALIBRATION_BODY}END;\n"] + [
                variant_text(Template("calibration", CALIBRATION_BODY), settings)
                for settings in self._settings]
            for i, text in enumerate(texts):
                path = directory / f"calibration-{i}.pgbench"
                path.write_text(text)
                specs += ["-f", f"{path}@{weight}"]
        return specs

    def _overhead(self, cycles: Mapping[int, list[float]]) -> np.ndarray | None:
        """Per configuration and template, the wrapper's seconds a transaction: the wrapped
        ``SELECT 1``'s mean cycle over the bare one's (over the one in a block of its own, for
        a template with its own ``BEGIN``, whose block the client makes anyway); None when a
        calibration script finished no transaction. The wrapped cycles are pooled over the
        configurations: their SET LOCAL lines differ in values only, and a cycle's heavy tail
        made separate means differ 2x between arms of one run (3.5 and 1.7 ms)."""
        k = len(self.configurations)
        wrapped = [c for i in range(2, 2 + k) for c in cycles.get(i, [])]
        if not (cycles.get(0) and cycles.get(1) and wrapped):
            return None
        bare, block, cost = (float(np.mean(cycles[0])), float(np.mean(cycles[1])),
                             float(np.mean(wrapped)))
        row = [max(0.0, cost - (block if own else bare)) for own in self._own_block]
        return np.array([row] * k)

    def run(self, seconds: int, *, settled: Settled | None = None, min_s: float = 0.0,
            check_s: float = CHECK_S) -> Trace:
        """Run pgbench for ``seconds`` whole seconds; every logged transaction, in a trace.

        With ``settled``, the run goes in pieces (pgbench writes its log at its exit): a first
        of ``min_s``, then of ``check_s``, each a pgbench of its own with its own seed, until
        ``settled`` of the trace so far returns True or ``seconds`` are spent."""
        if seconds < 1:
            raise WorkloadError(f"a per-transaction pgbench run lasts >= 1 s, but got {seconds}")
        if settled is None:
            return self._run_once(seconds, self.seed)
        pieces: list[Trace] = []
        spent = 0
        while spent < seconds:
            step = math.ceil(min_s) if not pieces else math.ceil(check_s)
            step = max(1, min(step, seconds - spent))
            pieces.append(self._run_once(step, self.seed + PIECE_SEED_STEP * len(pieces)))
            spent += step
            if spent < seconds and settled(concat(pieces)):
                logger.info("per-transaction pgbench run settled after %d s of %d s",
                            spent, seconds)
                break
        return concat(pieces)

    def _run_once(self, seconds: int, seed: int) -> Trace:
        """One pgbench of ``seconds`` seeded with ``seed``."""
        directory = Path(tempfile.mkdtemp(prefix="harmony-pertx-"))
        try:
            cmd = [str(self.pgbench), "-n", "-M", self.query_mode,
                   *self._write_variants(directory),
                   "-c", str(self.clients), "-j", str(self.threads), "-T", str(seconds),
                   f"--random-seed={seed}", "-l",
                   f"--log-prefix={directory / 'txn'}"]
            for name, value in self.variables.items():
                cmd += ["-D", f"{name}={value}"]
            env = {**os.environ, "PGOPTIONS": self.pgoptions} if self.pgoptions else None
            began = time.time()
            done = subprocess.run([*cmd, self.dsn], capture_output=True, text=True,
                                  check=False, env=env)
            if done.returncode not in (0, 2) or "tps =" not in done.stdout:
                raise WorkloadError(f"pgbench exited {done.returncode}: "
                                    f"{done.stderr.strip()[-2000:]}")
            return self._trace(directory, float(seconds), began)
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def _trace(self, directory: Path, seconds: float, began: float) -> Trace:
        """The trace from pgbench's logs. A transaction's latency is its client's cycle: the
        time from the client's previous end to this end (pgbench logs some sub-millisecond
        latencies as 0 µs, and the cycle is what a closed loop's throughput is made of); a
        client's first transaction keeps its logged latency."""
        k = len(self.configurations)
        ends: dict[int, list[tuple[int, float, float, int]]] = {}
        failed: list[tuple[int, int, float, float, bool]] = []
        for log in directory.glob("txn.*"):
            for line in log.read_text().splitlines():
                f = line.split()
                if len(f) < 6:
                    continue
                script, ended = int(f[3]), int(f[4]) + int(f[5]) / 1e6
                if f[2].isdigit():
                    ends.setdefault(int(f[0]), []).append((int(f[1]), ended, int(f[2]) / 1e6,
                                                           script))
                else:  # a failed transaction (pgbench 15+: "failed", "serialization", ...)
                    failed.append((script % k, script // k, ended, 0.0, False))
        calibration = len(self.templates) * k  # scripts from here on calibrate the wrapper
        rows = [r for r in failed if r[1] < len(self.templates)]
        cycles: dict[int, list[float]] = {i: [] for i in range(2 + k)} if self.calibrated \
            else {}
        t0 = began  # the origin of a run that logged nothing
        for client in ends.values():
            client.sort()
            previous = None
            for _, ended, logged, script in client:
                latency = ended - previous if previous is not None else logged
                previous = ended
                if script >= calibration:
                    cycles[script - calibration].append(latency)
                    continue
                rows.append((script % k, script // k, ended - latency, latency, True))
        if rows:
            t0 = min(r[2] for r in rows)
            rows = [(c, t, s - t0, lat, ok) for c, t, s, lat, ok in rows]
        logger.info("per-transaction pgbench: %d transactions in %.0f s over %d configurations",
                    len(rows), seconds, k)
        overhead = self._overhead(cycles) if self.calibrated else None
        if overhead is not None:
            logger.info("per-transaction pgbench: the wrapper costs %s ms a transaction "
                        "(configurations × templates), subtracted from their latencies",
                        np.round(1e3 * overhead, 3).tolist())
        return Trace.from_rows(self.configurations, [t.name for t in self.templates], rows,
                               seconds, origin=t0, overhead=overhead)
