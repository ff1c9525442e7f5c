"""Many clients on an in-process server: PRO batches spread across clients, dead clients' leases."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from server_support import definition, running_server, sphere

from harmony_server.store import Store, default_store_url
from tuner_client.api.client import connect

EVALS = 80  # per session


def _client_loop(url: str, session: str, client_id: str, counter: dict[str, int],
                 lock: threading.Lock, log: list[tuple[str, int, float, float]]) -> None:
    with connect(url, client_id=client_id) as client:
        s = client.join(session)
        while True:
            with lock:
                if counter[session] >= EVALS:
                    return
            got = s.fetch(timeout=5.0)
            if got is None:
                return  # converged (or nothing within 5 s)
            fetched = time.monotonic()
            time.sleep(0.003)  # "measuring"
            s.report(got.trial_id, sphere(got.point))
            with lock:
                counter[session] += 1
                log.append((client_id, got.trial_id, fetched, time.monotonic()))


def _max_overlap(intervals: list[tuple[str, int, float, float]]) -> int:
    """Most distinct clients holding a trial at the same instant."""
    best = 0
    for _, _, start, _ in intervals:
        holders = {c for c, _, s, e in intervals if s <= start < e}
        best = max(best, len(holders))
    return best


def test_two_sessions_four_clients_each_share_pro_batches(tmp_path: Path) -> None:
    sessions = ["pro-a", "pro-b"]
    with running_server(tmp_path) as server:
        admin = connect(server.url, client_id="admin")
        for i, name in enumerate(sessions):
            admin.create_session(definition(name, strategy="pro", dims=4, seed=11 + i))
        counter = dict.fromkeys(sessions, 0)
        logs: dict[str, list[tuple[str, int, float, float]]] = {n: [] for n in sessions}
        lock = threading.Lock()
        threads = [threading.Thread(target=_client_loop,
                                    args=(server.url, n, f"{n}-c{i}", counter, lock, logs[n]))
                   for n in sessions for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)

        with admin:  # the same client object: it rejoins with the secrets it was issued
            for name in sessions:
                log = logs[name]
                s = admin.join(name)
                trials = s.trials()
                done = [t for t in trials if t["status"] == "done"]
                # every report counted once, none lost, nothing else happened
                assert len(done) == len(log) >= 40
                assert len(log) >= EVALS or s.converged  # stopped by the budget or convergence
                assert sorted(t["id"] for t in done) == sorted(tid for _, tid, _, _ in log)
                assert all(t["status"] in ("done", "leased") for t in trials)
                per_client = {c: sum(1 for x in log if x[0] == c) for c in {x[0] for x in log}}
                assert len(per_client) == 4 and min(per_client.values()) >= 5, per_client
                assert _max_overlap(log) >= 3  # a batch really was measured in parallel
                first = sorted(sphere(t["point"]) for t in done[:5])
                best = s.best()
                assert best is not None and best[1] == min(t["value"] for t in done)
                assert best[1] < first[2] / 4  # PRO made progress on the sphere
                assert {t["client"] for t in done} == set(per_client)
            listing = {r["name"]: r for r in admin.list_sessions()}
            assert set(listing) == set(sessions)
    store = Store(default_store_url(tmp_path))
    for name in sessions:
        reports = [c for c in store.commands(name) if c.kind == "report"]
        assert len(reports) == len(logs[name])
        assert len(store.clients(name)) == 5  # four workers and the admin
    assert store.check_integrity() == []
    store.close()


def test_a_vanished_clients_trial_is_leased_to_another(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        with connect(server.url, client_id="vanishing") as a, \
                connect(server.url, client_id="steady") as b:
            sa = a.create_session(definition("lease", strategy="pro", dims=2, lease=0.5))
            # timed from before the lease is handed out, so no lease can run out sooner
            started = time.monotonic()
            lost = sa.fetch(timeout=1)  # then "crashes": never reports, never heartbeats
            assert lost is not None
            sb = b.join("lease")
            joined = time.monotonic() - started  # long on a loaded machine
            seen: list[tuple[dict[str, object], float]] = []
            while time.monotonic() - started < joined + 5:
                got = sb.fetch(timeout=3)
                assert got is not None
                seen.append((got.point, time.monotonic() - started))
                sb.report(got.trial_id, sphere(got.point))
                if got.point == lost.point:
                    break
            point, when = seen[-1]
            assert point == lost.point  # the dead client's point was handed out again
            # after its 0.5-s lease ran out, without stalling the batch
            assert 0.5 <= when < max(joined, 0.5) + 2.0
            trials = {t["id"]: t for t in sb.trials()}
            assert trials[lost.trial_id]["status"] == "released"
            assert trials[lost.trial_id]["client"] == "vanishing"
            assert server.manager.stats.leases_expired == 1
            # a late report from the vanished client is not double counted with the re-measure
            sa.report(lost.trial_id, 123.0)
            assert s_counts(sb)["completed"] == len(seen)


def s_counts(session: object) -> dict[str, int]:
    return session.status()["counts"]  # type: ignore[attr-defined,no-any-return]
