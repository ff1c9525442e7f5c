# Quick start: `make demo` and `make test` each do all of their own setup.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup system-packages engine compose-test demo test test-unit lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP) system-packages

# System packages, each installed via apt-get only when absent: PostgreSQL server binaries
# (pg_ctl, for the embedded cluster and the tests), promtool and docker-compose (the tests
# validate the Prometheus config and the compose file with them), Chromium and its driver (the
# report's browser test renders report.html in headless Chromium).
system-packages:
	@missing=; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || command -v pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v docker-compose >/dev/null 2>&1 || missing="$$missing docker-compose"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver"; \
	if [ -n "$$missing" ]; then \
		echo "installing system packages:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

# The container engine for compose-test, set up from the project's files only: Podman (daemonless;
# runc, since crun fails on hybrid cgroups; CNI with the dnsname plugin so that compose services
# find each other by name: netavark's aardvark-dns 1.4 stalled name lookups for 40 s after a
# container restart), debootstrap (deploy/images/build) and docker-compose, installed via
# apt-get when absent (HARMONY_ENGINE=docker: the Docker daemon already running instead). Podman
# reads $(ENGINE_DIR)/containers.conf (CONTAINERS_CONF), never the machine's global one.
ENGINE_DIR := $(CURDIR)/.engine
export HARMONY_ENGINE_DIR := $(ENGINE_DIR)
engine:
	@missing=; \
	if [ "$${HARMONY_ENGINE:-podman}" = podman ]; then \
		for p in podman runc catatonit golang-github-containernetworking-plugin-dnsname; do \
			dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
		done; \
	fi; \
	command -v debootstrap >/dev/null 2>&1 || missing="$$missing debootstrap"; \
	command -v docker-compose >/dev/null 2>&1 || missing="$$missing docker-compose"; \
	if [ -n "$$missing" ]; then \
		echo "installing system packages:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi
	@mkdir -p $(ENGINE_DIR)
	@printf '%s\n' '# written by make engine: Podman for compose-test (CONTAINERS_CONF points here)' \
		'[containers]' 'default_ulimits = []' '[network]' 'network_backend = "cni"' \
		'[engine]' 'runtime = "runc"' > $(ENGINE_DIR)/containers.conf

# The deployment for real (target < 10 min on a fresh machine, ~3 min with cached images): the
# engine, the images (deploy/images/build), then tests/test_compose_stack.py brings the stack up,
# tunes, checks Prometheus and the shop profile, and brings everything down.
compose-test: setup engine
	deploy/compose-test

demo: setup
	$(BIN)/harmony demo

# Two workers (pytest-xdist): 1,010 tests in 565-587 s against ~1,040 s in one process on the
# 2-core machine; every cluster a test starts is its own (a free port, a temp dir), and the
# session-scoped ones are started once per worker.
test: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2

# The fast tier: no PostgreSQL cluster, no slow files (the markers are set in tests/conftest.py)
test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not postgres and not slow"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy harmony harmony_base harmony_core harmony_report harmony_server tuner_client plugins strategies workloads bme
	$(BIN)/lint-imports

bench: setup
	$(BIN)/python -m benchmarks --quick

clean:
	rm -rf $(VENV) build *.egg-info $(ENGINE_DIR)
