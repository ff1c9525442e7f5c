"""Benchmark: fetch+report round trips over loopback, one connection and 8 clients on 100 sessions.

    python -m benchmarks.server_roundtrip [--quick]

The server runs as its own process (``python -m harmony_server``, SQLite store in a temp
dir, WAL, synchronous=NORMAL); the Python client (:mod:`tuner_client.api.client` over
:mod:`tuner_client.api.transport`: the standard library's ``http.client``) drives it.
Also measures the session core + store alone (no HTTP) to separate the costs. Writes
``benchmarks/results/server.json`` and ``server.md``. Targets: >= 1,000 pairs/s on one
connection, p99 < 10 ms per pair.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import urllib3

from benchmarks.machine import cpu_model
from harmony_core.definition import SessionDefinition
from harmony_server.server import EVENT_LOOP
from tuner_client.api.client import connect

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _definition(name: str) -> dict[str, Any]:
    return {"name": name, "strategy": "random", "seed": 1,
            "parameters": [{"name": f"x{i}", "type": "int", "min": -10_000, "max": 10_000}
                           for i in range(4)]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def q(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000.0

    return {"p50_ms": q(0.50), "p90_ms": q(0.90), "p99_ms": q(0.99), "max_ms": ordered[-1] * 1e3,
            "mean_ms": statistics.fmean(ordered) * 1000.0}


class ServerProcess:
    """``python -m harmony_server`` on a free loopback port with a fresh SQLite store."""

    def __init__(self, state: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "HARMONY_LOG_LEVEL": "WARNING", "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-m", "harmony_server", "--port",
                                      str(self.port), "--state-dir", str(state)], cwd=ROOT,
                                     env=env, stdout=subprocess.DEVNULL)
        pool = urllib3.HTTPConnectionPool("127.0.0.1", self.port, retries=False)
        # generous: on a loaded machine importing the server alone took a minute
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}")
            try:
                if pool.request("GET", "/healthz", timeout=1.0).status == 200:
                    return
            except urllib3.exceptions.HTTPError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("server did not come up")

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used so far (from /proc)."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def one_connection(server: ServerProcess, pairs: int, warmup: int) -> dict[str, Any]:
    """Sequential fetch+report pairs on one keep-alive connection."""
    with connect(server.url, client_id="bench") as client:
        s = client.create_session(_definition("one-connection"))
        pair_times: list[float] = []
        fetch_times: list[float] = []
        report_times: list[float] = []
        for i in range(warmup + pairs):
            if i == warmup:
                server_cpu, client_cpu = server.cpu_seconds(), time.process_time()
            t0 = time.perf_counter()
            got = s.fetch(timeout=5)
            t1 = time.perf_counter()
            assert got is not None
            s.report(got.trial_id, float(sum(v * v for v in got.point.values())))  # type: ignore[operator]
            t2 = time.perf_counter()
            if i >= warmup:
                pair_times.append(t2 - t0)
                fetch_times.append(t1 - t0)
                report_times.append(t2 - t1)
        total = sum(pair_times)
        server_cpu = (server.cpu_seconds() - server_cpu) / pairs
        client_cpu = (time.process_time() - client_cpu) / pairs
        s.kill()
    return {"pairs": pairs, "seconds": total, "pairs_per_second": pairs / total,
            "cpu_ms_per_pair": {"server": server_cpu * 1e3, "client": client_cpu * 1e3},
            # what one pair costs in CPU: the throughput a machine with idle cores would reach
            "cpu_bound_pairs_per_second": 1.0 / (server_cpu + client_cpu),
            "pair": _percentiles(pair_times), "fetch": _percentiles(fetch_times),
            "report": _percentiles(report_times)}


def one_connection_piggybacked(server: ServerProcess, pairs: int, warmup: int) -> dict[str, Any]:
    """Sequential pairs where each report also fetches the next trial (one round trip a pair)."""
    with connect(server.url, client_id="bench-piggyback") as client:
        s = client.create_session(_definition("one-connection-piggyback"))
        got = s.fetch(timeout=5)
        pair_times: list[float] = []
        for i in range(warmup + pairs):
            if i == warmup:
                server_cpu, client_cpu = server.cpu_seconds(), time.process_time()
            assert got is not None
            t0 = time.perf_counter()
            got = s.report_and_fetch(got.trial_id,
                                     float(sum(v * v for v in got.point.values())),  # type: ignore[misc]
                                     timeout=5)
            if i >= warmup:
                pair_times.append(time.perf_counter() - t0)
        total = sum(pair_times)
        server_cpu = (server.cpu_seconds() - server_cpu) / pairs
        client_cpu = (time.process_time() - client_cpu) / pairs
        reported = sum(1 for t in s.trials() if t["status"] == "done")
        s.kill()
    return {"pairs": pairs, "seconds": total, "pairs_per_second": pairs / total,
            "reports_stored": reported,
            "cpu_ms_per_pair": {"server": server_cpu * 1e3, "client": client_cpu * 1e3},
            "pair": _percentiles(pair_times)}


def many_sessions(url: str, sessions: int, threads: int, pairs_per_session: int
                  ) -> dict[str, Any]:
    """``sessions`` live sessions driven at once by ``threads`` clients (one connection each)."""
    with connect(url, client_id="bench-admin") as admin:
        for i in range(sessions):
            admin.create_session(_definition(f"many-{i:03d}"))
    latencies: list[list[float]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads + 1)

    def drive(t: int) -> None:
        mine = [f"many-{i:03d}" for i in range(t, sessions, threads)]
        with connect(url, client_id=f"bench-{t}") as client:
            handles = [client.join(name) for name in mine]
            barrier.wait()
            for _ in range(pairs_per_session):
                for s in handles:
                    t0 = time.perf_counter()
                    got = s.fetch(timeout=5)
                    assert got is not None
                    s.report(got.trial_id, 1.0)
                    latencies[t].append(time.perf_counter() - t0)

    workers = [threading.Thread(target=drive, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    started = time.perf_counter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - started
    flat = [x for per in latencies for x in per]
    with connect(url, client_id="bench-admin") as admin:
        listing = admin.list_sessions()
        assert len(listing) == sessions
        assert all(r["completed"] == pairs_per_session for r in listing)
    return {"sessions": sessions, "client_threads": threads, "pairs": len(flat),
            "seconds": elapsed, "pairs_per_second": len(flat) / elapsed,
            "pair": _percentiles(flat)}


def core_and_store(state: Path, pairs: int) -> dict[str, Any]:
    """The hosted session (core + durable store) alone, no HTTP: the server's floor."""
    import asyncio

    from harmony_server.hosted import HostedSession
    from harmony_server.store import Store, default_store_url

    async def run() -> dict[str, Any]:
        store = Store(default_store_url(state))
        d = SessionDefinition.from_dict(_definition("core-only"))
        store.create_session(d.name, d.to_dict(), time.time())
        hosted = HostedSession(d, store, created=time.time())
        times = []
        for _ in range(pairs):
            t0 = time.perf_counter()
            got = hosted.try_fetch("c").assignment
            assert got is not None
            hosted.report(got.trial_id, 1.0, client="c")
            times.append(time.perf_counter() - t0)
        writes = store.stats.write_latency
        out = {"pairs": pairs, "pairs_per_second": pairs / sum(times),
               "pair": _percentiles(times),
               "store_write": {"count": writes.count, "mean_ms": writes.total / writes.count * 1e3,
                               "p99_upper_bound_ms": writes.quantile(0.99) * 1e3,
                               "max_ms": writes.maximum * 1e3}}
        store.close()
        return out

    return asyncio.run(run())


def machine() -> dict[str, Any]:
    cpu = cpu_model()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "loadavg_1m": os.getloadavg()[0],
            "loadavg_1_5_15": os.getloadavg(), "server_event_loop": EVENT_LOOP}


def write_markdown(result: dict[str, Any], path: Path) -> None:
    one, many, core = result["one_connection"], result["many_sessions"], result["core_and_store"]
    pig = result["one_connection_piggybacked"]

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    m = result["machine"]
    lines = [
        "# Server round-trip benchmark",
        "",
        f"Command: `{result['command']}`  ",
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}, {m['platform']} "
        f"(1-min load average at start: {m['loadavg_1m']:.2f}; the machine is shared).  ",
        "Server: `python -m harmony_server` as its own process (event loop: "
        f"{m.get('server_event_loop', 'asyncio')}), SQLite store (WAL, "
        "synchronous=NORMAL: durable against a killed process), strategy `random`, 4 integer "
        "parameters. Client: `tuner_client.api.client` over `tuner_client.api.transport` (the "
        "standard library's `http.client`, one keep-alive connection per thread) over "
        "loopback.",
        "",
        "| scenario | pairs | pairs/s | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|---:|",
        f"| one connection, sequential fetch+report | {one['pairs']} | "
        f"{one['pairs_per_second']:.0f} | {one['pair']['p50_ms']:.2f} | "
        f"{one['pair']['p99_ms']:.2f} | {one['pair']['max_ms']:.2f} |",
        f"| one connection, report with piggybacked fetch | {pig['pairs']} | "
        f"{pig['pairs_per_second']:.0f} | {pig['pair']['p50_ms']:.2f} | "
        f"{pig['pair']['p99_ms']:.2f} | {pig['pair']['max_ms']:.2f} |",
        f"| {many['sessions']} sessions, {many['client_threads']} client threads | "
        f"{many['pairs']} | {many['pairs_per_second']:.0f} | {many['pair']['p50_ms']:.2f} | "
        f"{many['pair']['p99_ms']:.2f} | {many['pair']['max_ms']:.2f} |",
        f"| core + store only (no HTTP) | {core['pairs']} | {core['pairs_per_second']:.0f} | "
        f"{core['pair']['p50_ms']:.3f} | {core['pair']['p99_ms']:.3f} | "
        f"{core['pair']['max_ms']:.3f} |",
        "",
        f"One connection: fetch p50 {one['fetch']['p50_ms']:.2f} ms / p99 "
        f"{one['fetch']['p99_ms']:.2f} ms, report p50 {one['report']['p50_ms']:.2f} ms / p99 "
        f"{one['report']['p99_ms']:.2f} ms. Store commit: mean "
        f"{core['store_write']['mean_ms']:.3f} ms, p99 <= "
        f"{core['store_write']['p99_upper_bound_ms']:.3f} ms over {core['store_write']['count']} "
        "writes.",
        "",
        f"CPU per pair on one connection: server {one['cpu_ms_per_pair']['server']:.2f} ms, "
        f"client {one['cpu_ms_per_pair']['client']:.2f} ms, i.e. about "
        f"{one['cpu_bound_pairs_per_second']:.0f} pairs/s when neither process waits for a core "
        f"(1-min load average at the end: {result['loadavg_end_1m']:.2f}).",
        "",
        f"Targets: >= 1,000 pairs/s on one connection: separate fetch and report "
        f"**{met(result['targets']['throughput'])}**, piggybacked "
        f"**{met(result['targets']['throughput_piggybacked'])}**; >= 2,000 pairs/s with "
        f"{many['client_threads']} clients: **{met(result['targets']['throughput_many_clients'])}**"
        f" (server CPU {many['server_cpu_ms_per_pair']:.2f} ms per pair there);"
        f" p99 < 10 ms: **{met(result['targets']['p99'])}**. A piggybacked pair is one HTTP "
        "round trip (`Session.report_and_fetch`: the report's answer carries the next trial); "
        f"its CPU: server {pig['cpu_ms_per_pair']['server']:.2f} ms, client "
        f"{pig['cpu_ms_per_pair']['client']:.2f} ms per pair.",
        "",
    ]
    path.write_text("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer pairs (a smoke run)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--clients", type=int, default=8,
                        help="client threads driving the 100 sessions (default 8)")
    args = parser.parse_args(argv)
    pairs, per_session = (1000, 5) if args.quick else (5000, 20)
    result: dict[str, Any] = {"command": "python -m benchmarks.server_roundtrip"
                              + (" --quick" if args.quick else ""), "machine": machine()}
    with tempfile.TemporaryDirectory(prefix="harmony-bench-") as tmp:
        server = ServerProcess(Path(tmp) / "state")
        try:
            result["one_connection"] = one_connection(server, pairs, warmup=200)
            result["one_connection_piggybacked"] = one_connection_piggybacked(server, pairs,
                                                                              warmup=200)
            before = server.cpu_seconds()
            many = result["many_sessions"] = many_sessions(server.url, 100, args.clients,
                                                           per_session)
            many["server_cpu_ms_per_pair"] = (server.cpu_seconds() - before) / many["pairs"] * 1e3
        finally:
            server.stop()
        result["core_and_store"] = core_and_store(Path(tmp) / "core", min(pairs, 2000))
    result["loadavg_end_1m"] = os.getloadavg()[0]
    result["loadavg_end_1_5_15"] = os.getloadavg()
    one = result["one_connection"]
    result["targets"] = {"throughput": one["pairs_per_second"] >= 1000,
                         "throughput_piggybacked":
                             result["one_connection_piggybacked"]["pairs_per_second"] >= 1000,
                         "p99": one["pair"]["p99_ms"] < 10.0,
                         "throughput_many_clients":
                             result["many_sessions"]["pairs_per_second"] >= 2000}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "server.json").write_text(json.dumps(result, indent=2) + "\n")
    write_markdown(result, args.out / "server.md")
    print(json.dumps({k: result[k] for k in ("one_connection", "one_connection_piggybacked",
                                              "many_sessions",
                                              "core_and_store", "targets")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
