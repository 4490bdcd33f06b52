# kiln: `make demo` runs the main job on the local sandbox; `make test` runs everything CI runs.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help deps lint test test-unit test-integration test-molecule docker demo bench gpu-check clean

help:
	@echo "make demo        bring up the Docker sandbox cluster and provision it with kiln"
	@echo "make test        lint, unit tests, then the Docker tier (what CI runs)"
	@echo "make test-unit   lint-free fast loop: unit tests only (no Docker, no Ansible runs)"
	@echo "make bench       benchmarks: inventory scale, engine overhead"
	@echo "make gpu-check   checks that need an NVIDIA GPU (skipped without one)"

# The virtual environment, reinstalled when pyproject.toml changes.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV) || { apt-get update -qq && apt-get install -y -qq python3-venv && $(PYTHON) -m venv $(VENV); }
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

deps: $(STAMP)

lint: deps
	$(BIN)/ruff check cli tests bench
	$(BIN)/ruff format --check cli tests bench
	$(BIN)/yamllint -s .
	if [ -d playbooks/roles ] && ls playbooks/*.yml >/dev/null 2>&1; then \
	  cd playbooks && ../$(BIN)/ansible-lint --profile production; fi

test-unit: deps
	$(BIN)/pytest -q tests/unit

# Docker from Debian's packages and a running dockerd (root on Debian), or exit 3 saying how.
docker:
	bash scripts/ensure-docker.sh

test-integration: deps docker
	$(BIN)/pytest -q -m integration tests/integration

test: lint test-unit test-integration

demo: deps docker
	$(BIN)/kiln sandbox up --nodes 2
	$(BIN)/kiln provision inventories/sandbox --yes

bench: deps
	$(BIN)/python bench/inventory_scale.py

gpu-check: deps
	$(BIN)/pytest -q -m gpu tests

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
