"""Clients that can prove who they are (issue 28, item 4).

On main a client id was only declared: client ``b`` that got 409 for ``a``'s trial (the answer
named the holder, ``a``) resent the report as ``"client": "a"`` with -1e9 and it became the
session's best; ``a``'s real report then answered ``accepted: false``, which the client
library dropped; anyone could heartbeat or leave for anyone. Now ``join`` issues a secret,
the session keeps its digest in the command log, and fetch, report, heartbeat and leave
need it. In-process servers on free ports with a real SQLite store.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from server_support import Raw, definition, running_server

from harmony_base.errors import ClientExistsError, ForbiddenError, ReportRejectedError
from harmony_base.tokens import CLIENT_SECRET_HEADER
from harmony_server.store import Store, default_store_url
from tuner_client.api.client import Session, connect
from tuner_client.api.transport import HttpBackend


def test_b_cannot_report_heartbeat_or_leave_for_a_even_under_as_name(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("s")})
        http.join("s", "a", "b")
        _, got = http("POST", "/sessions/s/fetch", {"client": "a"})
        tid = got["trial_id"]
        _, before = http("GET", "/sessions/s")
        b_proof = http.secret("s", "b")
        spoofs = [  # b's own secret, no secret, a made-up one: all under a's name
            ("report", {"client": "a", "trial_id": tid, "value": -1e9}, b_proof),
            ("report", {"client": "a", "trial_id": tid, "value": -1e9}, {}),
            ("report", {"client": "a", "trial_id": tid, "failure": True, "reason": "x"},
             {CLIENT_SECRET_HEADER: "guess"}),
            ("heartbeat", {"client": "a", "trial_id": tid}, b_proof),
            ("heartbeat", {"client": "a", "trial_id": tid}, {}),
            ("leave", {"client": "a"}, b_proof),
            ("leave", {"client": "a"}, {}),
            ("fetch", {"client": "a"}, b_proof),
        ]
        for action, body, headers in spoofs:
            status, answer = http("POST", f"/sessions/s/{action}", body, headers=headers,
                                  secret=False)
            assert (status, answer["error"]) == (403, "forbidden"), (action, headers, answer)
            assert "client secret for client 'a'" in answer["message"]
        _, after = http("GET", "/sessions/s")
        assert after["seq"] == before["seq"] and after["best"] is None  # nothing changed
        assert after["counts"]["leased"] == 1 and after["leases"] == 1
        # b under its own name is refused as before, and not told who holds the trial
        status, answer = http("POST", "/sessions/s/report",
                              {"client": "b", "trial_id": tid, "value": -1e9})
        assert (status, answer["error"]) == (409, "lease_lost") and "holder" not in answer
        assert "'a'" not in answer["message"]
        # a's real report is still accepted, and it is the best
        status, answer = http("POST", "/sessions/s/report",
                              {"client": "a", "trial_id": tid, "value": 7.0})
        assert (status, answer["accepted"]) == (200, True)
        assert http("GET", "/sessions/s/best")[1]["best"] == {"point": got["point"], "value": 7.0}


def test_a_second_join_cannot_take_over_a_client_id(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("s")})
        status, first = http("POST", "/sessions/s/join", {"client": "a",
                                                         "host": {"hostname": "real"}})
        assert status == 200 and len(first["secret"]) >= 43
        for headers in ({}, {CLIENT_SECRET_HEADER: "guess"}):
            status, answer = http("POST", "/sessions/s/join",
                                  {"client": "a", "host": {"hostname": "impostor"}},
                                  headers=headers)
            assert (status, answer["error"]) == (409, "client_exists"), answer
            assert "secret" not in answer and "another client id" in answer["message"]
        # the real client may join again (its host changes), and is not issued a new secret
        status, again = http("POST", "/sessions/s/join", {"client": "a", "host": {
            "hostname": "moved"}}, headers={CLIENT_SECRET_HEADER: first["secret"]})
        assert status == 200 and "secret" not in again
        assert [h["hostname"] for h in http("GET", "/sessions/s")[1]["hosts"]] == ["moved"]
        assert http("POST", "/sessions/s/fetch", {"client": "a"})[0] == 200  # first secret


def test_secrets_survive_a_restart_and_only_their_digest_is_stored(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("s")})
        http.join("s", "a")
        _, got = http("POST", "/sessions/s/fetch", {"client": "a"})
    secret = http.secrets[("/sessions/s", "a")]
    store = Store(default_store_url(tmp_path))
    join = next(c for c in store.commands("s") if c.kind == "join")
    store.close()
    assert join.payload == {"client": "a",
                            "secret_sha256": hashlib.sha256(secret.encode()).hexdigest()}
    stored = (tmp_path / "harmony.sqlite3").read_bytes()
    assert secret.encode() not in stored
    with running_server(tmp_path) as server:  # rebuilt by replaying the log
        again = Raw(server.url)
        status, answer = again("POST", "/sessions/s/report",
                               {"client": "a", "trial_id": got["trial_id"], "value": 1.0},
                               headers={CLIENT_SECRET_HEADER: "guess"})
        assert (status, answer["error"]) == (403, "forbidden")
        again.secrets = http.secrets
        status, answer = again("POST", "/sessions/s/report",
                               {"client": "a", "trial_id": got["trial_id"], "value": 1.0})
        assert (status, answer["accepted"]) == (200, True)
        status, answer = again("POST", "/sessions/s/join", {"client": "a"})
        assert (status, answer["error"]) == (409, "client_exists")


@pytest.mark.parametrize("mode", ["server", "standalone"])
def test_the_client_raises_on_a_rejected_report_not_on_a_retried_one(tmp_path: Path,
                                                                     mode: str) -> None:
    with running_server(tmp_path) as server, \
            connect(server.url if mode == "server" else None, client_id="a") as client:
        session = client.create_session(definition("r"))
        got = session.fetch(timeout=1)
        assert got is not None
        session.report(got.trial_id, 2.5)
        session.report(got.trial_id, 2.5)  # a retry after a lost answer: recorded already
        with pytest.raises(ReportRejectedError, match=f"trial {got.trial_id}.*another outcome"):
            session.report(got.trial_id, 99.0)
        with pytest.raises(ReportRejectedError):
            session.report_failure(got.trial_id, "oom")
        nxt = session.fetch(timeout=1)
        assert nxt is not None
        session.report_failure(nxt.trial_id, "oom")
        session.report_failure(nxt.trial_id, "oom")  # retried failure: fine
        assert session.best() == (got.point, 2.5)
        assert [t["value"] for t in session.trials()] == [2.5, None]


def test_a_lost_report_answer_is_retried_by_the_client_without_an_error(tmp_path: Path) -> None:
    """The transport retries a request whose answer never came; the server had recorded the
    first try, so the retry is a duplicate: it must not raise (nor be double counted)."""
    with running_server(tmp_path) as server, connect(server.url, client_id="a") as client:
        session = client.create_session(definition("l"))
        got = session.fetch(timeout=1)
        assert got is not None
        backend = session._backend
        assert isinstance(backend, HttpBackend)
        real = backend._exchange
        calls: list[str] = []

        def answer_lost_once(conn: object, method: str, path: str, *args: object) -> object:
            answer = real(conn, method, path, *args)  # type: ignore[arg-type]
            if path.endswith("/report") and not calls:
                calls.append(path)
                raise ConnectionResetError("the answer was lost")  # after the server acted
            return answer

        backend._exchange = answer_lost_once  # type: ignore[method-assign,assignment]
        session.report(got.trial_id, 3.0)
        backend._exchange = real  # type: ignore[method-assign]
        assert calls == ["/sessions/l/report"]
        assert session.status()["counts"]["done"] == 1
        assert server.manager.stats.duplicate_reports == 1


def test_a_client_object_rejoins_with_its_secret_and_another_process_cannot(
        tmp_path: Path) -> None:
    with running_server(tmp_path) as server, connect(server.url, client_id="a") as client:
        session = client.create_session(definition("j"))
        assert client.join("j").client_id == "a"  # the same object: sends its secret
        with connect(server.url, client_id="a") as other, \
                pytest.raises(ClientExistsError, match="'a' has already joined"):
            other.join("j")
        stranger = Session(session._backend, "j", "a")  # a's id without a's secret
        with pytest.raises(ForbiddenError):
            stranger.fetch(timeout=0)
        assert session.fetch(timeout=1) is not None
