"""The duet's driver: the same workload client, with the same clients and parameters, run
against both clusters at once, each reporting its transactions every second
(``pgbench -P 1 --progress-timestamp``); the two series paired by the second they report.

The ratio is the workload's own count (pgbench's transactions per second), as its client
would count it. Every client carries the run's mark in its environment (it inherits the
tuner's), so the guard ends them if the tuner dies mid-segment.
"""

from __future__ import annotations

import itertools
import logging
import math
import re
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harmony_base.errors import DatabaseError

logger = logging.getLogger(__name__)

#: a pgbench progress line with ``--progress-timestamp``: the epoch second and its tps
PROGRESS = re.compile(r"progress: ([\d.]+) s, ([\d.]+) tps")

#: how to start the workload's client on a DSN for some seconds: (argv, environment or None)
Command = Callable[[str, int], tuple[list[str], "dict[str, str] | None"]]
#: one segment on both DSNs: (dsns, seconds, seconds to leave out, CPUs of each client) →
#: the paired per-second counts
Runner = Callable[[tuple[str, str], int, float, tuple["str | None", "str | None"]],
                  "PairedSeconds"]


@dataclass(frozen=True)
class PairedSeconds:
    """One segment's per-second counts of both clusters, paired by second (cluster 0 is the
    server, 1 its clone); ``skew_s``: the largest gap between paired report times."""

    seconds: tuple[float, ...]
    counts: tuple[tuple[float, ...], tuple[float, ...]]
    skew_s: float

    def log_ratios(self, numerator: int) -> list[float]:
        """Per second ``log(count[numerator] / count[other])`` (seconds with a zero dropped)."""
        a, b = self.counts[numerator], self.counts[1 - numerator]
        return [math.log(x / y) for x, y in zip(a, b, strict=True) if x > 0 and y > 0]


def parse_progress(text: str) -> list[tuple[float, float]]:
    """(epoch second, tps) of every progress line in pgbench's stderr ``text``."""
    return [(float(m.group(1)), float(m.group(2))) for m in PROGRESS.finditer(text)]


def pair_by_second(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]],
                   *, skip_s: float = 0.0) -> PairedSeconds:
    """The two series' counts at the seconds both reported (their report times rounded to
    the second), the first ``skip_s`` seconds after the earliest report left out."""
    if not a or not b:
        return PairedSeconds((), ((), ()), 0.0)
    first = min(a[0][0], b[0][0]) + skip_s
    by_b = {round(t): (t, v) for t, v in b}
    rows = [(t, v, by_b[round(t)]) for t, v in a if t >= first and round(t) in by_b]
    return PairedSeconds(tuple(t for t, _, _ in rows),
                         (tuple(v for _, v, _ in rows), tuple(w for _, _, (_, w) in rows)),
                         max((abs(t - u) for t, _, (u, _) in rows), default=0.0))


def pin_postmaster(data_dir: Path | str, cpus: str) -> bool:
    """Set the CPU affinity of the postmaster of ``data_dir`` and of its running children to
    ``cpus`` (``taskset`` list syntax; backends forked later inherit it); whether it could."""
    try:
        pid = int((Path(data_dir) / "postmaster.pid").read_text().split()[0])
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except (OSError, ValueError, IndexError):
        return False
    ok = True
    for p in [str(pid), *children]:
        done = subprocess.run(["taskset", "-a", "-p", "-c", cpus, p], capture_output=True,
                              check=False)
        ok = ok and done.returncode == 0
    return ok


def client_runner(command: Command, seed: int | None = None) -> Runner:
    """A :data:`Runner` of the workload's own client reporting per second (pgbench); with
    ``seed``, both clients of a segment share one random seed, ``seed`` + the segment's
    number (common random numbers: see :func:`run_together`)."""
    segments = itertools.count()

    def run(dsns: tuple[str, str], seconds: int, skip_s: float,
            cpus: tuple[str | None, str | None]) -> PairedSeconds:
        k = next(segments)
        return run_together(command, dsns, seconds, skip_s=skip_s, cpus=cpus,
                            seed=None if seed is None else seed + k)
    return run


def run_together(command: Command, dsns: tuple[str, str], seconds: int, *,
                 skip_s: float = 0.0, cpus: tuple[str | None, str | None] = (None, None),
                 seed: int | None = None) -> PairedSeconds:
    """The workload's client on both ``dsns`` at once for ``seconds``; their per-second
    counts paired (the first ``skip_s`` seconds left out); ``cpus``: each client pinned to
    those CPUs (``taskset -c``), where given.

    ``seed`` (pgbench's ``--random-seed``) is given to both clients: each of their clients
    then draws the same statements with the same parameters in the same order on both
    clusters, so a second or a batch that drew more of a mix's heavy statement drew them on
    both, and the draws cancel in the ratio (common random numbers). Without it pgbench
    seeds from the clock, and each cluster's count carries its own draws."""
    procs = []
    for dsn, cpu in zip(dsns, cpus, strict=True):
        argv, env = command(dsn, seconds)
        if seed is not None:
            argv = [argv[0], f"--random-seed={seed}", *argv[1:]]
        if cpu is not None:
            argv = ["taskset", "-c", cpu, *argv]
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True, env=env))
    series = []
    try:
        for proc, dsn in zip(procs, dsns, strict=True):
            _, err = proc.communicate(timeout=seconds + 120)
            if proc.returncode != 0:
                raise DatabaseError(f"the duet's workload client on {dsn} failed (exit "
                                    f"{proc.returncode}): {err.strip()[-500:]}")
            series.append(parse_progress(err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return pair_by_second(series[0], series[1], skip_s=skip_s)
