# gpuops.fleet: every set-up and test step, from a fresh Debian 12 machine
# with Python 3.11 (run as root: missing tools are installed with apt-get).
#
#   make test    everything the README's test command runs, then a summary
#   make demo    the README's demo
#   make help    every target
#
# Each target installs what it needs first, so any of them works on its own.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# the venv's tools first, for every command and for what they start
export PATH := $(BIN):$(PATH)
# ansible.cfg in the repository root, whatever the caller's directory
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg

REQUIREMENTS := requirements/controller.txt requirements/managed-host.txt requirements/constraints.txt
VENV_STAMP := $(VENV)/.requirements-installed

# ansible-test runs only from a real ansible_collections/<ns>/<name> directory
ANSIBLE_TEST_ROOT := $(CURDIR)/build/ansible-test
STAGE := $(ANSIBLE_TEST_ROOT)/ansible_collections/gpuops/fleet
ANSIBLE_TEST := ansible-test
ANSIBLE_TEST_ARGS := --local --python 3.11 --color no
# sanity tests that must RUN (not be skipped as "not applicable" or for a missing tool)
SANITY_REQUIRED := ansible-doc changelog compile import pep8 pylint runtime-metadata shellcheck validate-modules yamllint

OUTPUT := $(CURDIR)/tests/output
JUNIT := $(OUTPUT)/junit
STEPS_FILE := $(OUTPUT)/make-test-steps.txt
PYTEST := $(PY) -m pytest -p no:cacheprovider -ra --timeout=900
# the checks `make test` runs, in order; a failing one does not stop the others
TEST_STEPS := units sanity lint docs-lint simtests integration molecule build-test fleet systemd-tests
# steps of TEST_STEPS that `make test` runs side by side, after the others: they share no resource (fleet: its nodes'
# named network namespaces and veths, /tmp/gpuops-fleet-*; systemd-tests: an nspawn container with a private network,
# build/systemd-test/; molecule: its own simulated host and loopback port 18230; lint, docs-lint and build-test only
# read the tree, build-test building into its own temporary folder), and fleet and systemd-tests mostly wait on their
# own nodes or container, which leaves room for the short ones. Each writes tests/output/STEP.log, shown whole when it
# ends; each step's time and result are its own, as for the others.
TEST_SIDE_BY_SIDE := lint docs-lint molecule build-test fleet systemd-tests
# what those steps install with apt-get, installed first, one at a time (two apt-get runs at once fail on dpkg's lock)
TEST_SIDE_BY_SIDE_TOOLS := fleet-tools systemd-tools
# the integration suite in parallel (pytest-xdist): its tests mostly wait on ansible-playbook and servers; each test is
# scheduled on its own, the longest first, except files that share a module fixture (tests/integration/conftest.py:
# KEEP_TOGETHER), which run whole on one worker; INTEGRATION_XDIST= runs it serially
INTEGRATION_XDIST ?= -n 3 --dist loadgroup

DEMO_SCRIPT := scripts/demo.sh
BENCH_SCRIPT := bench/run.py

APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends
# $(call ensure_command,COMMAND,DEBIAN_PACKAGE): install the package when the command is missing
define ensure_command
command -v $(1) >/dev/null 2>&1 || { \
  echo "== $(1) not found: installing Debian package $(2)"; \
  apt-get update -q && $(APT_INSTALL) $(2); }
endef

.PHONY: help venv sim collection-path ansible-test-cache stage setup tools browser container-tools \
        units sanity lint docs-lint simtests integration molecule build-test fleet fleet-tests fleet-tools fleet-down systemd-tests systemd-tools test bench demo demo-clean \
        constraints eda-venv eda-constraints clean distclean

help:
	@echo "make test             set up, then run: $(TEST_STEPS) ($(TEST_SIDE_BY_SIDE) side by side); ends with 'summary: N passed, N failed, N skipped'"
	@echo "make demo             the README's demo ($(DEMO_SCRIPT)); KEEP=1 leaves the fleet running"
	@echo "make demo-clean       end a fleet left running by KEEP=1 make demo"
	@echo "make venv             .venv with the pinned requirements/ (controller + managed host)"
	@echo "make sim              build the simulated GPU host's fake NVML into simulator/build/"
	@echo "make collection-path  .collections/ansible_collections/gpuops/fleet -> this checkout (ansible.cfg)"
	@echo "make units|sanity|lint|docs-lint|simtests|integration|molecule|build-test   one check"
	@echo "make fleet-tests      playbooks over SSH on a fleet of namespaced nodes (root; installs openssh-server, sudo)"
	@echo "make systemd-tests    the role's systemd launch mode against systemd booted in a container (root; installs debootstrap, systemd-container)"
	@echo "make bench            benchmarks ($(BENCH_SCRIPT))"
	@echo "make constraints      re-pin requirements/constraints.txt from .venv"
	@echo "make eda-venv         .venv-eda: ansible-rulebook (requirements/eda.txt) and Debian's Java 17, for self-healing"
	@echo "make clean            remove build outputs; distclean also removes .venv"

# ---------------------------------------------------------------- set-up

venv: $(VENV_STAMP)

$(VENV_STAMP): $(REQUIREMENTS)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
	  { echo "$(PYTHON) is not Python 3.11: run 'make PYTHON=/path/to/python3.11 ...'" >&2; exit 1; }
	@$(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || \
	  { echo "== $(PYTHON) cannot create a venv: installing python3.11-venv"; apt-get update -q && $(APT_INSTALL) python3.11-venv; }
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check -q -r requirements/controller.txt -r requirements/managed-host.txt
	$(PY) -m pip check
	@touch $@

# self-healing (extensions/eda, docs/self-healing.md): ansible-rulebook in a venv of its own, with Debian's Java 17
EDA_VENV := $(CURDIR)/.venv-eda
EDA_STAMP := $(EDA_VENV)/.requirements-installed
EDA_JAVA := /usr/lib/jvm/java-17-openjdk-$$(dpkg --print-architecture)/bin/java

eda-venv: $(EDA_STAMP)
	@$(call ensure_command,$(EDA_JAVA),openjdk-17-jre-headless)

$(EDA_STAMP): requirements/eda.txt requirements/eda-constraints.txt
	@[ -x $(EDA_VENV)/bin/python ] || $(PYTHON) -m venv $(EDA_VENV)
	$(EDA_VENV)/bin/python -m pip install --disable-pip-version-check -q -r requirements/eda.txt
	$(EDA_VENV)/bin/python -m pip check
	@touch $@

eda-constraints: eda-venv
	@{ echo "# Every package of .venv-eda, pinned (pip freeze of a venv built from eda.txt). Regenerate with: make eda-constraints"; \
	   $(EDA_VENV)/bin/python -m pip freeze --disable-pip-version-check | LC_ALL=C sort -f; } > requirements/eda-constraints.txt

tools:
	@$(call ensure_command,gcc,gcc)
	@$(call ensure_command,shellcheck,shellcheck)
	@$(call ensure_command,systemd-analyze,systemd)

sim:
	@$(call ensure_command,gcc,gcc)
	$(MAKE) --no-print-directory -C simulator/nvml

collection-path:
	@mkdir -p .collections/ansible_collections/gpuops
	@ln -sfn ../../.. .collections/ansible_collections/gpuops/fleet
	@[ -f .collections/ansible_collections/gpuops/fleet/galaxy.yml ]

# ansible-test bootstraps pip in its sanity venvs with a get-pip script from a
# host these machines cannot reach: put an offline one and the pip wheel it
# installs (from PyPI) where ansible-test looks, ~/.ansible/test/cache/.
ansible-test-cache: venv
	@version=$$($(PY) -c 'from types import SimpleNamespace; \
	  from ansible_test._internal.python_requirements import get_venv_packages; \
	  print(get_venv_packages(SimpleNamespace(version="3.11"))["pip"])'); \
	cache=$$HOME/.ansible/test/cache; mkdir -p "$$cache"; \
	[ -f "$$cache/pip-$$version-py3-none-any.whl" ] || \
	  $(PY) -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: -d "$$cache" "pip==$$version"; \
	cp .ci/get_pip_offline.py "$$cache/get_pip_$${version//./_}.py"

setup: venv tools sim collection-path ansible-test-cache

# a copy of the collection, as a commit would hold it, for ansible-test
# $(call copy_junit,STEP): keep ansible-test's JUnit results as tests/output/junit/STEP-*.xml
define copy_junit
for f in $(STAGE)/tests/output/junit/*.xml; do if [ -e "$$f" ]; then cp "$$f" $(JUNIT)/$(1)-$${f##*/}; fi; done
endef

stage:
	@.ci/stage-collection.sh $(ANSIBLE_TEST_ROOT)

# ---------------------------------------------------------------- checks

units: venv ansible-test-cache stage
	@mkdir -p $(JUNIT)
	rc=0; cd $(STAGE) && $(ANSIBLE_TEST) units $(ANSIBLE_TEST_ARGS) --requirements || rc=$$?; \
	  $(call copy_junit,units); \
	  exit $$rc

sanity: venv tools ansible-test-cache stage
	@mkdir -p $(JUNIT)
	rc=0; cd $(STAGE) && $(ANSIBLE_TEST) sanity $(ANSIBLE_TEST_ARGS) --junit || rc=$$?; \
	  $(call copy_junit,sanity); \
	  $(PY) .ci/junit_summary.py require-ran $(STAGE)/tests/output/junit $(SANITY_REQUIRED) || rc=1; \
	  exit $$rc

lint: venv collection-path
	ansible-lint --profile production

# the collection's docs as community collections check them: every plugin's and the role's documentation parses,
# its markup (M(), O(), P(), ...) names what exists; run from .collections/ (the ansible_collections/NS/NAME layout)
docs-lint: venv collection-path
	cd .collections/ansible_collections/gpuops/fleet && antsibull-docs lint-collection-docs --plugin-docs .

simtests: venv sim
	$(PYTEST) tests/simulator --junitxml=$(JUNIT)/simtests.xml

# the fleet report's tests and bench load its page in a real headless browser (Debian's chromium)
browser:
	@$(call ensure_command,chromium,chromium)

# real containers for the integration tests (tests/integration/test_gpu_reclaim_containers.py, tests/support/containers.py):
# root's podman with runc as the OCI runtime (Debian's podman depends on crun or runc) and catatonit for `run --init`
container-tools:
	@$(call ensure_command,podman,podman runc catatonit)
	@$(call ensure_command,runc,runc)
	@$(call ensure_command,catatonit,catatonit)
	@# dockerd for the docker tests, which start a daemon of their own (its own data root, no bridge, no iptables); the
	@# package's service is not started (policy-rc.d). Where it cannot be installed those tests skip, saying why.
	@$(call ensure_command,dockerd,docker.io) || echo "== docker.io could not be installed: the docker tests skip"

integration: venv eda-venv tools browser container-tools sim collection-path
	@# test_role_takeover.py starts a vLLM server by hand in a real tmux pane
	@$(call ensure_command,tmux,tmux)
	@# test_example_first_day.py runs examples/ as shipped: its inventory becomes root with sudo (ansible_become)
	@$(call ensure_command,sudo,sudo)
	@# test_watch_rules.py checks and tests the Prometheus alert rules (extensions/prometheus) with the real promtool
	@$(call ensure_command,promtool,prometheus)
	$(PYTEST) $(INTEGRATION_XDIST) --durations=20 tests/integration --junitxml=$(JUNIT)/integration.xml

# the role's molecule scenario (extensions/molecule/default): one simulated host, converge, idempotence, verify
molecule: venv sim collection-path
	molecule reset && molecule test

build-test: venv sim
	$(PYTEST) tests/build --junitxml=$(JUNIT)/build-test.xml

# the SSH fleet (simulator/gpusim/fleet): namespaces, sshd and sudo on each node
fleet-tools:
	@$(call ensure_command,/usr/sbin/sshd,openssh-server)
	@$(call ensure_command,ssh,openssh-client)
	@$(call ensure_command,sudo,sudo)
	@$(call ensure_command,ip,iproute2)
	@$(call ensure_command,nsenter,util-linux)

fleet: venv sim collection-path fleet-tools
	$(PYTEST) tests/fleet --junitxml=$(JUNIT)/fleet.xml

fleet-tests: fleet

# ends a fleet left by `python -m gpusim.fleet --dir build/fleet up`, by its record
fleet-down:
	@if [ -f build/fleet/fleet.json ]; then PYTHONPATH=simulator $(PY) -m gpusim.fleet --dir build/fleet down; fi

# the role's systemd launch mode against a real systemd: a Debian bookworm root made by debootstrap (cached in
# build/systemd-test/), booted with systemd-nspawn; see docs/systemd-test.md
systemd-tools:
	@$(call ensure_command,debootstrap,debootstrap)
	@$(call ensure_command,systemd-nspawn,systemd-container)
	@$(call ensure_command,nsenter,util-linux)

systemd-tests: venv sim collection-path systemd-tools
	$(PYTEST) tests/systemd --junitxml=$(JUNIT)/systemd-tests.xml

test: setup
	@rm -rf $(OUTPUT) && mkdir -p $(JUNIT) && : > $(STEPS_FILE)
	@for step in $(filter-out $(TEST_SIDE_BY_SIDE),$(TEST_STEPS)); do \
	  echo; echo "==================== make $$step ===================="; \
	  start=$$(date +%s); rc=0; \
	  $(MAKE) --no-print-directory $$step || rc=$$?; \
	  echo "$$step $$rc $$(( $$(date +%s) - start ))" >> $(STEPS_FILE); \
	done; \
	echo; echo "==================== make $(TEST_SIDE_BY_SIDE): side by side ===================="; \
	$(if $(TEST_SIDE_BY_SIDE_TOOLS),$(MAKE) --no-print-directory $(TEST_SIDE_BY_SIDE_TOOLS) || true;) \
	for step in $(filter $(TEST_SIDE_BY_SIDE),$(TEST_STEPS)); do \
	  echo "make $$step: started $$(date -u +%H:%M:%S), output in tests/output/$$step.log"; \
	  ( start=$$(date +%s); rc=0; \
	    $(MAKE) --no-print-directory $$step > $(OUTPUT)/$$step.log 2>&1 || rc=$$?; \
	    echo "$$step $$rc $$(( $$(date +%s) - start ))" > $(OUTPUT)/$$step.step ) & \
	done; \
	wait; \
	for step in $(filter $(TEST_SIDE_BY_SIDE),$(TEST_STEPS)); do \
	  echo; echo "==================== make $$step ===================="; \
	  cat $(OUTPUT)/$$step.log || true; \
	  if [ -f $(OUTPUT)/$$step.step ]; then cat $(OUTPUT)/$$step.step; else echo "$$step 1 0"; fi >> $(STEPS_FILE); \
	done; \
	$(PY) .ci/junit_summary.py summary $(JUNIT) $(STEPS_FILE)

# ---------------------------------------------------------------- other

bench: venv sim collection-path browser
	@[ -f $(BENCH_SCRIPT) ] || { echo "bench: $(BENCH_SCRIPT) does not exist yet" >&2; exit 1; }
	$(PY) $(BENCH_SCRIPT)

# as root, podman too: the demo's gpu-node-03 runs its server in a container (left out otherwise)
demo: venv sim collection-path $(if $(filter 0,$(shell id -u)),container-tools)
	@[ -f $(DEMO_SCRIPT) ] || { echo "demo: $(DEMO_SCRIPT) does not exist yet" >&2; exit 1; }
	bash $(DEMO_SCRIPT)

# ends a fleet left by `KEEP=1 make demo`: its containers, image and CDI spec by the names the demo gave them, then
# gpusim ends its processes by recorded PID
demo-clean:
	bash $(DEMO_SCRIPT) clean

constraints: venv
	@{ echo "# Every package of the control node + test venv, pinned (pip freeze of a venv built from"; \
	   echo "# controller.txt + managed-host.txt). Regenerate with: make constraints"; \
	   $(PY) -m pip freeze --disable-pip-version-check | LC_ALL=C sort -f; } > requirements/constraints.txt.new
	@mv requirements/constraints.txt.new requirements/constraints.txt

clean: demo-clean fleet-down
	rm -rf build dist .collections .ansible simulator/build tests/output bench/results gpuops-fleet-*.tar.gz

distclean: clean
	rm -rf $(VENV) $(EDA_VENV)
