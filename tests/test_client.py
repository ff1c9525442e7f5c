"""The client API against an in-process server and in standalone mode: same calls, same answers."""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from server_support import definition, free_port, running_server, sphere

from harmony_base.errors import (
    ConfigError,
    ProtocolError,
    ReportRejectedError,
    SessionNotFoundError,
    TrialError,
)
from harmony_core.definition import SessionDefinition
from harmony_server.cli import add_parser as add_server_parser
from harmony_server.server import ServerConfig, ServerHandle
from tuner_client.api.client import (
    HarmonyClient,
    HttpBackend,
    LeaseLostError,
    ServerUnavailableError,
    connect,
)
from tuner_client.cli.sessions import add_parser


@contextmanager
def client_for(mode: str, tmp_path: Path, **kwargs: object) -> Iterator[HarmonyClient]:
    if mode == "standalone":
        with connect(None, **kwargs) as client:  # type: ignore[arg-type]
            yield client
    else:
        with running_server(tmp_path) as server, connect(server.url, **kwargs) as client:  # type: ignore[arg-type]
            yield client


def _run(client: HarmonyClient, d: dict[str, object], evals: int) -> list[dict[str, object]]:
    s = client.create_session(d)
    points = []
    for _ in range(evals):
        got = s.fetch(timeout=1)
        assert got is not None
        points.append(got.point)
        s.report(got.trial_id, sphere(got.point))
    return points


@pytest.mark.parametrize("strategy", ["random", "nelder-mead", "pro"])
def test_standalone_and_server_hand_out_the_same_points(tmp_path: Path, strategy: str) -> None:
    d = definition(f"same-{strategy}", strategy=strategy, dims=3, seed=21)
    with client_for("server", tmp_path) as remote:
        served = _run(remote, d, 30)
    with client_for("standalone", tmp_path) as local:
        in_process = _run(local, d, 30)
    assert served == in_process
    assert len({tuple(p.values()) for p in served}) > 5


@pytest.mark.parametrize("mode", ["server", "standalone"])
def test_report_and_fetch_gives_the_same_points_in_one_round_trip(tmp_path: Path,
                                                                  mode: str) -> None:
    d = definition(f"piggy-{mode}", strategy="nelder-mead", dims=3, seed=5)
    with client_for(mode, tmp_path) as client:
        separate = _run(client, {**d, "name": "separate"}, 25)
        s = client.create_session(d)
        got = s.fetch(timeout=1)
        piggybacked = []
        for _ in range(25):
            assert got is not None
            piggybacked.append(got.point)
            got = s.report_and_fetch(got.trial_id, sphere(got.point), timeout=1)
        done = [t for t in s.trials() if t["status"] == "done"]
    assert piggybacked == separate
    assert len(done) == 25  # every piggybacked report stored once


@pytest.mark.parametrize("mode", ["server", "standalone"])
def test_the_same_semantics_in_both_modes(tmp_path: Path, mode: str) -> None:
    with client_for(mode, tmp_path, client_id="me") as client:
        d = SessionDefinition.from_dict(definition("sem", lease=0.3))
        s = client.create_session(d)
        assert client.create_session(d, exist_ok=True).name == "sem"
        with pytest.raises(ConfigError, match="already exists"):
            client.create_session(d)
        with pytest.raises(ConfigError, match="colour"):
            client.create_session({**definition("bad"), "colour": "blue"})
        with pytest.raises(SessionNotFoundError, match="nope"):
            client.join("nope")

        got = s.fetch(timeout=1)
        assert got is not None and set(got.point) == {"x0", "x1"}
        s.heartbeat(got.trial_id)
        s.report(got.trial_id, 5.0)
        s.report(got.trial_id, 5.0)  # a retried report: recorded once, not double counted
        with pytest.raises(ReportRejectedError, match="another outcome"):
            s.report(got.trial_id, 1.0)  # a different second report: refused, not dropped
        assert s.best() == (got.point, 5.0)
        with pytest.raises(TrialError, match="999"):
            s.report(999, 1.0)
        with pytest.raises(LeaseLostError):
            s.heartbeat(got.trial_id)  # reported: no lease any more

        nan = s.fetch(timeout=1)
        assert nan is not None
        s.report(nan.trial_id, float("nan"))  # a failure, never the best
        failed = s.fetch(timeout=1)
        assert failed is not None
        s.report_failure(failed.trial_id, "knob refused")
        statuses = {t["id"]: (t["status"], t["failure"]) for t in s.trials()}
        assert statuses[nan.trial_id][0] == "failed" and "non-finite" in statuses[nan.trial_id][1]
        assert statuses[failed.trial_id] == ("failed", "knob refused")
        assert s.best() == (got.point, 5.0)

        s.pause()
        started = time.monotonic()
        assert s.fetch(timeout=0.3) is None  # paused: nothing, after the timeout
        assert time.monotonic() - started >= 0.25
        s.resume()
        held = s.fetch(timeout=1)
        assert held is not None
        time.sleep(0.5)  # the lease (0.3 s) runs out: the point goes to the next fetch
        again = s.fetch(timeout=1)
        assert again is not None and again.point == held.point
        with pytest.raises(LeaseLostError):
            s.heartbeat(held.trial_id)
        s.leave()
        assert s.status()["counts"]["leased"] == 0
        s.restart({"x0": 3, "x1": -4})
        with pytest.raises(ConfigError, match="not in the space"):
            s.restart({"x0": 300, "x1": 0})
        assert not s.converged
        assert [r["name"] for r in client.list_sessions()] == ["sem"]
        s.kill()
        assert client.list_sessions() == []
        with pytest.raises(SessionNotFoundError):
            s.best()


def test_client_retries_until_the_server_comes_up(tmp_path: Path) -> None:
    port = free_port()
    handle = ServerHandle(ServerConfig(port=port, state_dir=tmp_path))
    timer = threading.Timer(0.5, handle.start)
    timer.start()
    try:
        started = time.monotonic()
        with connect(f"http://127.0.0.1:{port}") as client:
            assert client.list_sessions() == []  # refused at first, then answered
        assert time.monotonic() - started >= 0.4
    finally:
        timer.join()
        handle.stop()
    backend = HttpBackend(f"http://127.0.0.1:{free_port()}", retry_seconds=0.3)
    with pytest.raises(ServerUnavailableError, match="unavailable for 0.3 s"):
        HarmonyClient(backend, "x").list_sessions()


def test_token_and_the_sessions_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("tok-123\n")
    with running_server(tmp_path, token="tok-123") as server:
        with pytest.raises(ProtocolError, match="bearer token"):
            with connect(server.url) as anonymous:
                anonymous.list_sessions()
        with connect(server.url, token="tok-123") as client:
            s = client.create_session(definition("listed"))
            got = s.fetch()
            assert got is not None
            s.report(got.trial_id, 2.0)
        parser = argparse.ArgumentParser()
        add_parser(parser.add_subparsers())
        for extra, check in ((["--json"], "json"), ([], "table")):
            args = parser.parse_args(["sessions", "--server", server.url, "--token-file",
                                      str(token_file), *extra])
            assert args.func(args) == 0
            out = capsys.readouterr().out
            if check == "json":
                (row,) = json.loads(out)
                assert (row["name"], row["best"]["value"]) == ("listed", 2.0)
            else:
                header, line = out.strip().splitlines()
                assert header.split()[:3] == ["NAME", "STATUS", "STRATEGY"]
                assert line.split()[:2] == ["listed", "running"] and "2" in line.split()


def test_server_command_reads_options_from_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARMONY_HOST", "127.0.0.2")
    monkeypatch.setenv("HARMONY_STORE", "sqlite:////tmp/x.db")
    monkeypatch.setenv("HARMONY_STATE_DIR", "/tmp/st")
    parser = argparse.ArgumentParser()
    add_server_parser(parser.add_subparsers())
    args = parser.parse_args(["server"])
    assert (args.host, args.store, args.state_dir, args.port) == (
        "127.0.0.2", "sqlite:////tmp/x.db", "/tmp/st", None)
    args = parser.parse_args(["server", "--host", "0.0.0.0", "--port", "0"])
    assert (args.host, args.port) == ("0.0.0.0", 0)
