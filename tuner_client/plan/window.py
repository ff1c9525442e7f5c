"""How long one measuring window of a run lasts, known before the run.

A window of ``measure.seconds`` is that long. A window of ``measure.queries`` completions has
no known length until the workload runs, so the plan estimates it: on a server named by a DSN
from ``pg_stat_statements``' mean execution time (read-only), and for the embedded cluster by
timing one window of the real workload on the plan's throw-away cluster, loaded with the
workload's data (:func:`timed_window`; the user's servers are not touched).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from harmony_base.errors import HarmonyError
from tuner_client.config import TunerConfig
from tuner_client.plan.workload_stats import WorkloadStats
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.target import fill_embedded
from workloads.factory import make_workload

logger = logging.getLogger(__name__)

#: the timed sample gives up after this long (the estimate then stays unknown)
SAMPLE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class TimedWindow:
    """One window of ``queries`` completions timed on the plan's throw-away cluster."""

    queries: int
    seconds: float
    #: what was loaded and run, for the plan's basis line
    workload: str
    #: one restart of the throw-away cluster, timed after the window
    restart_s: float
    #: the workload's shortest window (``Workload.MIN_WINDOW_S``): a shorter fixed-work one
    #: is measured as a time window this long
    least_s: float = 0.0


def needs_timing(config: TunerConfig) -> bool:
    """Whether a window's length is unknown before the run (a query-count window of a
    workload the tuner drives itself)."""
    m = config.measure
    return m.seconds is None and m.queries is not None and config.workload.observe is None


def timed_window(config: TunerConfig, cluster: LocalCluster, workdir: Path
                 ) -> TimedWindow | None:
    """Load the workload's data into the started throw-away ``cluster`` and time one window of
    ``measure.queries`` completions after ``measure.warmup_s`` of warm-up; None (with the
    reason logged) when the workload cannot run there or the window does not finish."""
    m, wl = config.measure, config.workload
    assert m.queries is not None  # needs_timing() holds
    started = time.monotonic()
    try:
        dsn = fill_embedded(config, cluster, workdir)
        driver = make_workload(config.workload, dsn, seed=config.seed)
        driver.start()
        try:
            if m.warmup_s > 0:
                driver.sample(seconds=m.warmup_s)
            sample = driver.sample(queries=m.queries, timeout_s=SAMPLE_TIMEOUT_S)
        finally:
            driver.stop()
        restarted = time.monotonic()
        cluster.restart()
        restart_s = time.monotonic() - restarted
    except HarmonyError as exc:
        logger.warning("plan: a window of %d queries could not be timed: %s", m.queries, exc)
        return None
    what = (f"TPC-H SF {wl.scale:g} `{wl.mix}`" if wl.kind == "tpch" and wl.schedule is None
            else f"the {wl.kind} workload")
    logger.info("plan: one window of %d queries of %s took %.1f s, a restart %.1f s (%.0f s "
                "with loading)", m.queries, what, sample.seconds, restart_s,
                time.monotonic() - started)
    return TimedWindow(queries=m.queries, seconds=sample.seconds, workload=what,
                       restart_s=restart_s, least_s=driver.MIN_WINDOW_S)


def with_restarts(seconds: float | None, restarts: int, timed: TimedWindow | None
                  ) -> float | None:
    """A phase's time with its restarts counted at the timed restart's length."""
    if seconds is None or timed is None:
        return seconds
    return seconds + restarts * timed.restart_s


def window_seconds(config: TunerConfig, stats: WorkloadStats | None,
                   timed: TimedWindow | None) -> tuple[float | None, str]:
    """A window's length in seconds (None: unknown) and the basis of that number."""
    m = config.measure
    if m.seconds is not None:
        basis = f"measure.seconds = {m.seconds:g} s"
        if config.workload.observe is not None:
            basis += " of the live traffic"
        return m.seconds, basis
    if timed is not None and timed.seconds < timed.least_s:
        return timed.least_s, (f"{timed.queries} queries of {timed.workload} took "
                               f"{timed.seconds:.2f} s on the plan's throw-away cluster, under "
                               f"the workload's {timed.least_s:g} s: windows of "
                               f"{timed.least_s:g} s instead")
    if timed is not None:
        return timed.seconds, (f"{timed.queries} queries a window; one window of {timed.workload} "
                               f"timed at the default configuration on the plan's throw-away "
                               f"cluster of this host's PostgreSQL took {timed.seconds:.1f} s, "
                               f"a restart {timed.restart_s:.1f} s; other configurations "
                               f"differ")
    if m.queries is not None and stats is not None and stats.statements is not None \
            and stats.statements.calls:
        mean_s = stats.statements.exec_ms / stats.statements.calls / 1000
        streams = max(1, config.workload.streams)
        return (m.queries * mean_s / streams,
                f"{m.queries} queries a window at the {mean_s * 1000:.1f} ms mean of "
                f"pg_stat_statements over {streams} streams")
    return None, (f"{m.queries} queries a window: its length is known only once the workload "
                  f"runs (give measure.seconds for a time estimate)")
