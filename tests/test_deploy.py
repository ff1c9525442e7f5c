"""The deployment files: docker-compose.yml against the Compose specification, the policies an
operator relies on (loopback ports, secrets, health checks, no -c options), Prometheus and
Grafana provisioning, and every dashboard query naming a metric that is really exported."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from harmony_server.metrics import SERVER_METRICS
from tuner_client.metrics.exporter import TUNER_METRICS

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "harmony.json"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
#: standard series prometheus_client adds to every registry the server serves
STANDARD = {"process_virtual_memory_bytes", "process_resident_memory_bytes",
            "process_start_time_seconds", "process_cpu_seconds_total", "process_open_fds",
            "process_max_fds", "python_info"}
EXPORTED = set(SERVER_METRICS) | set(TUNER_METRICS) | STANDARD

_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
                 "or", "unless", "offset", "inf", "nan"}


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (functions, labels, keywords removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals (label values, regexes)
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = m.group(0)
        following = text[m.end():].lstrip()
        if following.startswith("(") or word.lower() in _PROMQL_WORDS:
            continue  # a function call or a keyword
        if m.start() > 0 and text[m.start() - 1] in "$0123456789.":
            continue  # a template variable or a number's exponent/unit
        names.add(word)
    return names


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def test_promql_metric_name_parser() -> None:
    assert promql_metric_names(
        'histogram_quantile(0.99, sum by (le) (rate(harmony_x_bucket{a="b:c"}[5m])))') == \
        {"harmony_x_bucket"}
    assert promql_metric_names("a_total / b_total - 1 > 0 and on(x) c") == \
        {"a_total", "b_total", "c"}
    assert promql_metric_names('m{knob=~".*(mem|x)"} * 60 + 1e3') == {"m"}


# -- compose -----------------------------------------------------------------------------------
def test_compose_validates_against_the_compose_specification() -> None:
    schema = json.loads((ROOT / "tests" / "data" / "compose-spec.json").read_text())
    # the vendored file names draft 2019-09 (with a trailing '#' jsonschema does not map)
    assert "2019-09" in schema["$schema"]
    errors = sorted(jsonschema.Draft201909Validator(schema).iter_errors(load_compose()), key=str)
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors[:10])


def test_compose_config_with_the_compose_tool(tmp_path: Path) -> None:
    """``docker compose config`` (plugin) or ``docker-compose config`` when installed."""
    commands = []
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True,
                                 timeout=30).returncode == 0:
        commands.append([docker, "compose"])
    if shutil.which("docker-compose"):
        commands.append([shutil.which("docker-compose") or "docker-compose"])
    if not commands:
        pytest.skip("neither the docker compose plugin nor docker-compose is installed")
    for command in commands:
        result = subprocess.run(
            [*command, "--env-file", str(ROOT / ".env.example"), "-f", str(COMPOSE),
             "config", "-q"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr


def test_compose_operator_policies() -> None:
    compose = load_compose()
    services: dict[str, Any] = compose["services"]
    assert {n for n, s in services.items() if "profiles" not in s} == {
        "postgres", "harmony-server", "tpch-loader", "tuner", "prometheus", "grafana"}
    pg = services["postgres"]
    image = re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", pg["image"])  # the default of ${VAR:-...}
    assert image.startswith("postgres:"), image  # the official image
    assert re.search(r"^POSTGRES_IMAGE=postgres:", (ROOT / ".env.example").read_text(), re.M)
    assert "command" not in pg and "entrypoint" not in pg  # no -c overriding ALTER SYSTEM
    assert any(v.endswith(":/var/lib/postgresql/data") for v in pg["volumes"])
    assert pg["volumes"][0].split(":")[0] in compose["volumes"]  # a named volume
    for name, service in services.items():
        assert service.get("restart") or name in ("tpch-loader", "shop-setup"), name
        if service.get("restart") != "no":
            assert "healthcheck" in service or name == "tpch-loader", name
            assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL")
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
        # no secret values in the file: password-like settings point at files
        for key, value in (service.get("environment") or {}).items():
            if re.search(r"PASSWORD|SECRET|TOKEN", key):
                assert key.endswith("_FILE") and str(value).startswith("/run/secrets/"), key
    assert services["tpch-loader"]["restart"] == "no"
    for secret in compose["secrets"].values():
        assert secret["file"].startswith("./deploy/secrets/")
    tuner = services["tuner"]
    assert "${DOCKER_SOCKET:-/var/run/docker.sock}:/var/run/docker.sock" in tuner["volumes"]
    assert tuner["depends_on"]["tpch-loader"]["condition"] == "service_completed_successfully"
    assert tuner["environment"]["HARMONY_SERVER"] == "http://harmony-server:1979"
    env_example = (ROOT / ".env.example").read_text()
    assert not re.search(r"^\s*\w*(PASSWORD|SECRET|TOKEN)\w*\s*=", env_example, re.M)


def test_compose_images_come_from_variables_with_public_defaults() -> None:
    """The same file runs the public images (a laptop with Docker) and the ones
    deploy/images/build makes where no public registry is reachable."""
    compose = load_compose()
    images = {name: s["image"] for name, s in compose["services"].items()}
    defaults = {}
    for name, image in images.items():
        found = re.fullmatch(r"\$\{(\w+)_IMAGE:-([^}]+)\}", image)
        assert found, f"{name}: image {image!r} is not ${{NAME_IMAGE:-default}}"
        defaults[found.group(1)] = found.group(2)
    assert defaults == {"POSTGRES": "postgres:16", "HARMONY": "harmony-postgres:local",
                        "PROMETHEUS": "prom/prometheus:v2.53.2",
                        "GRAFANA": "grafana/grafana:11.2.0"}
    build = compose["x-harmony"]["build"]
    assert build["args"]["PYTHON_IMAGE"] == "${PYTHON_IMAGE:-python:3.11-slim}"
    assert re.search(r"^ARG PYTHON_IMAGE=python:3.11-slim$", (ROOT / "Dockerfile").read_text(),
                     re.M)
    env_example = (ROOT / ".env.example").read_text()
    for variable, default in [*defaults.items(), ("PYTHON", "python:3.11-slim")]:
        assert f"\n{variable}_IMAGE={default}\n" in env_example, variable


def test_image_recipes_and_scripts() -> None:
    """deploy/images: every recipe builds FROM the debootstrap base (an ARG), the scripts
    parse, and the PostgreSQL entrypoint keeps the official image's contract."""
    images = ROOT / "deploy" / "images"
    for recipe in ("python", "postgres", "prometheus"):
        text = (images / f"{recipe}.Dockerfile").read_text()
        assert "ARG BASE_IMAGE=harmony-base:bookworm\nFROM ${BASE_IMAGE}\n" in text, recipe
        for source in re.findall(r"^COPY\s+(?:--\S+\s+)*(\S+)\s", text, re.M):
            assert (images / source).exists(), f"{recipe}.Dockerfile copies missing {source}"
    for script in (images / "build", images / "postgres-entrypoint.sh",
                   ROOT / "deploy" / "engine" / "engine", ROOT / "deploy" / "compose-test"):
        assert script.stat().st_mode & 0o111, f"{script} is not executable"
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                                timeout=30)
        assert result.returncode == 0, f"{script}: {result.stderr}"
    entrypoint = (images / "postgres-entrypoint.sh").read_text()
    for contract in ("POSTGRES_PASSWORD_FILE", "POSTGRES_DB", "/docker-entrypoint-initdb.d",
                     "scram-sha-256", "setpriv --reuid=postgres"):
        assert contract in entrypoint, contract
    postgres = (images / "postgres.Dockerfile").read_text()
    assert "postgresql-15" in postgres and "STOPSIGNAL SIGINT" in postgres
    assert "--uid 999" in postgres  # the official image's postgres uid: volumes stay portable
    result = subprocess.run([str(images / "build"), "--no-such-option"], capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 2 and "unknown argument '--no-such-option'" in result.stderr


def test_compose_test_tuner_config_restarts_the_compose_database() -> None:
    """deploy/tuner/compose-test.yaml (make compose-test): the docker controller on the compose
    database, shared_buffers offline, a budget equal to the test's POSTGRES_MEMORY."""
    from tuner_client.config import load_tuner_config

    config = load_tuner_config(ROOT / "deploy" / "tuner" / "compose-test.yaml")
    services = load_compose()["services"]
    assert config.database.controller.kind == "docker"
    assert config.database.controller.options["container"] == \
        services["postgres"]["container_name"]
    assert [k.name for k in config.offline.knobs] == ["shared_buffers"]
    assert config.offline.evaluations >= 2
    stack_test = (ROOT / "tests" / "test_compose_stack.py").read_text()
    assert '"TUNER_CONFIG": "/etc/harmony/tuner/compose-test.yaml"' in stack_test
    assert '"SHOP_TUNER_CONFIG": "/etc/harmony/tuner/compose-test-shop.yaml"' in stack_test
    shop = load_tuner_config(ROOT / "deploy" / "tuner" / "compose-test-shop.yaml")
    observe = load_tuner_config(ROOT / "configs" / "shop-observe.yaml")
    assert shop.workload == observe.workload and shop.database == observe.database
    assert [k.name for k in shop.online.knobs] == [k.name for k in observe.online.knobs]
    assert '"POSTGRES_MEMORY": "4g"' in stack_test and "ram: 4GB" in \
        (ROOT / "deploy" / "tuner" / "compose-test.yaml").read_text()


def test_compose_shop_profile_runs_the_example_beside_the_database() -> None:
    """``--profile shop``: the shop loaded once, its pgbench scripts as the live load, and a
    tuner observing it with configs/shop-observe.yaml (helper 17b's live mode)."""
    services = load_compose()["services"]
    shop = {n for n, s in services.items() if "shop" in s.get("profiles", [])}
    assert shop == {"shop-setup", "shop-load", "shop-tuner"}
    setup, load, tuner = (services[n] for n in ("shop-setup", "shop-load", "shop-tuner"))
    assert setup["command"][:4] == ["harmony", "workload", "app-setup", "shop"]
    assert "dbname=shop" in setup["environment"]["HARMONY_DSN"] and setup["restart"] == "no"
    assert load["depends_on"]["shop-setup"]["condition"] == "service_completed_successfully"
    script = " ".join(load["entrypoint"])
    for name in ("lookup", "order", "report"):
        assert f"/shop/{name}.pgbench@" in script
        assert (ROOT / "workloads" / "apps" / "shop" / f"{name}.pgbench").exists()
    assert "./workloads/apps/shop:/shop:ro" in load["volumes"]
    assert "PGPASSWORD=$$(cat /run/secrets/postgres_password)" in script  # no secret inline
    assert tuner["command"][:3] == ["harmony", "tune",
                                    "${SHOP_TUNER_CONFIG:-/etc/harmony/configs/shop-observe.yaml}"]
    # live mode reads pg_stat_statements: preloaded on a new volume, created by shop-setup
    init = "./deploy/postgres/initdb:/docker-entrypoint-initdb.d:ro"
    assert init in services["postgres"]["volumes"] and "--stat-statements" in setup["command"]
    script_text = (ROOT / "deploy/postgres/initdb/10-pg-stat-statements.sh").read_text()
    assert "shared_preload_libraries = 'pg_stat_statements'" in script_text
    assert "COPY configs /etc/harmony/configs" in (ROOT / "Dockerfile").read_text()


def test_compose_replicas_profile() -> None:
    """Profile ``replicas``: a second PostgreSQL and one tuner client per replica; the
    worker's config is the coordinator's job on the second database."""
    from tuner_client.config import load_tuner_config

    services = load_compose()["services"]
    profiled = {n for n, s in services.items() if "replicas" in s.get("profiles", ())}
    assert profiled == {"postgres-replica-2", "tpch-loader-2", "tuner-replica-2"}
    worker = services["tuner-replica-2"]
    assert worker["command"][:2] == ["harmony", "tune"] and \
        worker["command"][-2:] == ["--replica", "replica-2"]
    assert worker["environment"]["HARMONY_SERVER"] == "http://harmony-server:1979"
    coordinator = load_tuner_config(ROOT / "deploy" / "tuner" / "tpch-docker-replicas.yaml")
    replica = load_tuner_config(ROOT / "deploy" / "tuner" / worker["command"][2].split("/")[-1])
    assert coordinator.replicas.remote == 1 and coordinator.name == replica.name
    def knobs(config: Any) -> list[tuple[Any, ...]]:
        return [(k.name, k.min, k.max, k.step, k.values) for k in config.knob_specs()]

    assert knobs(coordinator) == knobs(replica)
    assert coordinator.workload == replica.workload
    assert replica.database.controller.options["container"] == \
        services["postgres-replica-2"]["container_name"]
    assert "host=postgres-replica-2 " in (replica.database.dsn or "")


def test_dockerfile_builds_from_files_in_the_repo() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^USER\s+(?!root)\S+", text, re.M), "the image must not run as root"
    for line in re.findall(r"^COPY\s+(?!--from)(.+)$", text, re.M):
        sources = [s for s in line.split()[:-1] if not s.startswith("--")]
        for source in sources:
            assert (ROOT / source).exists(), f"Dockerfile copies missing {source}"
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert "deploy/secrets" in ignored and ".env" in ignored


def test_every_product_package_ships_in_the_wheel_and_the_image() -> None:
    """Each root package of the import contracts is in the wheel (setuptools' explicit list or
    its find patterns) and copied by the Dockerfile: a new top-level package (issue 46 split
    harmony/ into four) cannot be left out of either."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    roots = config["tool"]["importlinter"]["root_packages"]
    setuptools = config["tool"]["setuptools"]
    listed = setuptools.get("packages")
    if isinstance(listed, list):
        missing = [r for r in roots if r not in listed]
    else:
        include = setuptools["packages"]["find"]["include"]
        missing = [r for r in roots if not any(fnmatch.fnmatchcase(r, p) for p in include)]
    assert missing == [], f"pyproject.toml does not ship the packages {missing}"
    dockerfile = (ROOT / "Dockerfile").read_text()
    uncopied = [r for r in roots if not re.search(rf"^COPY {r} \./{r}$", dockerfile, re.M)]
    assert uncopied == [], f"the Dockerfile does not copy {uncopied}"


def test_tuner_config_of_the_deployment_loads() -> None:
    from tuner_client.config import load_tuner_config

    config = load_tuner_config(ROOT / "deploy" / "tuner" / "tpch-docker.yaml")
    compose = load_compose()
    assert config.database.controller.kind == "docker"
    assert config.database.controller.options["container"] == \
        compose["services"]["postgres"]["container_name"]
    assert "host=postgres " in (config.database.dsn or "")
    command = compose["services"]["tuner"]["command"]
    assert command[:2] == ["harmony", "tune"] and "tpch-docker.yaml" in command[2]


# -- Prometheus ------------------------------------------------------------------------------
def test_prometheus_scrapes_server_and_tuner() -> None:
    config = yaml.safe_load(PROMETHEUS.read_text())
    targets = {job["job_name"]: job["static_configs"][0]["targets"]
               for job in config["scrape_configs"]}
    assert targets == {"harmony-server": ["harmony-server:1979"], "harmony-tuner": ["tuner:9188"]}
    services = load_compose()["services"]
    assert "9188" in services["tuner"]["environment"]["HARMONY_METRICS_PORT"]
    assert "1979" in services["harmony-server"]["command"]


def test_promtool_accepts_the_config() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian package 'prometheus')")
    result = subprocess.run([promtool, "check", "config", str(PROMETHEUS)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# -- Grafana ---------------------------------------------------------------------------------
def dashboard_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) of every panel target, annotation and variable query."""
    out = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r} {target['refId']}", target["expr"]))
    for annotation in dashboard["annotations"]["list"]:
        if "expr" in annotation:
            out.append((f"annotation {annotation['name']!r}", annotation["expr"]))
    for variable in dashboard["templating"]["list"]:
        query = variable["query"]["query"]
        inner = re.fullmatch(r"label_values\((\w+),\s*\w+\)", query)
        assert inner, f"variable {variable['name']}: unexpected query {query}"
        out.append((f"variable {variable['name']!r}", inner.group(1)))
    return out


def test_dashboard_queries_name_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = dashboard_queries(dashboard)
    assert len(queries) >= 30
    unknown = {(where, name) for where, expr in queries for name in promql_metric_names(expr)
               if name not in EXPORTED}
    assert not unknown, f"dashboard queries name metrics nobody exports: {sorted(unknown)}"
    every = {name for _, expr in queries for name in promql_metric_names(expr)}
    # the views the issue asks for
    for needed in ("harmony_tuner_throughput_queries_per_second",
                   "harmony_tuner_best_throughput_queries_per_second",
                   "harmony_tuner_knob_value", "harmony_tuner_bme_curve_probability",
                   "harmony_tuner_miss_observation_probability", "harmony_tuner_pass",
                   "harmony_tuner_failed_points_total", "harmony_server_errors_total"):
        assert needed in every, needed


def test_dashboard_structure_and_provisioning() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    for p in panels:
        grid = p["gridPos"]
        assert grid["x"] + grid["w"] <= 24, p["title"]
        if p["type"] != "row":
            assert p["targets"], p["title"]
            assert p["datasource"]["uid"] == "harmony-prometheus"
    titles = {p["title"] for p in panels}
    assert {"Throughput (queries per minute)", "Memory knobs in force",
            "Miss probability vs shared_buffers (BME)", "Failures"} <= titles
    assert any(a.get("name") == "Tuning pass" for a in dashboard["annotations"]["list"])
    datasources = yaml.safe_load((ROOT / "deploy/grafana/provisioning/datasources/"
                                  "prometheus.yml").read_text())["datasources"]
    assert datasources[0]["uid"] == "harmony-prometheus"
    assert datasources[0]["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((ROOT / "deploy/grafana/provisioning/dashboards/"
                                "harmony.yml").read_text())["providers"]
    mounts = load_compose()["services"]["grafana"]["volumes"]
    assert f"./deploy/grafana/dashboards:{providers[0]['options']['path']}:ro" in mounts
