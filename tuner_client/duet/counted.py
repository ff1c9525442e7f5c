"""The duet's driver for a workload without a per-second report (TPC-H streams, a replay):
one driver per server, each in a process of its own pinned to its cluster's CPUs where the
duet pins them, started together, and each server's committed transactions read every second
from ``pg_stat_database`` by this process (each stream's query commits on its own, so this is
the streams' completions; the reading itself adds one a second to each side alike).

Why processes: two drivers in the tuner's process share one interpreter lock and no CPU of
their own, so the two sides' streams took turns at a lock the clusters do not see; pgbench's
clients, each a process pinned beside its cluster, read an A/A of shared_buffers at ±6.5 % in
120 s where unpinned they read ±10.8 % (``benchmarks/results/duet_race.pinned.md``).

A driver process lives at most the segment plus :data:`GRACE_S`, and ends early when the
tuner that started it is gone (its parent changes), so a tuner killed mid-segment leaves no
driver behind; it carries the run's mark in its environment like every client of the run.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Sequence
from multiprocessing.synchronize import Event

import psycopg

from harmony_base.errors import DatabaseError
from tuner_client.config import WorkloadConfig
from tuner_client.duet.driver import PairedSeconds, Runner
from workloads.factory import make_workload

#: seconds a driver process outlives its segment at most (a stuck stop, a slow start)
GRACE_S = 30.0
#: seconds both drivers may take to start (spawn, imports, connections)
START_S = 60.0


def cpu_set(cpus: str) -> set[int]:
    """The CPUs of a ``taskset`` list (``0``, ``0-3``, ``0,2-3``)."""
    out: set[int] = set()
    for part in cpus.split(","):
        low, _, high = part.strip().partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def _drive(workload: WorkloadConfig, seed: int, dsn: str, seconds: float,
           cpus: str | None, ready: Event, stop: Event) -> None:  # pragma: no cover (child)
    """A driver process: pinned to ``cpus``, the workload on ``dsn`` until ``stop``, the
    segment's ``seconds`` plus :data:`GRACE_S`, or its parent is gone."""
    parent = os.getppid()
    if cpus is not None:
        os.sched_setaffinity(0, cpu_set(cpus))
    driver = make_workload(workload, dsn, seed=seed)
    driver.start()
    ready.set()
    deadline = time.monotonic() + seconds + GRACE_S
    try:
        while not stop.wait(0.5):
            if os.getppid() != parent or time.monotonic() > deadline:
                break
    finally:
        driver.stop()


def counted_runner(workload: WorkloadConfig, seed: int) -> Runner:
    """A :data:`~tuner_client.duet.driver.Runner` of the run's workload without a per-second
    report: a driver process per server, pinned as the duet's ``cpus`` say."""
    def run(dsns: tuple[str, str], seconds: int, skip_s: float,
            cpus: tuple[str | None, str | None]) -> PairedSeconds:
        return run_counted(workload, seed, dsns, seconds, skip_s=skip_s, cpus=cpus)
    return run


def run_counted(workload: WorkloadConfig, seed: int, dsns: tuple[str, str],
                seconds: int, *, skip_s: float = 0.0,
                cpus: tuple[str | None, str | None] = (None, None)) -> PairedSeconds:
    """Both drivers on ``dsns`` for ``seconds`` once both run, their servers' commits per
    second paired by the second they were read in (the first ``skip_s`` seconds left
    out)."""
    ctx = multiprocessing.get_context("spawn")  # the tuner has threads: no fork
    stop = ctx.Event()
    readies = [ctx.Event() for _ in dsns]
    procs = [ctx.Process(target=_drive, args=(workload, seed, dsn, float(seconds), cpu, ready,
                                              stop), daemon=True, name=f"duet-driver-{k}")
             for k, (dsn, cpu, ready) in enumerate(zip(dsns, cpus, readies, strict=True))]
    conns: list[psycopg.Connection[tuple[object, ...]]] = []
    read = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
    try:
        for proc in procs:
            proc.start()
        waited = time.monotonic() + START_S
        for proc, ready in zip(procs, readies, strict=True):
            if not ready.wait(max(0.0, waited - time.monotonic())):
                raise DatabaseError(f"the duet's workload driver {proc.name} did not start "
                                    f"within {START_S:g} s (exit code {proc.exitcode})")
        for dsn in dsns:
            conns.append(psycopg.connect(dsn, autocommit=True, connect_timeout=10))
        return _count(conns, read, seconds, skip_s, procs)
    except psycopg.Error as exc:
        raise DatabaseError(f"the duet could not read its servers' commits: {exc}") from exc
    finally:
        stop.set()
        for conn in conns:
            conn.close()
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)


def _count(conns: list[psycopg.Connection[tuple[object, ...]]], read: str, seconds: int,
           skip_s: float, procs: Sequence[multiprocessing.process.BaseProcess]) -> PairedSeconds:
    """Each server's commits every second for ``seconds`` (a driver that died ends it)."""
    started = time.time()
    last = [_commits(c, read) for c in conns]
    stamps: list[float] = []
    counts: tuple[list[float], list[float]] = ([], [])
    tick = started
    while tick - started < seconds:
        tick += 1.0
        time.sleep(max(0.0, tick - time.time()))
        dead = [p.name for p in procs if not p.is_alive()]
        if dead:
            raise DatabaseError(f"the duet's workload driver {', '.join(dead)} ended "
                                f"mid-segment; see the log for its error")
        now = [_commits(c, read) for c in conns]
        if tick - started > skip_s:
            stamps.append(tick)
            for side in (0, 1):
                counts[side].append(now[side] - last[side])
        last = now
    return PairedSeconds(tuple(stamps), (tuple(counts[0]), tuple(counts[1])), 0.0)


def _commits(conn: psycopg.Connection[tuple[object, ...]], query: str) -> float:
    """The server's committed transactions so far (its backends' counters flushed now)."""
    conn.execute("SELECT pg_stat_clear_snapshot()")
    row = conn.execute(query).fetchone()
    return float(str(row[0])) if row and row[0] is not None else 0.0
