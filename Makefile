# stratctl: every command a developer or CI needs. `make demo` and `make test` are the two
# the README starts with; both set up what they need on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STUDY  ?= examples/demo.yaml
REAL_STUDY ?= examples/real-trials.yaml

.PHONY: venv test unit e2e lint docs demo bench completions testbed-build testbed-up testbed-down testbed-apf-on testbed-apf-off slurm-up slurm-down yarn-up yarn-down yarn-am clean

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	# bytecode now, as a regular install has it: every command's start-up is measured (bench/)
	$(BIN)/python -m compileall -q stratctl >/dev/null
	touch $@

## The test command (README, .ci/run): lint first (seconds: a style or type slip fails
## before any test runs), the documentation site built strictly, the Debian packages the
## tests use (promtool, the testbed's Prometheus, the real node's containerd, runc, CNI
## plugins and image tools), unit tests, then end-to-end tests on the local testbed (built
## and started by the session fixture if needed; with its real node unless
## STRATCTL_TESTBED_REAL_NODE=0). The slowest 25 tests are listed at the end: the time
## budget of a fresh machine's run (70 minutes, cold build included) is watched from them.
test: lint docs
	bash testbed/packages.sh
	$(BIN)/python -m pytest -q --durations=25 tests

unit: venv
	$(BIN)/python -m pytest -q tests/unit

e2e: venv
	$(BIN)/python -m pytest -q -m e2e tests/e2e

## Lint: ruff's rules and its formatting (pyproject.toml [tool.ruff]), the types
## ([tool.mypy]: the whole package strict, no bare generics) and the
## import contract (.importlinter: the layers, the Kubernetes backend's rooms, and no import
## cycle anywhere in stratctl/; tests/unit/test_import_contracts.py shows each failing on
## one import more).
LINTED := stratctl tests bench dashboards examples testbed templates setup.py
lint: venv
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy
	$(BIN)/lint-imports

## The documentation site (mkdocs.yml, docs/): built strictly into site/, so a broken link,
## a missing page or any warning fails; the study file reference and the benchmark tables
## are generated at build time (docs/gen/hooks.py).
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -d site

## The end-to-end demo: bring up the local testbed (building it on first use), show the
## plan of an example study, then submit it as the restricted user and follow it live.
demo: venv
	$(BIN)/stratctl plan $(STUDY)
	@kubeconfig=$$(bash testbed/up.sh | tail -n 1) && \
	  study=$$($(BIN)/python -c "import yaml; print(yaml.safe_load(open('$(STUDY)'))['name'])") && \
	  echo "testbed kubeconfig: $$kubeconfig" && \
	  prometheus=$$(cat "$$(dirname "$$kubeconfig")/prometheus-url") && \
	  echo "testbed Prometheus: $$prometheus" && \
	  $(BIN)/stratctl submit $(STUDY) --kubeconfig "$$kubeconfig" --context restricted --poll-interval 1 \
	    --prometheus-url "$$prometheus" && \
	  $(BIN)/stratctl status "$$study" --kubeconfig "$$kubeconfig" --context restricted -n stratctl-e2e && \
	  if [ "$$(cat "$$(dirname "$$kubeconfig")/real-node" 2>/dev/null)" = 1 ]; then \
	    echo "--- real processes on the testbed's real node: $(REAL_STUDY)" && \
	    $(BIN)/stratctl submit $(REAL_STUDY) --kubeconfig "$$kubeconfig" --context restricted --poll-interval 1 && \
	    echo "--- what the best trial printed (stratctl logs real-trials --best)" && \
	    $(BIN)/stratctl logs real-trials --best --kubeconfig "$$kubeconfig" --context restricted -n stratctl-e2e; \
	  fi

## Benchmarks: rendering (no cluster), then submission, status and the adaptive experiment
## on the local testbed. Each prints its figures against a baseline run side by side.
bench: venv
	$(BIN)/python bench/render_bench.py
	$(BIN)/python bench/startup_bench.py
	$(BIN)/python bench/submit_bench.py
	$(BIN)/python bench/status_bench.py
	$(BIN)/python bench/scale_bench.py
	$(BIN)/python bench/quota_bench.py
	$(BIN)/python bench/mixed_shapes.py
	$(BIN)/python bench/adaptive_experiment.py
	$(BIN)/python bench/search_bench.py
	$(BIN)/python bench/slurm_bench.py
	$(BIN)/python bench/yarn_bench.py

## Regenerate completions/stratctl.{bash,zsh,fish} from the CLI definition.
completions: venv
	$(BIN)/python -m stratctl.cli.completions completions

testbed-build:
	bash testbed/build.sh

testbed-up:
	bash testbed/up.sh

testbed-down:
	bash testbed/down.sh

testbed-apf-on:
	bash testbed/apf.sh on

testbed-apf-off:
	bash testbed/apf.sh off

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache

## The local Slurm testbed (testbed/slurm/): munged, slurmctld and four slurmd with four
## fake GPUs each, as local processes; the Slurm and YARN tests (tests/backends) bring it up themselves.
slurm-up:
	bash testbed/slurm/packages.sh
	bash testbed/slurm/up.sh

slurm-down:
	bash testbed/slurm/down.sh

## The local YARN testbed (testbed/yarn/): a ResourceManager (Capacity Scheduler, queues
## prod and research, preemption on) and two NodeManagers of 4 GPUs each, Hadoop's
## MiniYARNCluster in one JVM; the Slurm and YARN tests (tests/backends) bring it up themselves.
## yarn-am builds stratctl's gang application master (yarn-am/) for a cluster of your own.
yarn-up:
	bash testbed/yarn/up.sh

yarn-down:
	bash testbed/yarn/down.sh

yarn-am:
	bash yarn-am/build.sh
