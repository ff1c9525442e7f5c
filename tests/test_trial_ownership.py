"""Trial ownership (issue 16): a trial is reported or heartbeated only by the client it was
handed to, in the server and in standalone mode (the same leased-session service)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from server_support import Raw, definition, running_server

from harmony_base.errors import (
    ClientNotFoundError,
    ConfigError,
    ForbiddenError,
    LeaseLostError,
)
from tuner_client.api.client import HarmonyClient, connect


def test_only_the_lease_holder_may_report_or_heartbeat(tmp_path: Path) -> None:
    """Client A's report of B's leased trial used to be accepted (the trial became A's and B's
    real report was dropped); anyone's heartbeat extended anyone's lease."""
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("o")})
        http.join("o", "a", "b")
        _, b_trial = http("POST", "/sessions/o/fetch", {"client": "b"})
        tid = b_trial["trial_id"]
        status, body = http("POST", "/sessions/o/report", {"client": "a", "trial_id": tid,
                                                          "value": 666.0})
        assert (status, body["error"]) == (409, "lease_lost") and "holder" not in body
        assert "handed to another client, not to 'a'" in body["message"]
        assert "'b'" not in body["message"]  # who holds it is not the caller's business
        status, body = http("POST", "/sessions/o/heartbeat", {"client": "a", "trial_id": tid})
        assert (status, body["error"]) == (409, "lease_lost") and "'b'" not in body["message"]
        status, body = http("POST", "/sessions/o/report", {"trial_id": tid, "value": 1.0})
        assert (status, body["error"]) == (400, "bad_request") and "client" in body["message"]
        assert http("POST", "/sessions/o/heartbeat", {"client": "b", "trial_id": tid})[0] == 200
        assert http("POST", "/sessions/o/report", {"client": "b", "trial_id": tid,
                                                  "value": 2.0})[1]["accepted"] is True
        (trial,) = http("GET", "/sessions/o/trials")[1]["trials"]
        assert (trial["client"], trial["status"], trial["value"]) == ("b", "done", 2.0)
        # a duplicate from someone else is refused too, not silently ignored
        status, body = http("POST", "/sessions/o/report", {"client": "a", "trial_id": tid,
                                                          "value": 3.0})
        assert status == 409 and "holder" not in body


def test_leave_from_a_client_that_never_joined_is_an_error(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        http("POST", "/sessions", {"definition": definition("l")})
        status, body = http("POST", "/sessions/l/leave", {"client": "stranger"})
        assert (status, body["error"]) == (404, "client_not_found")
        assert "'stranger' never joined" in body["message"]
        _, info = http("GET", "/sessions/l")
        assert info["hosts"] == [] and info["clients"] == 0
        http("POST", "/sessions/l/join", {"client": "member"})
        assert http("POST", "/sessions/l/leave", {"client": "member"}) == (200, {"released": 0})
        _, info = http("GET", "/sessions/l")
        (host,) = info["hosts"]
        assert host["client_id"] == "member" and host["left"] is not None


@contextmanager
def _client(mode: str, tmp_path: Path, client_id: str) -> Iterator[HarmonyClient]:
    if mode == "standalone":
        with connect(None, client_id=client_id) as client:
            yield client
    else:
        with running_server(tmp_path) as server, connect(server.url, client_id=client_id) as c:
            yield c


@pytest.mark.parametrize("mode", ["server", "standalone"])
def test_the_client_handles_a_lost_lease_cleanly(tmp_path: Path, mode: str) -> None:
    with _client(mode, tmp_path, "slow") as client:
        session = client.create_session(definition("k", lease=0.3))
        got = session.fetch(timeout=1)
        assert got is not None
        with session.keep_lease(got.trial_id, every=0.1) as lease:
            time.sleep(0.9)  # three leases long: the heartbeats keep it
        assert lease.lost is None
        assert session.trials()[0]["status"] == "leased"
        with session.keep_lease(got.trial_id, every=0.6) as lease:
            time.sleep(0.9)  # the heartbeats come too late: the lease is lost, nothing raises
        assert isinstance(lease.lost, LeaseLostError)
        with pytest.raises(LeaseLostError, match="not leased"):
            session.heartbeat(got.trial_id)
        session.report(got.trial_id, 1.0)  # its own late measurement is still accepted
        assert session.trials()[0]["status"] == "done"
        with pytest.raises(ConfigError, match="'every' must be a positive"):
            session.keep_lease(got.trial_id, every=float("nan"))


@pytest.mark.parametrize("mode", ["server", "standalone"])
def test_the_same_ownership_rule_in_both_modes(tmp_path: Path, mode: str) -> None:
    with _client(mode, tmp_path, "a") as a:
        sa = a.create_session(definition("m"))
        got = sa.fetch(timeout=1)
        assert got is not None
        other = type(sa)(sa._backend, sa.name, "intruder")
        with pytest.raises(ClientNotFoundError, match="'intruder' never joined"):
            other.report(got.trial_id, 5.0)  # a client must join before it reports
        intruder = a.as_client("intruder").join("m")
        with pytest.raises(LeaseLostError) as info:
            intruder.report(got.trial_id, 5.0)
        assert info.value.holder is None and "'a'" not in str(info.value)
        with pytest.raises(LeaseLostError):
            intruder.heartbeat(got.trial_id)
        # the intruder under a's id, without a's secret: refused before anything changes
        spoof = type(sa)(sa._backend, sa.name, "a", secret="not-a-secret")
        for attempt in (lambda: spoof.report(got.trial_id, -1e9),
                        lambda: spoof.heartbeat(got.trial_id), spoof.leave):
            with pytest.raises(ForbiddenError, match="wrong client secret for client 'a'"):
                attempt()
        assert sa.heartbeat(got.trial_id) > time.time()
        sa.report(got.trial_id, 1.0)
        assert sa.best() == (got.point, 1.0)
