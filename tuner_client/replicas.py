"""The databases a run measures on: a pool of replicas, of one when there are no others.

Each replica is a :class:`~tuner_client.servers.target.Target` (its own DSN, controller and workload
driver) with its own measurer. Embedded replicas are clones of the embedded cluster (stop,
copy the data directory, start; each with its own port, memory cgroup and optional CPU cap);
existing servers are listed under ``replicas.targets``. The coordinator (the process that owns
the run, :class:`tuner_client.flows.Tuner`) keeps them in a :class:`ReplicaPool`, whose first
member is the run's own target: the search sessions hand one trial to each free replica
(:mod:`tuner_client.phases.session_loop`), settings are put in force on every member at once
(:meth:`ReplicaPool.apply`), a replica that dies is dropped (its trial goes back to the
session), and every live replica is left with its original configuration at the end
(:func:`tuner_client.phases.prepare.leave_server`). A run on one database is a pool of one.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

from harmony_base.errors import ConfigError, DatabaseError, HarmonyError
from tuner_client.api.client import HarmonyClient, Session
from tuner_client.config import TunerConfig
from tuner_client.measurer import ApplyOutcome, Measurer
from tuner_client.servers import controllers
from tuner_client.servers.local_cluster import LocalCluster
from tuner_client.servers.target import EMBEDDED_DBNAME, Target, make_controller, read_catalog

logger = logging.getLogger(__name__)

#: the lease of a session only this run's own database measures (seconds): nobody else
#: could take its trial over, so a long measurement must not lose it
SOLE_LEASE_S = 3600.0


@dataclass
class Replica:
    """One replica of the run: its name, target and (once joined) its own measurer."""

    name: str
    target: Target
    #: opened by the run (so closed by it); False for the run's own target
    owned: bool = False
    #: this replica's measurer (set when it joins the pool,
    #: :func:`tuner_client.phases.prepare.prepare`)
    measurer: Measurer | None = None
    #: its ``postgresql.auto.conf`` before the run (restored at the end), if readable
    original_auto_conf: str | None = None
    #: why the replica was dropped (None while it is alive)
    dropped: str | None = None

    @property
    def alive(self) -> bool:
        return self.dropped is None

    def answers(self) -> bool:
        """True when the replica's database accepts a connection and a query within 5 s."""
        return database_answers(self.target.dsn)

    def joined(self) -> Measurer:
        """The replica's measurer; ConfigError before it joined a pool."""
        if self.measurer is None:
            raise ConfigError(f"replica {self.name} has not joined the run's pool yet")
        return self.measurer


def database_answers(dsn: str) -> bool:
    """True when ``dsn`` accepts a connection and a query within 5 s."""
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


class ReplicaPool:
    """The run's replicas; the first is the primary (the run's own target and measurer).

    ``remote``: replicas expected to join from other hosts. A pool is *replicated* when it
    has more than one member or expects remote ones: its sessions then compare each
    candidate with its own replica's reference and scale the ratio by one pooled level.
    """

    def __init__(self, replicas: list[Replica], *, lease_s: float = 120.0,
                 remote: int = 0) -> None:
        names = [r.name for r in replicas]
        if len(set(names)) != len(names):
            raise ConfigError(f"replica names must be unique, got {names}")
        if not replicas:
            raise ConfigError("a replica pool needs at least one replica")
        self.replicas = replicas
        self.lease_s = lease_s
        self.remote = remote
        self.lock = threading.Lock()

    @property
    def primary(self) -> Replica:
        return self.replicas[0]

    @property
    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.alive]

    @property
    def replicated(self) -> bool:
        """True when more than this run's own database measures its sessions."""
        return len(self.replicas) > 1 or self.remote > 0

    @property
    def session_lease_s(self) -> float:
        """The lease of a search session's trial: the pool's when other replicas may take a
        trial over, else long (:data:`SOLE_LEASE_S`)."""
        return self.lease_s if self.replicated else SOLE_LEASE_S

    def record_name(self, replica: Replica) -> str | None:
        """The replica name a record carries: None in a pool of one."""
        return replica.name if self.replicated else None

    def client_id(self, client: HarmonyClient, replica: Replica) -> str:
        """The client id ``replica`` fetches and reports under on a replicated pool."""
        return f"{client.client_id}-{replica.name}"

    def session_for(self, session: Session, client: HarmonyClient, replica: Replica) -> Session:
        """``session`` as ``replica`` works on it: joined under its own client id on a
        replicated pool (the server then leases trials per replica), else the run's own."""
        if not self.replicated:
            return session
        return client.as_client(self.client_id(client, replica)).join(session.name)

    def session_done(self, session: Session) -> None:
        """A search session's loop is over: a replicated session is paused, so that replicas
        on other hosts leave it."""
        if self.replicated:
            with contextlib.suppress(HarmonyError):
                session.pause()

    def for_round(self, index: int) -> Replica:
        """The replica that measures round ``index`` of the final rounds: the live ones in
        turn (the primary when none is left, so that the round fails there and says so)."""
        live = self.live
        return live[index % len(live)] if live else self.primary

    def apply(self, settings: dict[str, str], *, check_budget: bool = True,
              warm_up: bool = True) -> ApplyOutcome:
        """Put ``settings`` in force on every member: the primary (its outcome is returned,
        for the phase to act on) and every other live replica (a failure there is logged:
        its next measurement says whether it still answers)."""
        outcome = self.primary.joined().apply(settings, check_budget=check_budget,
                                               warm_up=warm_up)
        for replica in self.replicas[1:]:
            if not replica.alive or replica.measurer is None:
                continue
            other = replica.measurer.apply(settings, check_budget=check_budget,
                                           warm_up=warm_up)
            if other.failure is not None:
                logger.warning("replica %s: could not apply %s: %s", replica.name, settings,
                               other.failure)
        return outcome

    def drop(self, replica: Replica, reason: str) -> list[str] | None:
        """Take a replica out of the run (it died or stopped answering); the names of the
        replicas left, for the caller's decision (None: it was dropped already)."""
        with self.lock:
            if replica.dropped is not None:
                return None
            replica.dropped = reason
            left = [r.name for r in self.live]
        if replica.measurer is not None:
            with contextlib.suppress(HarmonyError, OSError, psycopg.Error):
                replica.measurer.stop()  # its workload streams would only fail on
        return left

    def run_each(self, work: Callable[[Replica], None], *, members: Sequence[Replica] | None = None,
                 stop: Callable[[], None] | None = None) -> None:
        """Run ``work(replica)`` for every live member at once (in this thread for one)."""
        run_each(list(self.live if members is None else members), work, stop=stop,
                 grace_s=self.lease_s)

    def close(self) -> None:
        """Stop the embedded clones this pool started."""
        close_replicas(self.replicas)


def close_replicas(replicas: Sequence[Replica]) -> None:
    """Stop the embedded clones among ``replicas`` (the ones the run opened)."""
    for replica in replicas:
        if replica.owned:
            replica.target.close()


def run_each(replicas: list[Replica], work: Callable[[Replica], None], *,
             stop: Callable[[], None] | None = None, grace_s: float = 120.0) -> None:
    """Run ``work(replica)`` for every replica at once; re-raise the first error. One
    replica runs in the calling thread, so that Ctrl-C interrupts it at once.

    Interrupted (Ctrl-C, SIGTERM), it calls ``stop`` and waits up to ``grace_s`` for the
    threads to finish their measurement, so that no replica applies a candidate after the
    run has restored its configuration.
    """
    if len(replicas) == 1:
        work(replicas[0])
        return
    errors: list[BaseException] = []

    def run(replica: Replica) -> None:
        try:
            work(replica)
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,), name=f"harmony-replica-{r.name}",
                                daemon=True) for r in replicas]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:
        if stop is not None:
            stop()
        deadline = time.monotonic() + grace_s
        for thread in threads:
            thread.join(max(deadline - time.monotonic(), 0.0))
        raise
    if errors:
        raise errors[0]


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
            controller = controllers.make_controller(spec.controller.kind, dsn=spec.dsn,
                                                     **dict(spec.controller.options))
            out.append(Replica(spec.name, Target(dsn=spec.dsn, catalog=read_catalog(spec.dsn),
                                                 controller=controller, cluster=None,
                                                 ram_bytes=None)))
    except BaseException:
        close_replicas(out)
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
            clone = LocalCluster(state_dir / f"replica-{i + 1}", bin_dir=primary.bin_dir,
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
