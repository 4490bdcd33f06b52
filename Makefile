# kiln: `make demo` runs the main job on the local sandbox; `make test` runs everything CI runs.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
RUNTIME_STAMP := $(VENV)/.installed-runtime
# molecule calls ansible-* by name; kiln's own venv comes first.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export PYTHONUNBUFFERED := 1

MOLECULE_SCENARIOS := $(notdir $(wildcard molecule/*))
# The scenarios `make test` runs: the roles whose hardware the sandbox does not have, against
# recorded outputs (slurm's scenario is left to `make test-molecule`: the Docker tier runs the
# slurm roles against real Slurm on every test).
MOLECULE_CI_SCENARIOS := infiniband nvidia power rocm
# Debian packages the tests use beyond Docker: sshd for the SSH fan-out tests, chromium to
# render the HTML burn-in report.
# rpm, createrepo-c, dnf: kiln mirror fetch's dnf side is tested against a real signed
# repository, and dnf itself reads the bundle kiln serves; docker-registry: the registry its
# images are fetched from
SYSTEM_PACKAGES := openssh-server openssh-client chromium rpm createrepo-c dnf dnf-plugins-core \
	docker-registry

.PHONY: help deps deps-runtime system-deps lint test test-unit test-local test-integration test-molecule test-airgapped test-slurm-upgrade test-burnin-container test-scale test-scale-short docker \
	test-debian12 test-molecule-debian12 test-molecule-ci \
	sandbox sandbox-down demo bench bench-remote gpu-check clean

help:
	@echo "make demo        the Docker sandbox: provision, nodes quarantined, burn-in, resumed (~6 min, then ~2)"
	@echo "make test        lint, unit and local tests, then the Docker tier (what CI runs)"
	@echo "make test-unit   the fast loop: unit tests only (no Ansible runs, torch, sshd or browser)"
	@echo "make test-local  the local tier: real Ansible runs, torch, sshd and chromium here (no Docker)"
	@echo "make test-debian12  provision, burn-in and Slurm checks on a Debian 12 sandbox (not in make test)"
	@echo "make test-molecule-debian12  the molecule scenarios on Debian 12's node image (not in make test)"
	@echo "make test-scale  the fleet-scale rehearsal: 32 sandbox nodes (SCALE_NODES=N), faults injected (not in make test)"
	@echo "make bench       benchmarks: inventory scale, start-up, judging, the lifecycle funnel, engine (local and over SSH at 100 hosts), exec fan-out, controller cost, health check, converged re-apply"
	@echo "make bench-remote  remote latency per host-task over SSH, mitogen beside ssh; kiln health beside kiln exec (sandbox)"
	@echo "make gpu-check   checks that need an NVIDIA GPU (skipped without one)"

# The virtual environment, reinstalled when pyproject.toml or the pinned versions change; every
# package at the version in constraints.txt (what CI tested). `deps`: kiln with the development
# extras (pytest, linters, molecule, torch) for the tests; `deps-runtime`: kiln alone, all
# `make demo` needs on this machine (the nodes carry their own burn-in runtime).
VENV_CREATE = $(PYTHON) -m venv $(VENV) || { apt-get update -qq && apt-get install -y -qq python3-venv && $(PYTHON) -m venv $(VENV); }

$(STAMP): pyproject.toml constraints.txt
	$(VENV_CREATE)
	$(BIN)/pip install -q -c constraints.txt --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev]'
	touch $@ $(RUNTIME_STAMP)

$(RUNTIME_STAMP): pyproject.toml constraints.txt
	$(VENV_CREATE)
	$(BIN)/pip install -q -c constraints.txt --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e .
	touch $@

deps: $(STAMP)

deps-runtime: $(RUNTIME_STAMP)

# Installs what is missing when root on Debian; elsewhere the tests that need them skip and say so.
system-deps:
	@missing=""; for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	elif [ -n "$$missing" ]; then echo "not installed (tests that need them will skip):$$missing"; fi

# ANSIBLE_LIBRARY: kiln's modules live beside the playbooks (playbooks/library), where
# ansible-playbook finds them by itself; ansible-lint checks roles on their own.
lint: deps
	$(BIN)/ruff check cli tests bench playbooks
	$(BIN)/ruff format --check cli tests bench playbooks
	$(BIN)/yamllint -s .
	cd playbooks && ANSIBLE_LIBRARY=$(CURDIR)/playbooks/library ../$(BIN)/ansible-lint --profile production

# The fast loop: pure unit tests, under 30 s on 2 cores.
test-unit: deps
	$(BIN)/pytest -q -m "not integration and not gpu and not local" tests/unit

# Tests marked `local`: real ansible-playbook and ansible-inventory runs over local hosts, the
# torch workloads on the CPU, a throwaway sshd, chromium rendering the HTML report.
test-local: deps system-deps
	$(BIN)/pytest -q -m "local and not integration and not gpu" tests/unit

# Docker from Debian's packages and a running dockerd (root on Debian), or exit 3 saying how.
docker:
	bash scripts/ensure-docker.sh

sandbox: deps-runtime docker
	$(BIN)/kiln sandbox up --nodes 2

sandbox-down: deps
	$(BIN)/kiln sandbox down

# One shared sandbox for every integration test (a session fixture brings it up once).
test-integration: deps system-deps docker
	$(BIN)/pytest -q -m integration tests/integration

# Container scenarios from the sandbox node image (the integration tier builds it).
test-molecule: deps docker
	$(BIN)/kiln sandbox up --nodes 2 >/dev/null
	for scenario in $(MOLECULE_SCENARIOS); do $(BIN)/molecule test -s $$scenario; done

# Debian 12 (Slurm 22.05) kept beside the default Debian 13: the sandbox recreated on Debian 12,
# a full provision and a second that changes nothing, the burn-in that resumes the quarantined
# nodes, and the Slurm checks (each daemon at the declared version, held). Outside `make test`:
# its node image and sandbox of its own took about ten of CI's minutes.
DEBIAN12_TESTS := tests/integration/test_slurm.py \
	tests/integration/test_provision.py::test_provision_converges_every_node \
	tests/integration/test_provision.py::test_second_provision_changes_nothing
test-debian12: deps system-deps docker
	KILN_SANDBOX_OS=debian-12 $(BIN)/pytest -q -m integration $(DEBIAN12_TESTS)

# The molecule scenarios on Debian 12's node image (outside `make test`: CI's time).
test-molecule-debian12: deps docker
	KILN_SANDBOX_OS=debian-12 $(MAKE) test-molecule

# CI's 90 minutes on 2 cores: the Debian 12 tier, the Slurm-site-repository and upgrade
# scenarios (sandboxes of their own) and molecule's slurm scenario run by their own targets.
test: lint test-unit test-local test-integration test-molecule-ci

test-molecule-ci: deps docker
	$(BIN)/kiln sandbox up --nodes 2 >/dev/null
	for scenario in $(MOLECULE_CI_SCENARIOS); do $(BIN)/molecule test -s $$scenario; done

# The whole flow with no route out (issue 30): a second sandbox on an internal Docker network,
# provisioned and burnt in from a bundle `kiln mirror fetch` builds from the sandbox's plan
# (outside `make test`: CI's time; its short case, one node installing from the mirror, is in
# test-integration).
test-airgapped: deps system-deps docker
	$(BIN)/pytest -q -m airgapped tests/integration

# Slurm from a site repository at the declared version, held, and a major Slurm upgrade
# (24.11 -> 26.05, Debian's forky packages from a site repository) with a job running through
# it, each on a sandbox of its own (outside `make test`: about fifteen minutes of CI's time).
test-slurm-upgrade: deps system-deps docker
	$(BIN)/pytest -q -m upgrade tests/integration/test_slurm_repository.py \
		tests/integration/test_slurm_upgrade.py

# Burn-in inside a declared image (kiln_burnin.container): the sandbox's node image pushed to a
# registry, unpacked on both nodes, the GEMMs and the all-reduce run in it (outside `make test`:
# minutes of CI's time for a 1.5 GB image).
test-burnin-container: deps system-deps docker
	$(BIN)/pytest -q -m burnin_image tests/integration/test_burnin_container.py

# The fleet-scale rehearsal (issue 34): KILN_SCALE_NODES full sandbox nodes (32 by default) on
# an instance of their own, provisioned in shards and burnt in with faults injected; docs/scale.md.
# Each node's systemd takes inotify instances: the host's limit is raised first (root only).
SCALE_NODES ?= 32
test-scale: deps system-deps docker
	@if [ "$$(id -u)" = 0 ] && [ "$$(cat /proc/sys/fs/inotify/max_user_instances)" -lt 1024 ]; then \
	  sysctl -q -w fs.inotify.max_user_instances=1024; fi
	KILN_SCALE_NODES=$(SCALE_NODES) $(BIN)/pytest -q -s -m scale tests/integration

# CI's short case of the rehearsal: the same faults on 6 nodes.
test-scale-short:
	$(MAKE) test-scale SCALE_NODES=6

# kiln's real flow: nodes join quarantined, burn-in passes, kiln resumes them (scripts/demo.sh).
demo: deps-runtime docker
	KILN=$(BIN)/kiln bash scripts/demo.sh

# The engine over real SSH and the converged re-apply run on Docker: light hosts and the sandbox.
bench: deps docker
	$(BIN)/python bench/inventory_scale.py
	$(BIN)/python bench/startup.py
	$(BIN)/python bench/judge_scale.py
	$(BIN)/python bench/lifecycle_funnel.py
	$(BIN)/python bench/engine_overhead.py --hosts 50 200
	$(BIN)/python bench/exec_fanout.py --plain-user
	$(BIN)/python bench/scale_cost.py
	$(BIN)/python bench/health_check.py --runs 20
	$(BIN)/python bench/engine_ssh.py --hosts 100 --repeats 3
	$(BIN)/kiln sandbox up --nodes 2 >/dev/null
	$(BIN)/python bench/reapply.py inventories/sandbox

# Remote latency of a no-change host-task over SSH, mitogen beside ssh, on the sandbox's nodes.
bench-remote: deps docker
	$(BIN)/kiln sandbox up --nodes 2 >/dev/null
	$(BIN)/python bench/remote_latency.py inventories/sandbox
	$(BIN)/python bench/health_remote.py inventories/sandbox

gpu-check: deps
	$(BIN)/pytest -q -m gpu tests/gpu

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
