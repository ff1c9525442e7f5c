"""The HTTP API of an in-process server on a free port, with a real SQLite store."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from server_support import Raw, definition, running_server

from harmony_server.app import ENDPOINTS
from harmony_server.server import start_server
from harmony_server.store import Store, StoreError, default_store_url


def _commands(state: Path, name: str) -> list[str]:
    store = Store(default_store_url(state))
    try:
        return [c.kind for c in store.commands(name)]
    finally:
        store.close()


def test_create_join_fetch_report_and_duplicates(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        d = definition("s1")
        assert http("POST", "/sessions", {"definition": d})[0] == 201
        assert http("POST", "/sessions", {"definition": d, "exist_ok": True})[0] == 200
        status, body = http("POST", "/sessions", {"definition": d})
        assert (status, body["error"]) == (409, "session_exists")
        other = definition("s1", seed=5)
        status, body = http("POST", "/sessions", {"definition": other, "exist_ok": True})
        assert (status, body["error"]) == (409, "session_exists")

        status, body = http("POST", "/sessions/s1/join",
                            {"client": "c1", "host": {"hostname": "h", "cpu_count": 2}})
        assert status == 200 and body["lease_seconds"] == 300.0
        status, got = http("POST", "/sessions/s1/fetch", {"client": "c1"})
        assert status == 200 and got["status"] == "trial" and set(got["point"]) == {"x0", "x1"}
        assert got["lease_expires"] > time.time() + 290
        status, body = http("POST", "/sessions/s1/report", {"client": "c1",
                                                           "trial_id": got["trial_id"],
                                                           "value": 2.5})
        assert (status, body["accepted"]) == (200, True)
        status, body = http("POST", "/sessions/s1/report", {"client": "c1",
                                                           "trial_id": got["trial_id"],
                                                           "value": 99.0})
        assert (status, body["accepted"]) == (200, False)  # duplicate: ignored
        status, best = http("GET", "/sessions/s1/best")
        assert best["best"] == {"point": got["point"], "value": 2.5}
        status, info = http("GET", "/sessions/s1")
        assert info["counts"]["done"] == 1 and info["counts"]["completed"] == 1
        assert info["definition"]["name"] == "s1" and info["clients"] == 1
        assert [(h["client_id"], h["hostname"], h["cpu_count"]) for h in info["hosts"]] == \
            [("c1", "h", 2)]
        status, listing = http("GET", "/sessions")
        assert [s["name"] for s in listing["sessions"]] == ["s1"]
        assert listing["sessions"][0]["best"]["value"] == 2.5
        status, trials = http("GET", "/sessions/s1/trials")
        assert [(t["id"], t["status"], t["value"]) for t in trials["trials"]] == \
            [(got["trial_id"], "done", 2.5)]
    assert _commands(tmp_path, "s1") == ["join", "fetch", "report"]  # the duplicate is not logged
    store = Store(default_store_url(tmp_path))
    (row,) = store.trials("s1")
    assert (row.status, row.value, row.client) == ("done", 2.5, "c1")
    assert row.reported_at is not None and row.leased_at is not None
    assert store.clients("s1")[0].hostname == "h"
    store.close()


def test_bad_input_gets_clear_4xx_and_nothing_is_corrupted(tmp_path: Path) -> None:
    with running_server(tmp_path, max_body=64 * 1024) as server:
        http = Raw(server.url)
        assert http("POST", "/sessions", {"definition": definition("s")})[0] == 201
        http.join("s", "c")
        status, trial = http("POST", "/sessions/s/fetch", {"client": "c"})
        cases: list[tuple[str, str, object, bytes | None, int, str, str]] = [
            ("POST", "/sessions", None, b"{not json", 400, "bad_request", "not valid JSON"),
            ("POST", "/sessions", [1, 2], None, 400, "bad_request", "JSON object"),
            ("POST", "/sessions", {"definition": {**definition("t"), "strategy_typo": "x"}},
             None, 400, "invalid_definition", "strategy_typo"),
            ("POST", "/sessions", {"definition": definition("t"), "colour": 1}, None, 400,
             "bad_request", "colour"),
            ("POST", "/sessions", {"definition": {**definition("t"), "seed": "seven"}}, None,
             400, "invalid_definition", "seed"),
            ("POST", "/sessions", {"definition": definition("t", strategy="no-such")}, None,
             400, "invalid_definition", "no-such"),
            ("POST", "/sessions/s/fetch", {"client": "c", "wait": "long"}, None, 400,
             "bad_request", "wait"),
            ("POST", "/sessions/s/report", {"client": "c", "trial_id": "zero", "value": 1.0},
             None, 400, "bad_request", "trial_id"),
            ("POST", "/sessions/s/report", {"client": "c", "trial_id": 0, "value": 1.0,
                                          "failure": True},
             None, 400, "bad_request", "either"),
            ("POST", "/sessions/s/report", {"client": "c", "trial_id": 0}, None, 400, "bad_request",
             "either"),
            ("POST", "/sessions/nope/fetch", {"client": "c"}, None, 404, "session_not_found",
             "nope"),
            ("GET", "/sessions/nope", None, None, 404, "session_not_found", "nope"),
            ("POST", "/sessions/s/report", {"client": "c", "trial_id": 12345, "value": 1.0},
             None, 404, "trial_not_found", "12345"),
            ("POST", "/sessions/s/heartbeat", {"client": "c", "trial_id": 777}, None, 404,
             "trial_not_found", "777"),
            ("POST", "/sessions/s/restart", {"point": {"x0": 500, "x1": 0}}, None, 400,
             "invalid_definition", "x0"),
            ("POST", "/sessions", None, b'{"definition": "' + b"x" * 100_000 + b'"}', 413,
             "too_large", ""),
            ("GET", "/no/such/route", None, None, 404, "not_found", ""),
        ]
        for method, path, body, raw, want_status, want_kind, want_text in cases:
            status, answer = http(method, path, body, raw=raw)
            assert isinstance(answer, dict) and "error" in answer, (path, status, answer)
            assert (status, answer["error"]) == (want_status, want_kind), (path, body, answer)
            assert want_text in answer["message"], (path, answer)
        # the session still works and counts correctly afterwards
        ok = http("POST", "/sessions/s/report", {"client": "c", "trial_id": trial["trial_id"],
                                                 "value": 4.0})
        assert ok == (200, {"accepted": True, "converged": False})
        assert http("GET", "/healthz")[1]["status"] == "ok"
        assert [s["name"] for s in http("GET", "/sessions")[1]["sessions"]] == ["s"]
        assert server.manager.stats.errors["bad_request"] >= 6
    store = Store(default_store_url(tmp_path))
    assert store.check_integrity() == []
    assert [c.kind for c in store.commands("s")] == ["join", "fetch", "report"]
    assert [s.name for s in store.live_sessions()] == ["s"]
    store.close()


def test_pause_really_pauses_and_long_poll_wakes_on_resume(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("p")})
        assert http("POST", "/sessions/p/pause", {})[1] == {"status": "paused"}
        started = time.monotonic()
        http.join("p", "c")
        status, answer = http("POST", "/sessions/p/fetch", {"client": "c", "wait": 0.4})
        waited = time.monotonic() - started
        assert answer["status"] == "wait" and answer["paused"] is True
        assert answer["retry_after"] > 0 and "best" in answer
        assert 0.35 <= waited < 2.0  # long-poll held the request, no busy loop
        assert server.manager.stats.fetch_waits == 1

        timer = threading.Timer(0.3, lambda: Raw(server.url)("POST", "/sessions/p/resume"))
        timer.start()
        started = time.monotonic()
        status, answer = http("POST", "/sessions/p/fetch", {"client": "c", "wait": 10})
        waited = time.monotonic() - started
        timer.join()
        assert answer["status"] == "trial"
        assert 0.25 <= waited < 2.0  # answered when resumed, not after the full wait
    assert _commands(tmp_path, "p") == ["pause", "join", "resume", "fetch"]


def test_heartbeat_keeps_a_lease_and_expiry_releases_it(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("h", lease=0.5)})
        http.join("h", "a")
        _, first = http("POST", "/sessions/h/fetch", {"client": "a"})
        for _ in range(6):  # 1.2 s, more than twice the lease
            time.sleep(0.2)
            status, beat = http("POST", "/sessions/h/heartbeat", {"client": "a",
                                                                 "trial_id": first["trial_id"]})
            assert status == 200 and beat["lease_expires"] > time.time()
        _, trials = http("GET", "/sessions/h/trials")
        assert trials["trials"][0]["status"] == "leased"
        time.sleep(0.8)
        status, lost = http("POST", "/sessions/h/heartbeat", {"client": "a",
                                                             "trial_id": first["trial_id"]})
        assert (status, lost["error"]) == (409, "lease_lost")
        http.join("h", "b")
        _, again = http("POST", "/sessions/h/fetch", {"client": "b"})
        assert again["point"] == first["point"] and again["trial_id"] != first["trial_id"]
        assert server.manager.stats.leases_expired == 1
        # the late report of the first client is kept, the second is then a duplicate point
        assert http("POST", "/sessions/h/report", {"client": "a", "trial_id": first["trial_id"],
                                                  "value": 1.0})[1]["accepted"] is True
    assert _commands(tmp_path, "h") == ["join", "fetch", "release", "join", "fetch", "report"]


def test_leave_restart_and_kill(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("k")})
        http.join("k", "a", "b")
        _, t1 = http("POST", "/sessions/k/fetch", {"client": "a"})
        _, t2 = http("POST", "/sessions/k/fetch", {"client": "a"})
        assert http("POST", "/sessions/k/leave", {"client": "a"})[1] == {"released": 2}
        _, got = http("POST", "/sessions/k/fetch", {"client": "b"})
        assert got["point"] in (t1["point"], t2["point"])  # handed out again
        assert http("POST", "/sessions/k/restart", {"point": {"x0": 1, "x1": 2}})[0] == 200
        assert http("POST", "/sessions/k/restart", {})[0] == 200
        assert http("DELETE", "/sessions/k")[1] == {"killed": "k"}
        assert http("GET", "/sessions/k")[0] == 404
        assert http("POST", "/sessions", {"definition": definition("k")})[0] == 201
    store = Store(default_store_url(tmp_path))
    assert [c.kind for c in store.commands("k")] == []  # the new "k" starts empty
    assert [c.client_id for c in store.clients("k")] == []
    store.close()


def test_bearer_token_is_required_except_for_health(tmp_path: Path) -> None:
    with running_server(tmp_path, token="s3cret") as server:
        http = Raw(server.url)
        assert http("GET", "/healthz")[0] == 200
        status, body = http("GET", "/sessions")
        assert (status, body["error"]) == (401, "unauthorized")
        assert http("GET", "/sessions", headers={"Authorization": "Bearer wrong"})[0] == 401
        assert http("GET", "/sessions", headers={"Authorization": "Bearer s3cret"})[0] == 200


def test_openapi_documents_every_endpoint_and_metrics_is_served(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        status, doc = http("GET", "/openapi.json")
        assert status == 200 and doc["openapi"].startswith("3.")
        for e in ENDPOINTS:
            op = doc["paths"][e.path][e.method.lower()]
            assert op["summary"] and op["operationId"] == e.operation
            if e.request:
                ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                assert ref.split("/")[-1] in doc["components"]["schemas"]
        assert "SessionDefinition" in doc["components"]["schemas"]
        r = http.pool.request("GET", "/metrics")
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        assert b"harmony_server_requests_total" in r.data


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_non_finite_values_become_failures(tmp_path: Path, value: str) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("n")})
        http.join("n", "c")
        _, got = http("POST", "/sessions/n/fetch", {"client": "c"})
        raw = f'{{"client": "c", "trial_id": {got["trial_id"]}, "value": {value}}}'.encode()
        assert http("POST", "/sessions/n/report", raw=raw)[1]["accepted"] is True
        (trial,) = http("GET", "/sessions/n/trials")[1]["trials"]
        assert trial["status"] == "failed" and "non-finite" in trial["failure"]


def test_a_retried_fetch_gets_the_same_trial_even_after_a_restart(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("r")})
        http.join("r", "c")
        _, first = http("POST", "/sessions/r/fetch", {"client": "c", "request": "req-1"})
        _, again = http("POST", "/sessions/r/fetch", {"client": "c", "request": "req-1"})
        assert (again["trial_id"], again["point"]) == (first["trial_id"], first["point"])
        _, other = http("POST", "/sessions/r/fetch", {"client": "c", "request": "req-2"})
        assert other["trial_id"] != first["trial_id"]
    secrets = http.secrets  # the client's secret, like the trial it was answered, survives
    with running_server(tmp_path) as server:  # the answer is recovered from the command log
        http = Raw(server.url)
        http.secrets = secrets
        _, repeat = http("POST", "/sessions/r/fetch", {"client": "c", "request": "req-2"})
        assert repeat["trial_id"] == other["trial_id"]
        _, stale = http("POST", "/sessions/r/fetch", {"client": "c", "request": "req-1"})
        assert stale["trial_id"] not in (first["trial_id"], other["trial_id"])
    assert _commands(tmp_path, "r") == ["join", "fetch", "fetch", "fetch"]


def test_a_failed_store_write_is_not_acknowledged_and_the_session_heals(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("w")})
        http.join("w", "c")
        _, got = http("POST", "/sessions/w/fetch", {"client": "c"})
        store = server.manager.store
        real_write = store.write
        failures = []

        def failing_write(*args: object, **kwargs: object) -> None:
            failures.append(args)
            raise StoreError("disk full (injected)")

        store.write = failing_write  # type: ignore[method-assign]
        try:
            status, answer = http("POST", "/sessions/w/report",
                                  {"client": "c", "trial_id": got["trial_id"], "value": 3.0})
        finally:
            store.write = real_write  # type: ignore[method-assign]
        assert (status, answer["error"]) == (503, "unavailable") and len(failures) == 1
        # not acknowledged, so not applied: the trial is still leased and the report can be sent
        (trial,) = http("GET", "/sessions/w/trials")[1]["trials"]
        assert trial["status"] == "leased"
        assert http("POST", "/sessions/w/report", {"client": "c", "trial_id": got["trial_id"],
                                                  "value": 3.0})[1]["accepted"] is True
        assert http("GET", "/sessions/w")[1]["counts"]["done"] == 1
    assert _commands(tmp_path, "w") == ["join", "fetch", "report"]


def test_shutdown_answers_pending_long_polls_promptly(tmp_path: Path) -> None:
    """Stopping the server answers a parked long poll at once ("wait"): it does not hold the
    shutdown until the poll's own wait (600 s here) or the grace period for in-flight
    requests (300 s) runs out. Timed against those, not against a fixed "fast", so that a
    loaded machine cannot fail it."""
    server = start_server(port=0, state_dir=tmp_path, max_wait=600.0, shutdown_timeout=300.0)
    http = Raw(server.url)
    http("POST", "/sessions", {"definition": definition("z")})
    http("POST", "/sessions/z/pause", {})
    http.join("z", "c")
    answers: list[tuple[int, object]] = []
    poller = threading.Thread(target=lambda: answers.append(
        http("POST", "/sessions/z/fetch", {"client": "c", "wait": 600})))
    fetches = server.manager.stats.requests
    poller.start()
    arrived = time.monotonic() + 60
    while fetches["/sessions/{name}/fetch"] == 0 and time.monotonic() < arrived:
        time.sleep(0.01)  # counted as it arrives; it then parks (or, closing, answers at once)
    assert fetches["/sessions/{name}/fetch"] == 1
    server.stop(timeout=120.0)  # raises unless done well before the 300-s grace period
    poller.join(60)
    assert not poller.is_alive()
    assert answers and answers[0][0] == 200 and answers[0][1]["status"] == "wait"  # type: ignore[index]


def test_a_session_whose_log_cannot_be_replayed_is_flagged_not_fatal(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        for name in ("good", "bad"):
            http("POST", "/sessions", {"definition": definition(name)})
            http.join(name, "c")
            http("POST", f"/sessions/{name}/fetch", {"client": "c"})
    with sqlite3.connect(tmp_path / "harmony.sqlite3") as conn:  # a log written by a future version
        conn.execute("INSERT INTO harmony_commands VALUES ('bad', 3, 'teleport', '{}', 0, NULL)")
    secrets = http.secrets
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http.secrets = secrets
        assert http("GET", "/healthz")[1] == {"status": "ok", "sessions": 1, "broken": 1}
        status, answer = http("GET", "/sessions/bad")
        assert (status, answer["error"]) == (500, "session_broken")
        assert "teleport" in answer["message"]
        assert [(s["name"], s["status"]) for s in http("GET", "/sessions")[1]["sessions"]] == \
            [("bad", "broken"), ("good", "running")]
        assert http("POST", "/sessions/good/fetch", {"client": "c"})[1]["status"] == "trial"
        assert http("DELETE", "/sessions/bad")[0] == 200
        assert http("GET", "/healthz")[1]["broken"] == 0
