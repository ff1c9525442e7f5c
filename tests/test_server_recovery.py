"""A server killed with SIGKILL and restarted on the same store continues where it was."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import urllib3
from server_support import definition, free_port, sphere

from harmony_core.definition import SessionDefinition
from harmony_core.session import SessionCore
from harmony_server.store import Store, default_store_url
from tuner_client.api.client import connect

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # each test starts the server process twice


@contextmanager
def server_process(state: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m harmony_server`` as a child process; killed (not waited for) on exit."""
    env = {**os.environ, "HARMONY_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "harmony_server", "--port", str(port),
                             "--state-dir", str(state)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait_healthy(port, proc)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        if proc.stderr is not None:
            proc.stderr.close()


def _wait_healthy(port: int, proc: subprocess.Popen[bytes], timeout: float = 300.0) -> None:
    pool = urllib3.HTTPConnectionPool("127.0.0.1", port, retries=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"server exited with {proc.returncode}: {err[-2000:]}")
        try:
            if pool.request("GET", "/healthz", timeout=1.0).status == 200:
                return
        except urllib3.exceptions.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"server on port {port} not healthy within {timeout} s")


def _sigkill(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    assert proc.returncode == -signal.SIGKILL


def test_sigkill_mid_session_with_busy_clients_loses_and_doubles_nothing(tmp_path: Path) -> None:
    state, port = tmp_path / "state", free_port()
    url = f"http://127.0.0.1:{port}"
    acked: dict[int, float] = {}
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            with connect(url, client_id=f"w{i}") as client:
                s = client.join("crash")
                while not stop.is_set():
                    got = s.fetch(timeout=2.0)
                    if got is None:
                        return  # converged
                    value = sphere(got.point)
                    s.report(got.trial_id, value)  # retried across the restart if in flight
                    with lock:
                        assert got.trial_id not in acked
                        acked[got.trial_id] = value
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    with server_process(state, port) as proc:
        with connect(url) as admin:
            admin.create_session(definition("crash", strategy="pro", dims=6, seed=5))
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        while len(acked) < 30 and not errors:
            time.sleep(0.01)
        _sigkill(proc)  # requests are in flight right now
    with lock:
        acked_before_kill = dict(acked)

    # what the dead server had made durable
    store = Store(default_store_url(state))
    durable = {r.id: r for r in store.trials("crash")}
    reports_before = sum(1 for c in store.commands("crash") if c.kind == "report")
    store.close()
    done_before = {tid: r for tid, r in durable.items() if r.status == "done"}
    assert set(acked_before_kill) <= set(done_before)  # acknowledged => durable
    assert reports_before == len(done_before)

    with server_process(state, port):  # same store, same port: the workers reconnect by themselves
        with connect(url) as admin:
            status = admin.join("crash").status()
        assert status["counts"]["done"] >= len(done_before)
        deadline = time.monotonic() + 20
        while len(acked) < 60 and not errors and time.monotonic() < deadline \
                and any(t.is_alive() for t in threads):
            time.sleep(0.01)
        stop.set()
        for t in threads:
            t.join(30)
        assert not errors, errors
        with connect(url) as admin:
            trials = {t["id"]: t for t in admin.join("crash").trials()}

    # identical history: everything durable before the kill is unchanged after the restart
    for tid, before in done_before.items():
        assert (trials[tid]["point"], trials[tid]["value"], trials[tid]["status"]) == \
            (before.point, before.value, "done")
    done = {tid: t for tid, t in trials.items() if t["status"] == "done"}
    assert {tid: t["value"] for tid, t in done.items()} == acked  # no report lost, none doubled
    store = Store(default_store_url(state))
    log = store.commands("crash")
    assert sum(1 for c in log if c.kind == "report") == len(done)
    assert [c.seq for c in log] == list(range(1, len(log) + 1))
    assert store.check_integrity() == []
    # replaying the log on a fresh core gives exactly the served state
    core = SessionCore(SessionDefinition.from_dict(store.get_session("crash").definition))  # type: ignore[union-attr]
    store.close()
    for c in log:
        p = c.payload
        if c.kind == "join":
            core.join(p["client"])
        elif c.kind == "fetch":
            core.fetch(p["client"])
        elif c.kind == "report":
            core.report(p["trial_id"], p["value"], p["failure"], p["client"])
        else:
            assert c.kind == "release"
            core.release(p["trial_id"])
    assert [(r.id, r.point, r.status, r.value) for r in core.trials()] == \
        [(t["id"], t["point"], t["status"], t["value"]) for t in trials.values()]


def test_restart_after_sigkill_continues_exactly_like_an_uninterrupted_run(
        tmp_path: Path) -> None:
    state, port = tmp_path / "state", free_port()
    url = f"http://127.0.0.1:{port}"
    d = definition("exact", strategy="nelder-mead", dims=3, seed=9)
    points: list[dict[str, object]] = []
    with server_process(state, port) as proc, connect(url, client_id="solo") as client:
        s = client.create_session(d)
        for _ in range(12):
            got = s.fetch(timeout=2)
            assert got is not None
            points.append(got.point)
            s.report(got.trial_id, sphere(got.point))
        outstanding = s.fetch(timeout=2)  # leased when the server dies
        assert outstanding is not None
        points.append(outstanding.point)
        best_before = s.best()
        secret = s.secret  # what a restarted client process keeps to stay "solo"
        _sigkill(proc)
    with server_process(state, port), connect(url, client_id="solo") as client:
        s = client.join("exact", secret=secret)
        assert s.best() == best_before
        assert [t["status"] for t in s.trials()] == ["done"] * 12 + ["leased"]
        s.report(outstanding.trial_id, sphere(outstanding.point))  # the fresh lease is honoured
        s.report(outstanding.trial_id, sphere(outstanding.point))  # duplicate: ignored
        for _ in range(12):
            got = s.fetch(timeout=2)
            assert got is not None
            points.append(got.point)
            s.report(got.trial_id, sphere(got.point))
        assert s.status()["counts"]["done"] == 25

    # the same definition, seed and reports without any crash hand out the same points
    with connect(None, client_id="solo") as local:
        ref = local.create_session(d)
        reference = []
        for _ in range(25):
            got = ref.fetch(timeout=0)
            assert got is not None
            reference.append(got.point)
            ref.report(got.trial_id, sphere(got.point))
    assert points == reference
