# Quick start: `make demo` and `make test` each do all of their own setup.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup system-packages demo test test-unit lint bench clean

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

demo: setup
	$(BIN)/harmony demo

test: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider

# The fast tier: no PostgreSQL cluster, no slow files (the markers are set in tests/conftest.py)
test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not postgres and not slow"

lint: setup
	$(BIN)/ruff check .
	$(BIN)/mypy harmony harmony_server tuner_client plugins strategies workloads bme
	$(BIN)/lint-imports

bench: setup
	$(BIN)/python -m benchmarks --quick

clean:
	rm -rf $(VENV) build *.egg-info
