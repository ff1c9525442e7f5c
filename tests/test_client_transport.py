"""The client's HTTP transport (:mod:`tuner_client.api.transport`): keep-alive connections of the
standard library's ``http.client``, one per thread, each request in one write."""

from __future__ import annotations

import http.client
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from server_support import running_server

from harmony_base.errors import ConfigError
from harmony_server.server import ServerConfig, ServerHandle
from tuner_client.api.transport import HttpBackend


def test_each_request_is_one_write_with_its_body(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[bytes] = []
    real_send = http.client.HTTPConnection.send

    def recorded(self: http.client.HTTPConnection, data: Any) -> None:
        sent.append(bytes(data))
        real_send(self, data)

    with running_server(tmp_path) as server:
        backend = HttpBackend(server.url)
        monkeypatch.setattr(http.client.HTTPConnection, "send", recorded)
        answer = backend.request("POST", "/sessions", {"definition": {
            "name": "w", "parameters": [{"name": "x", "type": "int", "min": 0, "max": 3}]}})
        assert backend.request("GET", "/sessions/w")["name"] == answer["name"] == "w"
        backend.close()
    assert len(sent) == 2  # one write per request, the body with the header block
    head, body = sent[0].split(b"\r\n\r\n")
    assert head.startswith(b"POST /sessions HTTP/1.1\r\n") and b'"name": "w"' in body
    assert b"Content-Length: %d" % len(body) in head
    assert sent[1].startswith(b"GET /sessions/w HTTP/1.1\r\n") and sent[1].endswith(b"\r\n\r\n")


def test_a_connection_the_server_closed_while_idle_is_reopened_without_a_retry(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A keep-alive connection the server closed (idle timeout, restart) is seen closed
    before it is used: the request goes out on a new one at once, not after a failed try."""
    with running_server(tmp_path) as server:
        port = server.port
        backend = HttpBackend(server.url)
        assert backend.request("GET", "/sessions") == {"sessions": []}
    restarted = ServerHandle(ServerConfig(port=port, state_dir=tmp_path)).start()
    try:
        with caplog.at_level(logging.DEBUG, logger="tuner_client.api.transport"):
            assert backend.request("GET", "/healthz")["status"] == "ok"
        assert not [r for r in caplog.records if "retrying" in r.getMessage()]
    finally:
        backend.close()
        restarted.stop()


def test_one_connection_per_thread_and_close_closes_them_all(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        backend = HttpBackend(server.url)
        backend.request("GET", "/healthz")
        ready, go = threading.Barrier(4), threading.Event()

        def use() -> None:
            backend.request("GET", "/healthz")
            ready.wait()
            go.wait()

        workers = [threading.Thread(target=use) for _ in range(3)]
        for w in workers:
            w.start()
        ready.wait()
        connections = list(backend._open.values())
        assert len(connections) == 4 and len({id(c) for c in connections}) == 4
        assert all(c.sock is not None for c in connections)
        go.set()
        for w in workers:
            w.join()
        # a new thread's connection closes those the ended threads left open
        late = threading.Thread(target=lambda: backend.request("GET", "/healthz"))
        late.start()
        late.join()
        assert len(backend._open) == 2
        assert sum(c.sock is None for c in connections) == 3
        backend.close()
        assert backend._open == {} and all(c.sock is None for c in connections)
        assert backend.request("GET", "/healthz")["status"] == "ok"  # reopens after close
        backend.close()


@pytest.mark.parametrize(("url", "words"), [
    ("ftp://h:1", "needs http:// or https://"),
    ("http://:80", "and a host"),
    ("http://h:99999", "Port out of range"),
])
def test_a_bad_server_url_is_a_config_error(url: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        HttpBackend(url)


def test_host_and_port_alone_mean_http() -> None:
    backend = HttpBackend("127.0.0.1:1979/")
    assert (backend._host, backend._port, backend._prefix) == ("127.0.0.1", 1979, "")
