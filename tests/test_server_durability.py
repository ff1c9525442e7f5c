"""No request may corrupt a session (issue 28, item 1).

A lone surrogate (``"\\ud800"``) could not be encoded by the store: the session's memory
changed, the durable write failed, the log and the memory drifted apart, and after a restart
the session was ``broken``. Strings are now checked at the edge (400) and a command's memory
change and durable write happen together or not at all. Background tasks (the lease sweeper)
survive an error, log it and count it. In-process servers on free ports with a real SQLite
store; restarts reopen the same store.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import urllib3
from server_support import Raw, definition, running_server

from harmony_core.definition import SessionDefinition
from harmony_server.hosted import HostedSession
from harmony_server.manager import SessionManager
from harmony_server.metrics import render_metrics_text
from harmony_server.store import Store, default_store_url

SURROGATE = "\ud800"


def _raw(body: dict[str, Any]) -> bytes:
    """JSON with the surrogate escaped as ``\\ud800`` (what a careless client sends)."""
    return json.dumps(body).encode()


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/sessions/s/fetch", {"client": SURROGATE}, "client"),
    ("/sessions/s/fetch", {"client": "c", "request": SURROGATE}, "request"),
    ("/sessions/s/join", {"client": SURROGATE}, "client"),
    ("/sessions/s/join", {"client": "c", "host": {"hostname": SURROGATE}}, "host.hostname"),
    ("/sessions/s/join", {"client": "c", "host": {"os": "linux" + SURROGATE}}, "host.os"),
    ("/sessions/s/join", {"client": "c", "host": {"python": SURROGATE}}, "host.python"),
    ("/sessions/s/report", {"client": "c", "trial_id": 0, "failure": True,
                            "reason": SURROGATE}, "reason"),
    ("/sessions/s/report", {"client": SURROGATE, "trial_id": 0, "value": 1.0}, "client"),
    ("/sessions/s/heartbeat", {"client": SURROGATE, "trial_id": 0}, "client"),
    ("/sessions/s/leave", {"client": SURROGATE}, "client"),
    ("/sessions", {"definition": {**definition("t"), "name": "t" + SURROGATE}},
     "definition.name"),
    ("/sessions", {"definition": {**definition("t"), "metadata": {SURROGATE: 1}}},
     "definition.metadata"),
])
def test_a_string_that_cannot_be_encoded_is_refused_before_it_touches_the_session(
        tmp_path: Path, path: str, body: dict[str, Any], field: str) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("s")})
        http.join("s", "c")
        assert http("POST", "/sessions/s/fetch", {"client": "c"})[1]["trial_id"] == 0
        _, before = http("GET", "/sessions/s")
        status, answer = http("POST", path, raw=_raw(body))
        assert (status, answer["error"]) == (400, "bad_request"), answer
        assert field in answer["message"] and "UTF-8" in answer["message"], answer["message"]
        _, after = http("GET", "/sessions/s")
        assert after["seq"] == before["seq"] and after["clients"] == 1
        assert [s["name"] for s in http("GET", "/sessions")[1]["sessions"]] == ["s"]
        assert server.manager.stats.errors.get("internal", 0) == 0


def test_surrogate_fetches_then_a_normal_fetch_leave_the_session_whole_after_a_restart(
        tmp_path: Path) -> None:
    """The issue's reproduction: two surrogate fetches, a normal one, a restart. On main the
    second surrogate fetch made trial 1 in memory only, the normal fetch got trial 2 and the
    restarted server found the session broken ("the log says 2")."""
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("s", lease=2.0)})
        for _ in range(2):
            status, _ = http("POST", "/sessions/s/fetch", raw=_raw({"client": SURROGATE}))
            assert status == 400
        http.join("s", "ok")
        status, got = http("POST", "/sessions/s/fetch", {"client": "ok"})
        assert (status, got["trial_id"]) == (200, 0)
        seq = http("GET", "/sessions/s")[1]["seq"]
    secrets = http.secrets
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http.secrets = secrets
        status, info = http("GET", "/sessions/s")
        assert status == 200 and info["status"] == "running" and info["seq"] == seq
        assert server.manager.broken == {}
        trials = http("GET", "/sessions/s/trials")[1]["trials"]
        assert [(t["id"], t["client"]) for t in trials] == [(0, "ok")]
        status, got = http("POST", "/sessions/s/fetch", {"client": "ok"})
        assert (status, got["trial_id"]) == (200, 1)


def test_a_failure_report_with_a_bad_reason_is_refused_and_its_retry_accepted(
        tmp_path: Path) -> None:
    """On main the report answered 500, its retry ``accepted: false``, and after a restart
    the trial was leased again: the failure was never stored."""
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("s")})
        http.join("s", "c")
        assert http("POST", "/sessions/s/fetch", {"client": "c"})[1]["trial_id"] == 0
        status, answer = http("POST", "/sessions/s/report", raw=_raw(
            {"client": "c", "trial_id": 0, "failure": True, "reason": "oom " + SURROGATE}))
        assert (status, answer["error"]) == (400, "bad_request"), answer
        status, answer = http("POST", "/sessions/s/report",
                              {"client": "c", "trial_id": 0, "failure": True, "reason": "oom"})
        assert (status, answer["accepted"]) == (200, True), answer
    with running_server(tmp_path) as server:
        (trial,) = Raw(server.url)("GET", "/sessions/s/trials")[1]["trials"]
        assert (trial["status"], trial["failure"]) == ("failed", "oom")


def _hosted(tmp_path: Path, store: Store, name: str = "s") -> HostedSession:
    d = SessionDefinition.from_dict(definition(name))
    store.create_session(name, d.to_dict(), 0.0)
    return HostedSession(d, store, created=0.0)


def test_a_command_whose_durable_write_fails_leaves_memory_as_the_log_says(
        tmp_path: Path) -> None:
    """Below the edge (a caller that skipped validation): the store cannot encode the client,
    so the command must not happen in memory either."""
    store = Store(default_store_url(tmp_path))
    try:
        hosted = _hosted(tmp_path, store)
        for _ in range(2):
            with pytest.raises(UnicodeEncodeError):
                hosted.try_fetch(SURROGATE)
            assert hosted.core.clients == set() and hosted.core.trials() == []
            assert hosted.seq == 0 and hosted.leases == {}
        got = hosted.try_fetch("ok").assignment
        assert got is not None and got.trial_id == 0
        with pytest.raises(UnicodeEncodeError):
            hosted.report(0, failure=SURROGATE, client="ok")
        assert hosted.core.trial(0).status.value == "leased" and 0 in hosted.leases
        assert hosted.report(0, failure="oom", client="ok") is True
        recovered = HostedSession.recover(hosted.definition, store, created=0.0)
        assert recovered.seq == hosted.seq
        assert [(r.id, r.client, r.status.value, r.failure) for r in recovered.core.trials()] \
            == [(0, "ok", "failed", "oom")]
    finally:
        store.close()


def _lease_states(manager: SessionManager) -> dict[str, int]:
    return {name: len(hosted.leases) for name, hosted in manager.sessions.items()}


def test_the_lease_sweeper_survives_a_failing_session_and_a_crash_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On main one session whose lease could not be released (a phantom lease) killed the
    sweeper for the whole server: another session's 2-s lease stayed leased forever and
    ``harmony_leases_expired_total`` stopped."""
    store = Store(default_store_url(tmp_path))

    async def scenario() -> tuple[dict[str, int], str]:
        manager = SessionManager(store, sweep_interval=0.02)
        for name in ("bad", "good"):
            manager.create({**definition(name), "lease_seconds": 0.2})
            assert manager.sessions[name].try_fetch("c").assignment is not None

        def fails(now: float | None = None) -> int:
            raise RuntimeError("the store cannot encode this lease's client")

        monkeypatch.setattr(manager.sessions["bad"], "expire_leases", fails)
        sweep_once = manager._sweep_once
        crashes = [1]

        def crash_once(now: float) -> None:  # one crash outside any session's step
            if crashes:
                crashes.pop()
                raise RuntimeError("the sweeper itself failed")
            sweep_once(now)

        monkeypatch.setattr(manager, "_sweep_once", crash_once)
        manager.start_sweeper(restart_delay=0.01)
        deadline = time.monotonic() + 10
        while manager.sessions["good"].leases and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        leases = _lease_states(manager)
        # a later lease expires too: the sweeper is still running
        assert manager.sessions["good"].try_fetch("c").assignment is not None
        while manager.sessions["good"].leases and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        leases["good_again"] = len(manager.sessions["good"].leases)
        text = render_metrics_text(manager)
        await manager.close()
        return leases, text

    try:
        leases, text = asyncio.run(scenario())
    finally:
        store.close()
    assert leases == {"bad": 1, "good": 0, "good_again": 0}
    assert 'harmony_background_task_restarts_total{task="lease_sweeper"} 1.0' in text
    errors = [line for line in text.splitlines()
              if line.startswith('harmony_background_task_errors_total{task="lease_sweeper"}')]
    assert len(errors) == 1 and float(errors[0].split()[-1]) >= 2, errors
    assert "harmony_leases_expired_total 2.0" in text


def test_an_authorization_header_that_is_not_utf8_is_a_401(tmp_path: Path) -> None:
    """Issue 28 item 5: on main a Latin-1 byte in the header answered 500."""
    with running_server(tmp_path, token="s3cret") as server:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(b"GET /sessions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                         b"Authorization: Bearer s3cr\xe9t\r\n\r\n")
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 401"), head
        assert json.loads(body)["error"] == "unauthorized"
        http = Raw(server.url)
        ok = {"Authorization": "Bearer s3cret"}
        assert http("GET", "/sessions", headers=ok)[0] == 200
        assert server.manager.stats.errors.get("internal", 0) == 0


@pytest.mark.parametrize("trial_id", [2**63, 2**64, 2**70])
def test_a_trial_id_past_64_bits_is_a_bad_request_as_documented(tmp_path: Path,
                                                                 trial_id: int) -> None:
    """Issue 28 item 5: the OpenAPI document bounds trial_id at 2**63 - 1 (a 400), but the
    report's fast path skipped the bound and answered 404."""
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("s")})
        for body in ({"client": "c", "trial_id": trial_id, "value": 1.0},
                     {"client": "c", "trial_id": trial_id, "failure": True}):
            status, answer = http("POST", "/sessions/s/report", body)
            assert (status, answer["error"]) == (400, "bad_request"), answer
            assert "trial_id" in answer["message"]
        http.join("s", "c")
        status, answer = http("POST", "/sessions/s/report",
                              {"client": "c", "trial_id": 2**63 - 1, "value": 1.0})
        assert (status, answer["error"]) == (404, "trial_not_found")


def test_a_405_names_the_allowed_methods_and_head_answers_like_get(tmp_path: Path) -> None:
    """Issue 28 item 5: 405 answers lacked ``Allow``; HEAD was refused."""
    with running_server(tmp_path) as server:
        pool = urllib3.connection_from_url(server.url, retries=False)
        r = pool.request("PUT", "/sessions")
        assert r.status == 405 and json.loads(r.data)["error"] == "method_not_allowed"
        assert set(r.headers["Allow"].split(",")) == {"GET", "HEAD", "POST"}, r.headers
        r = pool.request("HEAD", "/healthz")
        assert r.status == 200 and r.data == b""
        assert r.headers["Content-Type"].startswith("application/json")
