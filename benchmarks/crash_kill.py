"""Evidence: ``kill -9`` of the server under three clients, with hostile requests mixed in.

    python -m benchmarks.crash_kill [--kills 14] [--acks-per-life 25] [--tag T]

A server process (SQLite store, WAL, synchronous=NORMAL) hosts one session; three clients
(the client library, ``HttpBackend`` retrying through the outages) fetch, measure and report
in a loop; a fourth thread sends what a careless or hostile client would: lone surrogates in
a fetch's client, a join's client and host fields and a failure report's reason; reports,
heartbeats and leaves under a worker's client id without its secret or with a wrong one; a
second join of a worker's id; a report of a worker's trial by another joined client. Each
life of the server ends with SIGKILL once the workers had ``--acks-per-life`` more reports
acknowledged; the server is started again on the same store and port. At the end:

- lost: an acknowledged report that is not a ``done`` trial in the store (must be 0);
- duplicated: a trial acknowledged twice, or more report commands in the log than done trials;
- broken: sessions the restarted server could not replay, a log whose seq is not 1..n,
  SQLite's integrity check, and the served state against a replay of the log;
- the hostile answers by status: every one must be a 4xx (a 5xx or a 2xx is counted).

Writes ``benchmarks/results/crash_kill[.T].json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import collections
import json
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import urllib3

from benchmarks.server_proc import ServerChild, machine
from harmony_base.tokens import CLIENT_SECRET_HEADER
from harmony_server.store import Store, default_store_url
from tuner_client.api.client import HarmonyClient, Session
from tuner_client.api.transport import HttpBackend

RESULTS = Path(__file__).resolve().parent / "results"
NAME = "crash"
SURROGATE = "\ud800"


def _definition() -> dict[str, Any]:
    """A search that never converges within the run (random on a 20,001^4 grid)."""
    return {"name": NAME, "strategy": "random", "seed": 3, "lease_seconds": 600.0,
            "parameters": [{"name": f"x{i}", "type": "int", "min": -10_000, "max": 10_000}
                           for i in range(4)]}


class Shared:
    """What the threads record, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[int, float] = {}
        self.double_acks: list[int] = []
        self.errors: list[str] = []
        self.hostile: collections.Counter[str] = collections.Counter()
        self.hostile_bad: list[str] = []
        self.stop = threading.Event()


def worker(url: str, index: int, shared: Shared, sessions: dict[str, Session]) -> None:
    """Fetch, "measure" and report until told to stop; every acknowledged report recorded."""
    try:
        client = HarmonyClient(HttpBackend(url, retry_seconds=600.0), f"w{index}")
        session = client.join(NAME)
        sessions[session.client_id] = session
        while not shared.stop.is_set():
            got = session.fetch(timeout=5.0)
            if got is None:
                continue
            value = float(sum(float(v) ** 2 for v in got.point.values()))
            session.report(got.trial_id, value)  # retried through an outage if in flight
            with shared.lock:
                if got.trial_id in shared.acked:
                    shared.double_acks.append(got.trial_id)
                shared.acked[got.trial_id] = value
    except Exception as exc:  # recorded, and the run reports it
        shared.errors.append(f"w{index}: {type(exc).__name__}: {exc}")


Hostile = tuple[str, dict[str, Any], dict[str, str] | None]


def _hostile_requests(victim: Session | None, trial: int | None) -> list[Hostile]:
    """(path, body, headers) of one round of requests that must each get a 4xx; headers
    ``None`` stands for the joined intruder's own secret."""
    base = f"/sessions/{NAME}"
    reqs: list[Hostile] = [
        (f"{base}/fetch", {"client": SURROGATE}, {}),
        (f"{base}/join", {"client": "x" + SURROGATE}, {}),
        (f"{base}/join", {"client": "h", "host": {"hostname": SURROGATE, "os": SURROGATE}}, {}),
        (f"{base}/report", {"client": "w0", "trial_id": trial or 0, "failure": True,
                            "reason": "oom " + SURROGATE}, {}),
        (f"{base}/join", {"client": "w1"}, {}),  # taking over a worker's id
    ]
    if trial is not None and victim is not None:
        who = victim.client_id
        reqs += [
            (f"{base}/report", {"client": who, "trial_id": trial, "value": -1e9}, {}),
            (f"{base}/report", {"client": who, "trial_id": trial, "value": -1e9},
             {CLIENT_SECRET_HEADER: "guess"}),
            (f"{base}/heartbeat", {"client": who, "trial_id": trial}, {}),
            (f"{base}/leave", {"client": who}, {CLIENT_SECRET_HEADER: "guess"}),
            (f"{base}/report", {"client": "intruder", "trial_id": trial, "value": -1e9}, None),
        ]
    return reqs


def hostile(url: str, shared: Shared, sessions: dict[str, Session]) -> None:
    """Send the hostile round again and again; count the answers by status."""
    pool = urllib3.connection_from_url(url, retries=False, maxsize=1)
    intruder: str | None = None
    while not shared.stop.is_set():
        try:
            if intruder is None:
                r = pool.request("POST", f"/sessions/{NAME}/join", body=json.dumps(
                    {"client": "intruder"}).encode(), headers={"Content-Type": "application/json"})
                intruder = json.loads(r.data).get("secret") if r.status == 200 else None
            trials = json.loads(pool.request("GET", f"/sessions/{NAME}/trials").data)["trials"]
            leased = [t for t in trials if t["status"] == "leased" and t["client"] in sessions]
            victim = sessions.get(leased[-1]["client"]) if leased else None
            trial = leased[-1]["id"] if leased else None
            for path, body, headers in _hostile_requests(victim, trial):
                if headers is None:
                    headers = {CLIENT_SECRET_HEADER: intruder} if intruder else {}
                r = pool.request("POST", path, body=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **headers},
                                 timeout=10.0)
                with shared.lock:
                    shared.hostile[f"{path.rsplit('/', 1)[1]} {r.status}"] += 1
                    if not 400 <= r.status < 500:
                        shared.hostile_bad.append(f"{path} {body} -> {r.status} {r.data[:200]!r}")
        except (urllib3.exceptions.HTTPError, ConnectionError, ValueError, KeyError):
            time.sleep(0.1)  # the server is down (being killed): try again


def verify(state: Path, server: ServerChild, shared: Shared) -> dict[str, Any]:
    """Lost, duplicated and broken, from the store and the restarted server."""
    http = urllib3.connection_from_url(server.url, retries=False)
    health = json.loads(http.request("GET", "/healthz").data)
    served = {t["id"]: t for t in json.loads(http.request(
        "GET", f"/sessions/{NAME}/trials").data)["trials"]}
    described = json.loads(http.request("GET", f"/sessions/{NAME}").data)
    store = Store(default_store_url(state))
    try:
        durable = {r.id: r for r in store.trials(NAME)}
        log = store.commands(NAME)
        integrity = store.check_integrity()
    finally:
        store.close()
    done = {tid: r.value for tid, r in durable.items() if r.status == "done"}
    reports = sum(1 for c in log if c.kind == "report")
    return {
        "acknowledged": len(shared.acked), "done_in_store": len(done),
        "lost": sum(1 for tid, v in shared.acked.items() if done.get(tid) != v),
        "done_not_acknowledged": sorted(set(done) - set(shared.acked))[:20],
        "acknowledged_twice": len(shared.double_acks),
        "report_commands": reports, "duplicated_in_log": reports - len(done),
        "broken_sessions": health["broken"], "integrity_problems": integrity,
        "log_seq_ok": [c.seq for c in log] == list(range(1, len(log) + 1)),
        "served_seq_matches_log": described["seq"] == len(log),
        "served_matches_store": all(
            (served[tid]["status"], served[tid]["value"]) == (r.status.value, r.value)
            for tid, r in durable.items()) and set(served) == set(durable),
        "joined_clients": sorted(h["client_id"] for h in described["hosts"]),
    }


def run(args: argparse.Namespace, state: Path) -> dict[str, Any]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = ServerChild(state, port)
    starts = [server.start()]
    HarmonyClient(HttpBackend(server.url), "admin").create_session(_definition())
    shared, sessions = Shared(), dict[str, Session]()
    threads = [threading.Thread(target=worker, args=(server.url, i, shared, sessions))
               for i in range(3)]
    for t in threads:
        t.start()
    while len(sessions) < 3 and not shared.errors:  # joined before anyone tries their ids
        time.sleep(0.02)
    threads.append(threading.Thread(target=hostile, args=(server.url, shared, sessions)))
    threads[-1].start()
    lives: list[dict[str, Any]] = []
    try:
        for _ in range(args.kills):
            target = len(shared.acked) + args.acks_per_life
            deadline = time.monotonic() + args.life_timeout
            while len(shared.acked) < target and time.monotonic() < deadline \
                    and not shared.errors:
                time.sleep(0.02)
            server.kill9()  # requests are in flight now
            acked_at_kill = len(shared.acked)
            starts.append(server.start())
            broken = json.loads(server.pool.request("GET", "/healthz").data)["broken"]
            lives.append({"acked_at_kill": acked_at_kill, "restart_s": round(starts[-1], 2),
                          "broken_after_restart": broken})
            print(f"  kill {len(lives)}: {acked_at_kill} acknowledged, restart "
                  f"{starts[-1]:.1f} s, broken {broken}", flush=True)
        time.sleep(2.0)  # the last life: the workers go on a little
    finally:
        shared.stop.set()
        for t in threads:
            t.join(120)
    result = verify(state, server, shared)
    server.stop()
    return {**result, "kills": len(lives), "lives": lives, "worker_errors": shared.errors,
            "hostile_answers": dict(sorted(shared.hostile.items())),
            "hostile_not_4xx": len(shared.hostile_bad),
            "hostile_not_4xx_examples": shared.hostile_bad[:10],
            "threads_still_running": sum(t.is_alive() for t in threads)}


def _markdown(result: dict[str, Any]) -> str:
    hostile = ", ".join(f"{k}: {v}" for k, v in result["hostile_answers"].items())
    return (f"# kill -9 under three clients, hostile requests mixed in\n\n`{result['command']}`"
            f"\n\nMachine: {result['machine']['cpu']}, {result['machine']['cores']} cores; at "
            f"the start `{result['machine']['uptime']}`, at the end `{result['uptime_end']}`."
            f"\n\n**{result['kills']} kills, {result['acknowledged']} acknowledged reports: "
            f"{result['lost']} lost, {result['acknowledged_twice']} acknowledged twice, "
            f"{result['duplicated_in_log']} duplicated in the log, "
            f"{result['broken_sessions']} broken sessions** (after every restart: "
            f"{[life['broken_after_restart'] for life in result['lives']]}); log seq 1..n "
            f"{result['log_seq_ok']}, served state = store {result['served_matches_store']}, "
            f"integrity problems {result['integrity_problems']}; worker errors "
            f"{result['worker_errors']}.\n\nHostile requests (operation and status): "
            f"{hostile}; not a 4xx: {result['hostile_not_4xx']}.\n\nRestart times (s): "
            f"{[life['restart_s'] for life in result['lives']]}.\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=14)
    parser.add_argument("--acks-per-life", type=int, default=25)
    parser.add_argument("--life-timeout", type=float, default=120.0,
                        help="kill anyway after this many seconds of one life")
    parser.add_argument("--tag", default="")
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    facts = machine()
    with tempfile.TemporaryDirectory() as state:
        result = run(args, Path(state))
    result = {"command": " ".join(["python -m benchmarks.crash_kill", *argv]),
              "machine": facts, "uptime_end": machine()["uptime"], **result}
    suffix = f".{args.tag}" if args.tag else ""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"crash_kill{suffix}.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / f"crash_kill{suffix}.md").write_text(_markdown(result))
    print(_markdown(result))


if __name__ == "__main__":
    main()
