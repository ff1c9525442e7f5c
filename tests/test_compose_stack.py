"""The docker-compose deployment run for real (``make compose-test``; skipped otherwise).

deploy/compose-test starts the engine's Docker API (Podman + runc here) and builds the images
(deploy/images/build), then runs this file: the stack comes up under its own project name, a
short tuning session's docker controller restarts the PostgreSQL container for shared_buffers,
Prometheus is asked (HTTP API) what it scraped from the server and the tuner, a restart with an
impossible shared_buffers is rolled back inside the container, and the ``shop`` profile's
live-mode tuner observes the shop's load. Everything is brought down at the end, volumes too.

Grafana's image cannot be pulled here, so its service is never started; its dashboard is checked
against the metric names Prometheus really scraped instead.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import docker  # type: ignore[import-untyped]
import psycopg
import pytest
from test_deploy import DASHBOARD, dashboard_queries, promql_metric_names

from tuner_client.servers.controllers.docker import DockerController

ROOT = Path(__file__).resolve().parent.parent
IMAGES_ENV = os.environ.get("HARMONY_COMPOSE_IMAGES", "")
PROJECT = "harmony-ci"
#: the core services (Grafana left out: its image is not buildable from Debian)
CORE = ["postgres", "harmony-server", "tpch-loader", "tuner", "prometheus"]
SHOP = ["shop-setup", "shop-load", "shop-tuner"]
#: where the measured numbers go (read by the closing note of the issue, not asserted)
TIMINGS = Path(os.environ.get("HARMONY_ENGINE_DIR", "/tmp")) / "compose-test-timings.json"

pytestmark = [
    pytest.mark.compose,
    pytest.mark.skipif(not IMAGES_ENV, reason="run by `make compose-test` (deploy/compose-test), "
                       "which starts a container engine and builds the images"),
]

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float,
             every_s: float = 2.0) -> T:
    """Poll ``probe`` until it returns something other than None; fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = probe()
        if result is not None:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(every_s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def compose_command() -> list[str]:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True,
                                 timeout=30).returncode == 0:
        return [docker, "compose"]
    found = shutil.which("docker-compose")
    if found is None:
        pytest.fail("neither `docker compose` nor docker-compose is installed (make engine)")
    return [found]


@dataclass
class Stack:
    """The running project: how to call compose, its ports, the Docker client, the password."""

    env_file: Path
    ports: dict[str, int]
    password: str
    client: Any  # docker.DockerClient
    timings: dict[str, Any]

    def compose(self, *args: str, timeout_s: float = 600, check: bool = True
                ) -> subprocess.CompletedProcess[str]:
        argv = [*compose_command(), "-p", PROJECT, "-f", str(ROOT / "docker-compose.yml"),
                "--env-file", str(self.env_file), "--profile", "shop", *args]
        result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True,
                                timeout=timeout_s)
        if check:
            assert result.returncode == 0, \
                f"{' '.join(args)}:\n{result.stdout}\n{result.stderr}"
        return result

    def container(self, service: str) -> Any:
        found = self.client.containers.list(all=True, filters={"label": [
            f"com.docker.compose.project={PROJECT}", f"com.docker.compose.service={service}"]})
        assert len(found) == 1, f"{service}: {len(found)} containers"
        return found[0]

    def dsn(self, dbname: str) -> str:
        return (f"host=127.0.0.1 port={self.ports['POSTGRES_PORT']} user=postgres "
                f"password={self.password} dbname={dbname} connect_timeout=5")

    def prometheus(self, path: str, **params: str) -> Any:
        url = (f"http://127.0.0.1:{self.ports['PROMETHEUS_PORT']}/api/v1/{path}?"
               + urllib.parse.urlencode(params))
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> dict[str, float]:
        """An instant PromQL query: {job or metric label set: value}."""
        out = {}
        for row in self.prometheus("query", query=expr)["result"]:
            labels = row["metric"]
            key = labels.get("job") or json.dumps(labels, sort_keys=True)
            out[key] = float(row["value"][1])
        return out


def _our_containers(client: Any) -> list[Any]:
    return list(client.containers.list(
        all=True, filters={"label": f"com.docker.compose.project={PROJECT}"}))


def _remove_interrupted_run(client: Any) -> None:
    """What an interrupted run of this test left (killed before its ``down``: the containers,
    volumes and networks of its own compose project, by label, never another deployment's):
    the database's fixed container name would refuse the next run, and a volume would hand it
    a cluster initialised with the old run's password."""
    label = {"label": f"com.docker.compose.project={PROJECT}"}
    for container in _our_containers(client):
        _remove(container)
    for volume in client.volumes.list(filters=label):
        volume.remove(force=True)
    for network in client.networks.list(filters=label):
        network.remove()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    client = docker.from_env()
    _remove_interrupted_run(client)
    for name in ("harmony-postgres", "harmony-postgres-2"):
        existing = client.containers.list(all=True, filters={"name": f"^{name}$"})
        if existing:
            pytest.fail(f"a container named {name} exists already (another deployment?): "
                        "docker-compose.yml gives the database that fixed name; remove it first")
    secrets_dir = ROOT / "deploy" / "secrets"
    made: list[Path] = []
    for name in ("postgres_password", "grafana_admin_password"):
        path = secrets_dir / name
        if not path.exists():
            path.write_text(secrets.token_hex(24) + "\n")
            made.append(path)
        path.chmod(0o644)  # read by the containers' own users
    password = (secrets_dir / "postgres_password").read_text().strip()
    ports = {name: free_port() for name in ("POSTGRES_PORT", "HARMONY_PORT", "TUNER_METRICS_PORT",
                                            "SHOP_TUNER_METRICS_PORT", "PROMETHEUS_PORT",
                                            "GRAFANA_PORT", "POSTGRES_REPLICA_2_PORT")}
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    socket_path = host.removeprefix("unix://")
    env_file = tmp_path_factory.mktemp("compose") / "compose.env"
    env_file.write_text(Path(IMAGES_ENV).read_text() + "".join(f"{k}={v}\n" for k, v in {
        **ports,
        "TPCH_SCALE": "0.01",
        "TUNER_CONFIG": "/etc/harmony/tuner/compose-test.yaml",
        "SHOP_TUNER_CONFIG": "/etc/harmony/tuner/compose-test-shop.yaml",
        "POSTGRES_MEMORY": "4g",
        "SHOP_SCALE": "1",
        "SHOP_CLIENTS": "4",
        "DOCKER_SOCKET": socket_path,
        "DOCKER_GID": str(os.stat(socket_path).st_gid),
    }.items()))
    result = Stack(env_file, ports, password, client, {})
    started = time.monotonic()
    try:
        result.compose("up", "-d", "--no-build", *CORE)
        result.timings["up_s"] = round(time.monotonic() - started, 1)
        yield result
    finally:
        logs = result.compose("logs", "--no-color", "--tail", "60", check=False)
        (Path(os.environ.get("HARMONY_ENGINE_DIR", "/tmp")) / "compose-test.log").write_text(
            logs.stdout + logs.stderr)
        # the clients first: a pgbench that loses its database exits, and its restart policy
        # would start it again while `down` stops the database beside it
        for group in (["shop-tuner", "tuner"], ["shop-load"]):
            result.compose("stop", "--timeout", "20", *group, check=False)
        down = result.compose("down", "-v", "--remove-orphans", "--timeout", "20", check=False)
        # whatever `down` missed is removed anyway (and fails the test below)
        left = _our_containers(client)
        for container in left:
            _remove(container)
        if left:
            result.compose("down", "-v", "--remove-orphans", check=False)
        for path in made:
            path.unlink()
        result.timings["total_s"] = round(time.monotonic() - started, 1)
        TIMINGS.write_text(json.dumps(result.timings, indent=2) + "\n")
        volumes = client.volumes.list(filters={"label": f"com.docker.compose.project={PROJECT}"})
        client.close()
        assert down.returncode == 0, down.stderr
        assert not left and not volumes, (f"left by `down`: {[c.name for c in left]}, "
                                          f"volumes {[v.name for v in volumes]}")


def _remove(container: Any) -> None:
    """Remove a container and its anonymous volumes, retrying while a restart policy is
    starting it again (Podman refuses to remove a container in the middle of that)."""
    for _ in range(20):
        try:
            container.remove(force=True, v=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError:
            time.sleep(0.5)
    container.remove(force=True, v=True)


# -- the tuning session ----------------------------------------------------------------------
def test_tuning_session_restarts_postgres_through_the_docker_api(stack: Stack) -> None:
    """The tuner's docker controller restarts the container for each shared_buffers point,
    with backups and verification, and the session finishes with the database up."""
    postgres = stack.container("postgres")
    postgres.reload()
    started_before = postgres.attrs["State"]["StartedAt"]
    tuner = stack.container("tuner")

    def finished() -> int | None:
        tuner.reload()
        if tuner.status == "exited":
            return int(tuner.attrs["State"]["ExitCode"])
        return None

    begun = time.monotonic()
    code = wait_for("the tuner's session to finish", finished, timeout_s=900, every_s=3)
    stack.timings["tuning_session_s"] = round(time.monotonic() - begun, 1)
    log = tuner.logs().decode(errors="replace")
    assert code == 0, log[-3000:]
    restarts = re.findall(r"restarted with \{'shared_buffers': '(\d+)(MB|kB|GB)'\} in ([\d.]+) s",
                          log)
    # two offline points at least, each a real restart of the container's server
    assert len(restarts) >= 2, log[-3000:]
    durations = [float(s) for *_, s in restarts]
    stack.timings["tuner_restart_s"] = durations
    for step in ("stopped", "started"):
        stack.timings[f"tuner_container_{step}_s"] = [float(s) for s in re.findall(
            rf"container harmony-postgres {step} in ([\d.]+) s", log)]
    assert max(durations) < 60  # restart_timeout_s of deploy/tuner/compose-test.yaml
    postgres.reload()
    assert postgres.status == "running"
    assert postgres.attrs["State"]["StartedAt"] != started_before
    server_log = postgres.logs().decode(errors="replace")
    # the first start after initdb, then one per restart
    assert server_log.count("database system is ready to accept connections") >= \
        1 + len(restarts)
    # the tuner applied its best configuration at the end; it is what the server runs now
    summary = _json_from_archive(tuner.get_archive("/var/lib/harmony/out/summary.json")[0])
    assert summary, "the tuner wrote an empty summary.json"
    stack.timings["summary_keys"] = sorted(summary)
    with psycopg.connect(stack.dsn("tpch"), autocommit=True) as conn:
        row = conn.execute("SELECT setting::bigint * 8192 FROM pg_settings "
                           "WHERE name = 'shared_buffers'").fetchone()
        assert row is not None
        assert 32 * 2**20 <= row[0] <= 256 * 2**20  # inside the searched range
        pending = conn.execute("SELECT count(*) FROM pg_settings WHERE pending_restart"
                               ).fetchone()
        assert pending == (0,)


def _json_from_archive(stream: Any) -> dict[str, Any]:
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        fh = tar.extractfile(tar.getmembers()[0])
        assert fh is not None
        data = json.loads(fh.read())
    assert isinstance(data, dict)
    return data


# -- Prometheus ------------------------------------------------------------------------------
def test_prometheus_scraped_the_server_and_the_tuner(stack: Stack) -> None:
    """Prometheus's HTTP API: both jobs were up, and the tuner's restarts and measured points
    are in its database with the numbers the session produced."""
    # one error answer, so that the server's error counter has a series to scrape
    missing = f"http://127.0.0.1:{stack.ports['HARMONY_PORT']}/sessions/no-such-session"
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(missing, timeout=10)
    assert answer.value.code == 404
    answer.value.close()
    up = stack.query("max_over_time(up[30m])")
    assert up == {"harmony-server": 1.0, "harmony-tuner": 1.0}
    # the tuner is gone now (a finished run exits): its last scraped values remain
    restarts = stack.query("max_over_time(harmony_tuner_restarts_total[30m])")
    assert restarts["harmony-tuner"] >= 2
    evaluations = stack.query("sum by (kind) (max_over_time("
                              "harmony_tuner_evaluations_total[30m]))")
    kinds = {json.loads(k)["kind"]: v for k, v in evaluations.items()}
    assert kinds.get("offline", 0) >= 2 and kinds.get("online", 0) >= 1, kinds
    qps = stack.query("max_over_time(harmony_tuner_best_throughput_queries_per_second[30m])")
    assert qps["harmony-tuner"] > 0
    requests = stack.query("sum(max_over_time(harmony_server_requests_total[30m]))")
    assert sum(requests.values()) > 10
    errors = wait_for("the server's 404 in Prometheus", lambda: stack.query(
        "sum(harmony_server_errors_total)") or None, timeout_s=60, every_s=3)
    assert sum(errors.values()) >= 1
    durations = stack.query("max_over_time(harmony_tuner_restart_duration_seconds_sum[30m]) / "
                            "max_over_time(harmony_tuner_restart_duration_seconds_count[30m])")
    stack.timings["prometheus_mean_restart_s"] = durations.get("harmony-tuner")


def test_dashboard_metrics_are_among_those_scraped(stack: Stack) -> None:
    """Grafana does not run here: every metric its dashboard queries must be a name Prometheus
    scraped, except those only an event this short session does not produce would create."""
    scraped = set(stack.prometheus("label/__name__/values"))
    queried = {name for _, expr in dashboard_queries(json.loads(DASHBOARD.read_text()))
               for name in promql_metric_names(expr)}
    missing = sorted(queried - scraped)
    stack.timings["dashboard_metrics"] = {"queried": len(queried), "scraped": len(queried)
                                          - len(missing), "not_scraped": missing}
    assert len(queried) >= 20
    assert not (set(missing) - EVENT_ONLY), f"the dashboard queries unscraped {missing}"


#: series that exist only once an event happened which a 2-point session does not produce: the
#: fitted BME curve (a fit needs more offline points with buffer misses than it measures)
EVENT_ONLY = {"harmony_tuner_bme_curve_probability", "harmony_tuner_bme_curve_shared_buffers_bytes"}


# -- a failed restart inside the container ---------------------------------------------------
def test_impossible_shared_buffers_is_rolled_back_in_the_container(stack: Stack) -> None:
    """1TB of shared_buffers cannot be mapped: the container's server exits, the controller
    puts the last good postgresql.auto.conf back into the container and starts it again."""
    controller = DockerController("harmony-postgres", stack.dsn("tpch"))
    with psycopg.connect(stack.dsn("tpch")) as conn:
        row = conn.execute("SHOW shared_buffers").fetchone()
    assert row is not None
    before = row[0]
    good = []
    for value in ("64MB", "96MB", before):
        report = controller.restart_with({"shared_buffers": value}, timeout_s=60)
        assert report.ok and report.in_force == {"shared_buffers": value}, report
        good.append(round(report.restart_s, 2))
    failed = controller.restart_with({"shared_buffers": "1TB"}, timeout_s=60)
    stack.timings["host_controller_restart_s"] = good
    stack.timings["host_controller_failed_restart_s"] = round(failed.restart_s, 2)
    assert not failed.ok and failed.rolled_back
    assert "could not map anonymous shared memory" in (failed.reason or ""), failed.reason
    assert failed.in_force == {"shared_buffers": before}
    assert failed.restart_s < 30  # the exit is noticed at once, not after the 60 s timeout
    with psycopg.connect(stack.dsn("tpch")) as conn:
        assert conn.execute("SHOW shared_buffers").fetchone() == (before,)
        assert conn.execute("SELECT count(*) FROM pg_settings WHERE pending_restart"
                            ).fetchone() == (0,)
    assert "1TB" not in (controller.read_auto_conf() or "")
    if controller.client is not None:
        controller.client.close()


# -- profile shop ----------------------------------------------------------------------------
def test_shop_profile_live_tuner_observes_the_shop_load(stack: Stack) -> None:
    """``--profile shop``: the shop database loaded, pgbench running its scripts against it,
    and the live-mode tuner measuring its reference and candidates on that traffic (its own
    metrics port); a candidate that slows the statements down is reverted by a guardrail."""
    begun = time.monotonic()
    stack.compose("up", "-d", "--no-build", *SHOP)
    url = f"http://127.0.0.1:{stack.ports['SHOP_TUNER_METRICS_PORT']}/metrics"

    def concluded() -> dict[str, float] | None:
        """The tuner's counters once a reference and two candidates were concluded."""
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
        except OSError:
            return None
        counts: dict[str, float] = {}
        for m in re.finditer(r'^harmony_tuner_(evaluations|failed_points|guardrail_trips)_total'
                             r'\{kind="(\w+)"\} (\S+)$', text, re.M):
            counts[f"{m.group(1)}:{m.group(2)}"] = float(m.group(3))
        candidates = sum(v for k, v in counts.items()
                         if k == "evaluations:online" or k.startswith("failed_points:"))
        return counts if counts.get("evaluations:reference", 0) >= 1 and candidates >= 2 \
            else None

    counts = wait_for("a reference and two candidates of the shop-tuner", concluded,
                      timeout_s=600, every_s=5)
    stack.timings["shop_two_candidates_s"] = round(time.monotonic() - begun, 1)
    stack.timings["shop_tuner_counts"] = counts
    # every candidate that failed was a guardrail trip (put back within its sample), not a crash
    trips = sum(v for k, v in counts.items() if k.startswith("guardrail_trips:"))
    failed = sum(v for k, v in counts.items() if k.startswith("failed_points:"))
    assert failed == trips
    log = stack.container("shop-tuner").logs().decode(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    reference = re.search(r"live reference: (\d+) statements compared \((\d+) calls\)", log)
    assert reference, log[-3000:]
    assert int(reference.group(1)) >= 3 and int(reference.group(2)) > 1000  # the shop's load
    with psycopg.connect(stack.dsn("shop")) as conn:
        rows = conn.execute(
            "SELECT count(*), sum(calls) FROM pg_stat_statements s JOIN pg_database d "
            "ON d.oid = s.dbid WHERE d.datname = 'shop' AND s.calls > 0").fetchone()
    assert rows is not None
    statements, calls = rows
    assert statements >= 3 and calls > 1000, rows
    stack.timings["shop_statements_calls"] = [statements, int(calls)]
