# Everything a fresh machine needs goes through these targets.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3.11
UV_VERSION := 0.13.8
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TOOLS_BIN := $(CURDIR)/.cache/tools/bin
# Heavy builds (tools, images, the Kubernetes binaries) live outside the checkout, so a fresh
# clone on the same machine (CI) reuses them: .cache is a symlink to CACHE_HOME.
CACHE_HOME ?= $(HOME)/.cache/hermes-runtime
# Every image the e2e suite and the demo use, pushed to the local registry (docs/cluster.md).
E2E_IMAGES := agent git-sync git-server seaweedfs openbao fake-llm busybox prometheus package-index agent-previous \
  kube-state-metrics
# The servers the integration tier runs in containers (tests/support/containers.py): the same
# builds, kept in Docker only (the e2e step pushes them; Docker's cache makes that build quick).
INTEGRATION_IMAGES := seaweedfs openbao git-server fake-llm
# The image tier's images (tests/image): built before pytest starts, so a cold build (minutes)
# is never cut by a test's timeout; the tier's fixtures then find them in Docker's cache.
IMAGE_TEST_IMAGES := agent agent-on-upstream $(INTEGRATION_IMAGES) busybox
# Where `make image-push` publishes the agent image (REGISTRY/hermes-runtime/agent:<appVersion>).
REGISTRY ?= localhost:5001
# Bytecode for our own sources: with PYTHONDONTWRITEBYTECODE set (CI shells often have it) every
# `python -m hermes_runtime` a test starts would compile them again (at each of hundreds of
# starts); compileall writes the .pyc files explicitly and Python still reads them.
COMPILE = $(BIN)/python -m compileall -q -j 0 hermes_runtime tests bench >/dev/null
KUBECONFIG_LOCAL := $(CURDIR)/.cache/kind/kubeconfig
# The multi-node cluster (ci/kind/multi-up.sh): NODES nodes in all, a control plane and
# NODES-1 workers (at least 3 nodes), beside the single-node cluster.
KUBECONFIG_MULTI := $(CURDIR)/.cache/kind-multi/kubeconfig
NODES ?= 3
# The multi-node tier's cluster: the local one unless MULTINODE_KUBECONFIG names yours (with
# the classes `local-path` and `shared-path`, pulling from REGISTRY).
MULTINODE_KUBECONFIG ?=
E2E_MULTINODE_IMAGES := agent fake-llm git-server busybox seaweedfs
export PATH := $(BIN):$(TOOLS_BIN):$(PATH)
PYTEST := $(BIN)/pytest
PYTEST_ARGS ?=
# The e2e scenarios mostly wait on Kubernetes, each in its own namespace: run them side by side
# (pytest-xdist), the longest of the last run first, each to the next idle worker, so the
# workers end together (tests/support/longest_first.py; the durations are kept in .cache).
# Even on 2 cores four workers end sooner than three (docs/benchmarks.md, "Test tiers").
# 0: one by one.
E2E_WORKERS ?= 4
E2E_PYTEST := $(PYTEST) tests/e2e -n $(E2E_WORKERS) --dist load --longest-first \
  -o cache_dir=$(CURDIR)/.cache/pytest
# The unit, integration, chart and image tiers, three tests at a time: most of their time is
# spent waiting on the servers and processes they start, so even on 2 cores three workers end
# sooner than two, and two far sooner than one by one. 0: one by one, in pytest's own process.
TEST_WORKERS ?= 3
TIER_PYTEST := $(PYTEST) -n $(TEST_WORKERS) --dist worksteal

.PHONY: help system-deps venv tools images demo-images integration-images image-test-images image image-push image-tests unit integration chart py314 e2e e2e-multinode test lint demo cluster cluster-down cluster-multi cluster-multi-down clean

help:
	@echo "make demo   - the main job: cluster, images, helm install, a conversation, a backup"
	@echo "make test   - every test tier (installs what it needs)"
	@echo "make lint   - ruff + mypy"
	@echo "make unit | integration | chart | image-tests | py314 | e2e | e2e-multinode   (benchmarks: docs/benchmarks.md)"
	@echo "make image | image-push REGISTRY=...   - the agent image, tagged with the chart appVersion"
	@echo "make cluster | cluster-down   - the kind cluster and local registry (docs/cluster.md)"
	@echo "make cluster-multi [NODES=3] | cluster-multi-down   - the multi-node kind cluster"

.cache:
	mkdir -p $(CACHE_HOME)
	ln -sfn $(CACHE_HOME) .cache

# uv installs the project into the venv: the same pins as pip, in well under pip's time with a
# warm cache (every fresh clone, every CI run). --compile-bytecode as pip does: with
# PYTHONDONTWRITEBYTECODE set, every Python process the tests start would otherwise compile
# Hermes' and its libraries' sources again, which slows every tier.
# The venv keeps its own pip for anything that installs at run time.
$(STAMP): pyproject.toml | .cache
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check 'uv==$(UV_VERSION)'
	$(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python -e '.[test,dev]'
	touch $@

venv: $(STAMP)

# Debian packages the tests and the demo need (git, redis-server, ...): installed here, so
# `make test` and `make demo` work on a fresh machine exactly as the README says.
system-deps:
	ci/install-system-deps.sh

tools: | .cache
	ci/install-tools.sh $(CURDIR)/.cache/tools
	ci/install-actionlint.sh $(CURDIR)/.cache/tools

images: venv
	REGISTRY=$(REGISTRY) ci/build-images.sh $(E2E_IMAGES)

unit: venv
	$(COMPILE)
	$(TIER_PYTEST) tests/unit $(PYTEST_ARGS)

# Starts Docker (ci/install-docker.sh, from ci/build-images.sh) and builds the servers' images.
integration-images: | .cache
	NO_PUSH=1 ci/build-images.sh $(INTEGRATION_IMAGES)

integration: system-deps venv tools integration-images
	$(TIER_PYTEST) tests/integration $(PYTEST_ARGS)

chart: venv tools
	$(TIER_PYTEST) tests/chart $(PYTEST_ARGS)

# The unit tier again on Python 3.14 (Debian sid's, in a container: the host keeps bookworm).
py314: tools
	TEST_WORKERS=$(TEST_WORKERS) ci/test-py314.sh $(PYTEST_ARGS)

# The agent image, tagged with the chart's appVersion (hermes-runtime/agent:<appVersion>), and
# `make image-push REGISTRY=registry.example.com` to publish it where your cluster pulls from.
image:
	NO_PUSH=1 ci/build-images.sh agent

image-push:
	REGISTRY=$(REGISTRY) ci/build-images.sh agent

image-test-images: | .cache
	NO_PUSH=1 ci/build-images.sh $(IMAGE_TEST_IMAGES)

image-tests: venv tools image-test-images
	$(TIER_PYTEST) tests/image $(PYTEST_ARGS)

cluster: venv tools
	ci/cluster-up.sh

cluster-down:
	ci/cluster-down.sh

cluster-multi: venv tools
	NODES=$(NODES) ci/kind/multi-up.sh
	@echo "export KUBECONFIG=$(KUBECONFIG_MULTI)"

cluster-multi-down:
	ci/kind/multi-down.sh

# Against the user's KUBECONFIG when set (images pushed to REGISTRY, which it must pull from);
# otherwise the local kind cluster and registry, brought up first (warm: about a minute).
# The node restart (tests/e2e/test_faults_node.py) stops every pod of the node, so it runs
# alone after the others, and only on the local kind cluster (it restarts the node's podman
# container, which a cluster of your own does not have): with another KUBECONFIG, make says so.
# With PYTEST_ARGS (a `-k` for other scenarios) selecting no node-restart test is no failure
# (pytest's exit 5); without, the step must run its tests.
e2e: venv tools
	REGISTRY=$(REGISTRY) ci/e2e-prepare.sh $(E2E_IMAGES)
	KUBECONFIG="$${KUBECONFIG:-$(KUBECONFIG_LOCAL)}" $(E2E_PYTEST) -m "not node_restart" $(PYTEST_ARGS)
	$(if $(filter-out $(KUBECONFIG_LOCAL),$(KUBECONFIG)),@echo "e2e: the node restart (-m node_restart) runs only on the local kind cluster: not run against $(KUBECONFIG)",KUBECONFIG="$(KUBECONFIG_LOCAL)" $(PYTEST) tests/e2e -n 0 -m node_restart $(PYTEST_ARGS) $(if $(PYTEST_ARGS),|| [ $$? -eq 5 ]))

# The multi-node tier (tests/e2e_multinode): drains and storage that follows a pod, on the
# multi-node cluster (brought up first), its images pushed as for `make e2e`. The scenarios
# cordon and drain nodes: one at a time.
e2e-multinode: venv tools
	$(if $(MULTINODE_KUBECONFIG),true,NODES=$(NODES) ci/kind/multi-up.sh)
	REGISTRY=$(REGISTRY) ci/build-images.sh $(E2E_MULTINODE_IMAGES)
	KUBECONFIG="$(or $(MULTINODE_KUBECONFIG),$(KUBECONFIG_MULTI))" \
	  HERMES_MULTINODE_NODES=$(if $(MULTINODE_KUBECONFIG),0,$(NODES)) \
	  $(PYTEST) tests/e2e_multinode -n 0 -o cache_dir=$(CURDIR)/.cache/pytest $(PYTEST_ARGS)

# The cluster's Go binaries compile in the background while the venv, tools and images are
# installed (mostly network waits); nothing to do when cached (ci/with-background.sh). The tiers
# then run one after another, none beside the build: its extra load makes the unit tier's
# timing-sensitive tests (datalock, supervisor signals) fail; within a tier tests run side by
# side (TEST_WORKERS, E2E_WORKERS).
test: system-deps | .cache
	ci/with-background.sh cluster-binaries $(CURDIR)/.cache/logs/cluster-binaries.log \
	  'ci/kind/build-node-image.sh binaries' \
	  $(MAKE) --no-print-directory venv tools image-test-images
	$(COMPILE)
	$(TIER_PYTEST) tests/unit tests/integration tests/chart tests/image $(PYTEST_ARGS)
	$(MAKE) --no-print-directory py314
	$(MAKE) --no-print-directory e2e
	$(MAKE) --no-print-directory e2e-multinode

lint: venv
	$(BIN)/ruff check hermes_runtime tests bench
	$(BIN)/ruff format --check hermes_runtime tests bench
	$(BIN)/mypy
	ci/install-actionlint.sh $(CURDIR)/.cache/tools
	$(TOOLS_BIN)/actionlint .github/workflows/*.yaml

# As in `make test`: with no KUBECONFIG the cluster's Go binaries compile in the background
# (minutes cold, nothing when cached) while the venv, the tools and the demo's images are
# installed and built (mostly network waits); ci/demo.sh then starts the cluster and pushes
# the images it finds built. With your own KUBECONFIG nothing is compiled.
DEMO_IMAGES := agent fake-llm git-server
demo: system-deps | .cache
	ci/with-background.sh cluster-binaries $(CURDIR)/.cache/logs/cluster-binaries.log \
	  '$(if $(KUBECONFIG),true,ci/kind/build-node-image.sh binaries)' \
	  $(MAKE) --no-print-directory venv tools demo-images
	ci/demo.sh

demo-images: | .cache
	$(if $(DEMO_SKIP_IMAGES),true,NO_PUSH=1 ci/build-images.sh $(if $(DEMO_LLM_BASE_URL),agent,$(DEMO_IMAGES)))

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
	@echo "kept $(CACHE_HOME) (tools, images, Kubernetes builds); remove it by hand for a cold start"
