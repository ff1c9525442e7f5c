"""Several identical replicas of one database, tuned at once in one session.

Each replica is a :class:`~tuner_client.target.Target` (its own DSN, controller and workload
driver) with its own measurer. Embedded replicas are clones of the embedded cluster (stop,
copy the data directory, start; each with its own port, memory cgroup and optional CPU cap);
existing servers are listed under ``replicas.targets``. The coordinator (the process that owns
the run, :class:`tuner_client.flows.Tuner`) keeps them in a :class:`ReplicaPool`: the search
sessions hand one trial to each free replica (:mod:`tuner_client.phases.parallel`), a replica
that dies is dropped (its trial goes back to the session), and every live replica is left with
its original configuration at the end.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import psycopg

from harmony.base.errors import ConfigError, DatabaseError, HarmonyError
from tuner_client.config import TunerConfig
from tuner_client.local_cluster import LocalCluster
from tuner_client.measurer import PointRecord
from tuner_client.phases.blocks import Reference
from tuner_client.phases.state import RunContext, RunState
from tuner_client.target import EMBEDDED_DBNAME, Target, make_controller, read_catalog

logger = logging.getLogger(__name__)


@dataclass
class Replica:
    """One replica of the run: its name, target and (once prepared) its own run context."""

    name: str
    target: Target
    #: opened by the pool (so closed by it); False for the run's own target
    owned: bool = False
    #: the run's context with this replica's target and measurer (set by :meth:`ReplicaPool.
    #: prepare`; the primary's is the run's own)
    ctx: RunContext | None = None
    #: why the replica was dropped (None while it is alive)
    dropped: str | None = None

    @property
    def alive(self) -> bool:
        return self.dropped is None

    def answers(self) -> bool:
        """True when the replica's database accepts a connection and a query within 5 s."""
        return database_answers(self.target.dsn)


def database_answers(dsn: str) -> bool:
    """True when ``dsn`` accepts a connection and a query within 5 s."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


class ReplicaPool:
    """The run's replicas; the first is the primary (the run's own target and measurer)."""

    def __init__(self, replicas: list[Replica], *, lease_s: float = 120.0) -> None:
        names = [r.name for r in replicas]
        if len(set(names)) != len(names):
            raise ConfigError(f"replica names must be unique, got {names}")
        if not replicas:
            raise ConfigError("a replica pool needs at least one replica")
        self.replicas = replicas
        self.lease_s = lease_s
        self.lock = threading.Lock()
        #: session label -> each replica's reference and the pooled level, measured when
        #: the session was defined (:func:`tuner_client.phases.parallel.open_references`)
        self.opened: dict[str, tuple[dict[str, Reference], float | None]] = {}

    @property
    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive]

    def prepare(self, ctx: RunContext) -> None:
        """Give every replica its own measurer (same knobs, budget and workload kind as the
        primary's) and check it starts from the primary's configuration."""
        from tuner_client.phases.prepare import make_measurer

        primary = self.replicas[0]
        primary.ctx = ctx
        names = list(ctx.original)
        for replica in self.replicas[1:]:
            measurer = make_measurer(ctx.config, replica.target, ctx.budget, ctx.metrics)
            try:
                current = measurer.current_settings(list(ctx.measurer.in_force))
            except BaseException:
                measurer.close()
                raise
            measurer.in_force = dict(current)
            differs = {n: (current[n], ctx.original[n]) for n in names
                       if current[n] != ctx.original[n]}
            if differs:
                measurer.close()
                raise ConfigError(f"replica {replica.name} does not start from the primary's "
                                  f"configuration (knob: (replica, primary)): {differs}; "
                                  f"replicas must be identical")
            auto_conf = None
            with contextlib.suppress(HarmonyError, OSError, AttributeError):
                auto_conf = replica.target.controller.read_auto_conf()
            replica.ctx = replace(ctx, target=replica.target, measurer=measurer,
                                  original_auto_conf=auto_conf)
            measurer.start()
        logger.info("tuning on %d replicas: %s", len(self.replicas),
                    ", ".join(f"{r.name} ({r.target.dsn})" for r in self.replicas))

    def drop(self, replica: Replica, reason: str, state: RunState) -> None:
        """Take a replica out of the run (it died or stopped answering) and say so."""
        with self.lock:
            if replica.dropped is not None:
                return
            replica.dropped = reason
            left = [r.name for r in self.live]
        if replica.ctx is not None:
            with contextlib.suppress(HarmonyError, OSError, psycopg.Error):
                replica.ctx.measurer.stop()  # its workload streams would only fail on
        state.decide(f"replica {replica.name} dropped: {reason}; the run goes on with "
                     f"{len(left)} replica(s) {left}")

    def apply_everywhere(self, settings: dict[str, str], *, check_budget: bool = True) -> None:
        """Put ``settings`` in force on every live replica other than the primary (the
        phases apply them on the primary themselves)."""
        for replica in self.replicas[1:]:
            if not replica.alive or replica.ctx is None:
                continue
            outcome = replica.ctx.measurer.apply(settings, check_budget=check_budget)
            if outcome.failure is not None:
                logger.warning("replica %s: could not apply %s: %s", replica.name, settings,
                               outcome.failure)

    def leave(self, best: PointRecord | None, *, keep_best: bool) -> None:
        """Every replica but the primary left with its original (or the best) configuration;
        a dead one is only reported."""
        from tuner_client.phases.prepare import leave_server

        for replica in self.replicas[1:]:
            if replica.ctx is None:
                continue
            if not replica.answers():
                logger.error("replica %s does not answer; its configuration cannot be "
                             "restored (it was dropped: %s)", replica.name, replica.dropped)
                replica.ctx.measurer.close()
                continue
            leave_server(replica.ctx, best, keep_best=keep_best)

    def close(self) -> None:
        """Stop the embedded clones this pool started."""
        for replica in self.replicas:
            if replica.owned:
                replica.target.close()


def open_replicas(config: TunerConfig, primary: Target, state_dir: Path | None) -> list[Replica]:
    """The configured replicas besides ``primary``: clones of the embedded cluster
    (``replicas.count - 1``) and the existing servers of ``replicas.targets``."""
    rep = config.replicas
    out: list[Replica] = []
    try:
        if rep.count > 1:
            if primary.cluster is None or state_dir is None:
                raise ConfigError(f"{config.source}: replicas.count clones the embedded cluster, "
                                  f"but this run's target is not embedded")
            limits = list(rep.cpu_limits) + [None] * (rep.count - len(rep.cpu_limits))
            for i, cluster in enumerate(clone_cluster(primary.cluster, state_dir, rep.count - 1,
                                                      cpu_limits=limits), 1):
                dsn = cluster.dsn_for(EMBEDDED_DBNAME)
                target = Target(dsn=dsn, catalog=read_catalog(dsn),
                                controller=make_controller(config, dsn=dsn, cluster=cluster),
                                cluster=cluster, ram_bytes=cluster.effective_ram_bytes())
                out.append(Replica(f"replica-{i + 1}", target, owned=True))
        for spec in rep.targets:
            from tuner_client import controllers

            controller = controllers.make_controller(spec.controller.kind, dsn=spec.dsn,
                                                     **dict(spec.controller.options))
            out.append(Replica(spec.name, Target(dsn=spec.dsn, catalog=read_catalog(spec.dsn),
                                                 controller=controller, cluster=None,
                                                 ram_bytes=None)))
    except BaseException:
        for replica in out:
            if replica.owned:
                replica.target.close()
        raise
    return out


def clone_cluster(primary: LocalCluster, state_dir: Path, count: int, *,
                  cpu_limits: list[float | None] | None = None) -> list[LocalCluster]:
    """``count`` started clones of ``primary`` (stopped, copied, restarted), each in
    ``state_dir/replica-N`` with its own port, the primary's memory limit and
    ``cpu_limits[N]`` CPUs (``cpu_limits[0]`` caps the primary itself).

    A clone left by an earlier run in the same state directory is reused as it is.
    """
    limits = cpu_limits or []
    clones: list[LocalCluster] = []
    was_running = primary.is_running()
    primary.stop()
    try:
        if limits and limits[0] is not None:
            primary.cpu_limit = limits[0]
        for i in range(1, count + 1):
            clone = LocalCluster(state_dir / f"replica-{i + 1}",
                                 memory_limit_bytes=primary.memory_limit_bytes,
                                 timeout_s=primary.timeout_s,
                                 template_data_dir=primary.data_dir,
                                 cpu_limit=limits[i] if i < len(limits) else None)
            if clone.is_initialized():
                clone.stop()  # a leftover of an earlier run: started afresh on this port
            clone.start()
            clones.append(clone)
    except BaseException:
        for clone in clones:
            with contextlib.suppress(DatabaseError):
                clone.stop()
        raise
    finally:
        if was_running:
            primary.start()
    return clones
