"""The run's pool of databases: a single database is a pool of one (no replica name on its
records, one long lease, its session references not measured up front), and the pool's
helpers behave the same for one replica as for several."""

from __future__ import annotations

import threading
import time

import pytest

from tuner_client.knobs.catalog import KnobCatalog
from tuner_client.phases.blocks import Reference, open_references, pooled_level
from tuner_client.phases.session_loop import Shared
from tuner_client.replicas import SOLE_LEASE_S, Replica, ReplicaPool, run_each
from tuner_client.servers.target import Target


def _replica(name: str) -> Replica:
    # never connected to: the pool's bookkeeping does not touch the database
    target = Target(dsn=f"postgresql:///{name}", catalog=KnobCatalog({}),
                    controller=None, cluster=None, ram_bytes=None)  # type: ignore[arg-type]
    return Replica(name, target)


def test_a_single_database_is_a_pool_of_one() -> None:
    pool = ReplicaPool([_replica("replica-1")], lease_s=120.0)
    assert not pool.replicated
    assert pool.session_lease_s == SOLE_LEASE_S == 3600.0
    assert pool.record_name(pool.primary) is None
    assert [pool.for_round(i).name for i in range(3)] == ["replica-1"] * 3


def test_remote_replicas_or_a_second_one_make_the_pool_replicated() -> None:
    remote = ReplicaPool([_replica("replica-1")], lease_s=120.0, remote=2)
    assert remote.replicated and remote.session_lease_s == 120.0
    assert remote.record_name(remote.primary) == "replica-1"
    two = ReplicaPool([_replica("replica-1"), _replica("replica-2")], lease_s=60.0)
    assert two.replicated and two.session_lease_s == 60.0
    assert [two.for_round(i).name for i in range(4)] == ["replica-1", "replica-2"] * 2
    two.replicas[0].dropped = "gone"
    assert [two.for_round(i).name for i in range(2)] == ["replica-2"] * 2


def test_run_each_runs_one_replica_here_and_several_in_threads() -> None:
    seen: dict[str, str] = {}

    def work(replica: Replica) -> None:
        seen[replica.name] = threading.current_thread().name

    run_each([_replica("a")], work)
    assert seen == {"a": threading.current_thread().name}
    seen.clear()
    run_each([_replica("a"), _replica("b")], work)
    assert seen == {"a": "harmony-replica-a", "b": "harmony-replica-b"}

    def fails(replica: Replica) -> None:
        if replica.name == "b":
            raise RuntimeError("b failed")

    with pytest.raises(RuntimeError, match="b failed"):
        run_each([_replica("a"), _replica("b")], fails)


def test_a_pool_of_one_measures_no_reference_before_its_session() -> None:
    # the replica has no measurer: any measurement would raise
    pool = ReplicaPool([_replica("replica-1")])
    reference = Reference("p1-online", {"work_mem": "4MB"})
    refs = open_references(pool, None, "p1-online", reference)  # type: ignore[arg-type]
    assert not refs.replicated and refs.pooled_level is None
    assert refs.of(pool.primary) is reference and refs.primary_reference is reference
    assert reference.last is None and reference.level.level is None


def test_pooled_level_is_the_geometric_mean_of_the_usable_levels() -> None:
    assert pooled_level([100.0, 400.0]) == pytest.approx(200.0)
    assert pooled_level([100.0, 0.0, float("nan")]) == pytest.approx(100.0)
    assert pooled_level([]) is None


def test_the_evaluations_are_claimed_once_whichever_replica_measures() -> None:
    shared = Shared(evaluations=2)
    assert [shared.claim(), shared.claim(), shared.claim()] == [None, None, "budget"]
    shared.unclaim()  # a dropped replica's trial goes back
    assert shared.claim() is None and shared.claim() == "budget"


def test_a_claim_waits_while_another_replica_measures_the_last_trial() -> None:
    """The last trial of a replica whose database dies goes to one still looping: a claim
    made while it measures waits for it, instead of ending the loop on "budget"."""
    shared = Shared(evaluations=1)
    assert shared.claim() is None
    shared.busy = 1  # replica A measures the last trial
    got: list[str | None] = []
    waiter = threading.Thread(target=lambda: got.append(shared.claim()))
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive() and got == []  # replica B waits
    with shared.lock:  # A's database stopped answering: the trial goes back
        shared.busy -= 1
    shared.unclaim()
    waiter.join(5.0)
    assert got == [None] and shared.claimed == 1  # B took it
    # A replica that finishes its trial ends the wait with the budget spent
    shared.busy = 1
    waiter = threading.Thread(target=lambda: got.append(shared.claim()))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive()
    with shared.lock:
        shared.busy -= 1
    waiter.join(5.0)
    assert got == [None, "budget"]
    # a deadline ends the wait too
    late = Shared(evaluations=1, deadline=time.monotonic() + 0.3, claimed=1, busy=1)
    began = time.monotonic()
    assert late.claim() == "time" and time.monotonic() - began < 2.0
