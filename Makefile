# Everything a fresh machine needs goes through these targets.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3.11
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TOOLS_BIN := $(CURDIR)/.cache/tools/bin
export PATH := $(BIN):$(TOOLS_BIN):$(PATH)
PYTEST := $(BIN)/pytest
PYTEST_ARGS ?=

.PHONY: help venv tools unit integration chart image e2e test lint demo bench cluster cluster-down clean

help:
	@echo "make demo   - the main job: a Hermes runtime demo on a scratch data dir"
	@echo "make test   - every test tier (installs what it needs)"
	@echo "make lint   - ruff + mypy"
	@echo "make unit | integration | chart | e2e | bench"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check --upgrade pip
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test,dev]'
	touch $@

venv: $(STAMP)

tools: venv
	ci/install-tools.sh $(CURDIR)/.cache/tools

unit: venv
	$(PYTEST) tests/unit $(PYTEST_ARGS)

integration: venv tools
	$(PYTEST) tests/integration $(PYTEST_ARGS)

chart: venv tools
	$(PYTEST) tests/chart $(PYTEST_ARGS)

test: venv tools
	$(PYTEST) tests/unit tests/integration tests/chart $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check hermes_runtime tests bench
	$(BIN)/ruff format --check hermes_runtime tests bench
	$(BIN)/mypy

demo: venv
	ci/demo.sh

bench: venv
	@echo "see docs/benchmarks.md for each benchmark's command"

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache
