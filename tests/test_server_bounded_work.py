"""Bounded work per request (issue 28, item 3): no body under the size limit stalls the server.

On main each of these bodies held the event loop for seconds (a 1 MB YAML mapping 19.6 s,
40 parameters x 2,000 constraints 10.4 s, nelder-mead with 2,000 parameters 42 s) and every
other request, ``/healthz`` included, waited. Now the limits answer 400 naming the limit and
what was given, and large bodies are decoded and sessions built on a worker thread.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import urllib3
from server_support import Raw, definition, running_server

from harmony_base.errors import ProtocolError
from harmony_server import bodies

#: the slowest /healthz answer accepted while a body is processed, on a quiet machine. Generous
#: (one 0.87 s answer was seen at a load average of ~15); the issue asks 100 ms. Each body kept
#: the loop busy for 3.7-42 s before the fix, so even this bound tells a blocked loop from a
#: free one; the quiet-machine figure is a benchmark's.
HEALTHZ_BOUND = 2.0
#: on a loaded machine the bound stretches with it, measured in the same run: to this many
#: times the median /healthz answer of the idle server just before the body is sent ...
IDLE_FACTOR = 20
#: ... and to this share of the POST's own duration: a blocked loop holds a /healthz sent
#: while the body is processed for nearly all of that duration (the body is read in
#: milliseconds), while a free loop answers it in a small part of it
POST_SHARE = 0.5

_YAML = {"Content-Type": "application/yaml"}


def _params(n: int) -> list[dict[str, Any]]:
    return [{"name": f"x{i}", "type": "int", "min": 0, "max": 10} for i in range(n)]


def _create(d: dict[str, Any]) -> bytes:
    return json.dumps({"definition": d}).encode()


BODIES: list[tuple[str, bytes, dict[str, str], int, str]] = [
    ("yaml-mapping", b"".join(b"k%d: %d\n" % (i, i) for i in range(70_000)), _YAML, 400,
     "more than 20000 values"),
    ("yaml-brackets", b"[" * 1_000_000, _YAML, 400, "not valid YAML"),
    ("json-array", b"[" + b"0," * 439_000 + b"0]", {}, 400,
     "(body) holds 439001 entries; a request body may hold at most 20000 values"),
    ("constraints", _create({**definition("c", dims=40),
                             "constraints": [f"x0 + x{1 + i % 39} <= 30" for i in range(2000)]}),
     {}, 400, "definition.constraints: at most 256 accepted, 2000 given"),
    ("parameters", _create({"name": "p", "parameters": _params(15_000)}), {}, 400,
     "more than 20000 values"),
    ("nelder-mead", _create({"name": "n", "parameters": _params(2_000),
                             "strategy": "nelder-mead"}), {}, 400,
     "definition.parameters: at most 256 accepted, 2000 given"),
    # within every limit but slow to parse (~1 s of PyYAML): accepted, off the loop
    ("yaml-metadata", (b"definition:\n  name: big\n  parameters:\n"
                       b"    - {name: x, type: int, min: 0, max: 5}\n  metadata:\n"
                       + b"".join(b"    k%d: v%d\n" % (i, i) for i in range(9_000))),
     _YAML, 201, "big"),
]


@pytest.mark.parametrize(("body", "headers", "status", "words"),
                         [b[1:] for b in BODIES], ids=[b[0] for b in BODIES])
def test_healthz_answers_while_a_large_body_is_processed(
        tmp_path: Path, body: bytes, headers: dict[str, str], status: int, words: str) -> None:
    assert len(body) < 1 << 20  # under the body size limit: the server must read it
    # the limits answer, not the work deadline: it counts CPU seconds (each body takes at
    # most ~0.45 s of CPU), so a loaded machine, which ran the 1 MB YAML bodies past a
    # wall-clock 10 s at a load average of ~42, does not reach it
    with running_server(tmp_path) as server:
        answer: list[tuple[int, Any]] = []
        posted: list[float] = []

        def send() -> None:
            started = time.monotonic()
            answer.append(Raw(server.url)("POST", "/sessions", raw=body, headers=headers))
            posted.append(time.monotonic() - started)

        sender = threading.Thread(target=send)
        pool = urllib3.connection_from_url(server.url, retries=False)
        idle = statistics.median(_healthz(pool) for _ in range(11))
        sender.start()
        latencies: list[float] = []
        while sender.is_alive() or not latencies:
            latencies.append(_healthz(pool))
            time.sleep(0.01)
        sender.join()
        got_status, got = answer[0]
        assert got_status == status, got
        text = got["message"] if status == 400 else got["name"]
        assert words in text, text
        bound = max(HEALTHZ_BOUND, IDLE_FACTOR * idle, POST_SHARE * posted[0])
        assert max(latencies) < bound, (len(latencies), sorted(latencies)[-3:], idle, posted)


def _healthz(pool: urllib3.HTTPConnectionPool) -> float:
    """Seconds one ``GET /healthz`` took (it must answer 200)."""
    started = time.monotonic()
    r = pool.request("GET", "/healthz", timeout=urllib3.Timeout(connect=5, read=120))
    assert r.status == 200
    return time.monotonic() - started


def test_work_past_the_deadline_is_a_clear_400(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bodies, "WORK_DEADLINE", 0.01)
    slow = next(b for b in BODIES if b[0] == "yaml-metadata")  # ~1 s of PyYAML on a quiet machine
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        status, got = http("POST", "/sessions", raw=slow[1], headers=slow[2])
        assert (status, got["error"]) == (400, "bad_request"), got
        assert "took more than 0.01 s (it used " in got["message"], got
        assert "s of CPU in " in got["message"] and "send a smaller request" in got["message"]
        assert http("GET", "/healthz")[0] == 200
        assert http("GET", "/sessions")[1]["sessions"] == []


def _compute(cpu_seconds: float) -> str:
    """Work that keeps a core busy for ``cpu_seconds`` of this thread's CPU time."""
    started = time.thread_time()
    while time.thread_time() - started < cpu_seconds:
        pass
    return "computed"


def _wait(seconds: float) -> str:
    """Work that takes wall-clock time but no CPU, like a thread waiting for a core on a
    loaded machine."""
    time.sleep(seconds)
    return "waited"


def test_the_work_deadline_counts_cpu_time_not_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """At a load average of ~80 a 150 kB YAML body within every limit was refused: the
    deadline counted wall-clock seconds, most of them spent waiting for a core."""
    monkeypatch.setattr(bodies, "WORK_DEADLINE", 0.2)
    started = time.monotonic()
    assert asyncio.run(bodies.off_loop("waiting", _wait, 1.0)) == "waited"
    assert time.monotonic() - started >= 1.0  # five times the deadline, in wall-clock time
    assert asyncio.run(bodies.off_loop("computing", _compute, 0.05)) == "computed"
    with pytest.raises(ProtocolError, match=r"computing took more than 0.2 s \(it used "
                                            r"[0-9.]+ s of CPU in [0-9.]+ s\)") as refused:
        asyncio.run(bodies.off_loop("computing", _compute, 1.5))
    used = float(re.findall(r"used ([0-9.]+) s of CPU", str(refused.value))[0])
    assert 0.2 <= used < 1.5  # refused at the deadline (to 2 decimals), before the work was done


@pytest.mark.parametrize(("change", "words"), [
    ({"parameters": [{"name": "e", "type": "enum", "values": list(range(1001))}]},
     "definition.parameters.0.values: at most 1000 accepted, 1001 given"),
    ({"constraints": ["x0 + x1 <= " + "1 + " * 600 + "1"]},
     "definition.constraints.0: a constraint may have at most 2000 characters, 2412 given"),
    ({"plugins": [{"name": "constraint",
                   "options": {"constraints": ["x0 <= 3"] * 300, "constants": {}}}]},
     "definition.plugins.0.options.constraints: at most 256 accepted, 300 given"),
])
def test_definition_limits_name_the_limit_and_what_was_given(
        tmp_path: Path, change: dict[str, Any], words: str) -> None:
    with running_server(tmp_path) as server:
        http = Raw(server.url)
        status, body = http("POST", "/sessions", {"definition": {**definition("l"), **change}})
        assert (status, body["error"]) == (400, "bad_request"), body
        assert words in body["message"], body["message"]
        assert http("GET", "/sessions")[1]["sessions"] == []
        # at the limits a definition is accepted
        limits = {"parameters": _params(256), "constraints": ["x0 + x1 <= 15"] * 256}
        status, body = http("POST", "/sessions", {"definition": {**definition("m"), **limits}})
        assert status == 201, body
